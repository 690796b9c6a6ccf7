"""The LLM of ``example_dags/example_tested_agent.py``, scripted for the OpenAI-compatible test server.

:func:`triage_script` answers as a model would: first it asks for ``fetch_ticket``, then it returns the
structured output. :func:`support_llm_connection` is the ``support_llm`` connection pointing at a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DAG = ROOT / "example_dags" / "example_tested_agent.py"
EXAMPLE_FIXTURES = ROOT / "example_dags" / "tests" / "fixtures" / "example_tested_agent"
TRIAGE = {"ticket_id": 42, "priority": "high", "summary": "Enterprise customer: the login page times out."}


def triage_script(request: dict[str, Any]) -> dict[str, Any]:
    if not any(message.get("role") == "tool" for message in request["messages"]):
        return {"tool_calls": [("fetch_ticket", {"ticket_id": 42})]}
    return {"tool_calls": [("final_result", TRIAGE)]}


def support_llm_connection(base_url: str, api_key: str = "sk-test-key") -> str:
    """``AIRFLOW_CONN_SUPPORT_LLM``: the example's model, served by the test server at ``base_url``."""
    return json.dumps(
        {
            "conn_type": "pydantic_ai",
            "host": base_url,
            "password": api_key,
            "extra": {"model": "openai-chat:gpt-4o-mini"},
        }
    )
