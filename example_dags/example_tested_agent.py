"""
An agent DAG with a test that runs in CI without an LLM (see ``docs/testing.rst``).

``triage`` asks a real model (an OpenAI-compatible endpoint, through the ``support_llm`` connection) to
triage a ticket with the help of a tool. ``tests/test_example_tested_agent.py`` beside this file replays
the steps recorded once in ``tests/fixtures/example_tested_agent/``: no API key, no model request, no
tool call; and if someone edits the prompt, the instructions, the tool or the model without recording
again, the test fails and says what changed. ``pytest --durable-record`` records again against the model.
"""

from __future__ import annotations

import logging
from datetime import datetime

from airflow.sdk import DAG
from pydantic import BaseModel
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

log = logging.getLogger("example_tested_agent.tools")


# [START howto_testing_agent_dag]
class Triage(BaseModel):
    ticket_id: int
    priority: str
    summary: str


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a support ticket from the helpdesk."""
    log.info("fetch_ticket(%s) called", ticket_id)  # a real one would call the helpdesk's API
    return {"id": ticket_id, "title": "Login page times out", "customer_tier": "enterprise"}


with DAG(
    dag_id="example_tested_agent",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai"],
):
    triage = AgentOperator(
        task_id="triage",
        prompt="Triage ticket 42.",
        llm_conn_id="support_llm",
        system_prompt="You triage support tickets. Fetch the ticket first.",
        output_type=Triage,
        toolsets=[FunctionToolset([fetch_ticket])],
        durable=True,
        retries=1,
    )
# [END howto_testing_agent_dag]
