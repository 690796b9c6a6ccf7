"""RateLimitRetryPolicy with pydantic-ai's real OpenAI client against a local server that answers HTTP 429.

The model's second request is rate limited (429 with ``retry-after-ms``, long enough for the OpenAI
client's own two retries to give up). On Airflow 3.4 the policy reschedules the task: the same try runs
again without using a retry and replays the model answer and the tool calls recorded before the 429.
On Airflow 3.3 (retry policies, no reschedule) it retries after the provider's wait, replaying the same.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from packaging.version import Version
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import make_dag, run_dag, task_states, xcom_value
from tests.helpers.compat import airflow_version
from tests.helpers.openai_server import ScriptedOpenAIServer

pytestmark = [
    pytest.mark.usefixtures("airflow_db"),
    pytest.mark.skipif(
        airflow_version() < Version("3.3"),
        reason=f"retry policies are new in Airflow 3.3 (installed: {airflow_version()})",
    ),
]

RATE_LIMITED_ANSWERS = 3
"""The first request and the OpenAI client's own two retries."""


def test_a_rate_limited_model_is_waited_out_and_the_recorded_steps_replay(monkeypatch, tmp_path, capfd):
    from airflow_pydantic_ai.operators.agent import AgentOperator
    from airflow_pydantic_ai.retry_policy import CAN_RESCHEDULE, RateLimitRetryPolicy

    calls: dict[str, int] = {"fetch_ticket": 0, "notify_team": 0, "429": 0}

    def fetch_ticket(ticket_id: int) -> dict[str, Any]:
        """Fetch a ticket."""
        calls["fetch_ticket"] += 1
        return {"id": ticket_id, "title": "Login page times out"}

    def notify_team(ticket_id: int) -> str:
        """Notify the team."""
        calls["notify_team"] += 1
        return "posted"

    def script(request: dict[str, Any]) -> dict[str, Any]:
        if not any(message.get("role") == "tool" for message in request["messages"]):
            return {"tool_calls": [("fetch_ticket", {"ticket_id": 42}), ("notify_team", {"ticket_id": 42})]}
        if calls["429"] < RATE_LIMITED_ANSWERS:
            calls["429"] += 1
            return {
                "status": 429,
                "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
                "headers": {"retry-after-ms": "20"},
            }
        return {"content": "Ticket 42 triaged and the team notified."}

    with ScriptedOpenAIServer(script) as server:
        server.connect(monkeypatch)
        monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
        # A retry would not come back in time.
        with make_dag("e2e_rate_limit_policy", retry_delay=timedelta(hours=1)) as dag:
            AgentOperator(
                task_id="triage",
                prompt="Triage ticket 42 and tell the team.",
                llm_conn_id="local_openai",
                toolsets=[FunctionToolset([fetch_ticket, notify_team])],
                durable=True,
                retry_policy=RateLimitRetryPolicy(delay=timedelta(seconds=30), max_reschedules=3),
            )
        dr = run_dag(dag)
        out = capfd.readouterr().out

    assert dr.state == "success", out[-4000:]
    assert xcom_value(dr, "triage") == "Ticket 42 triaged and the team notified."
    # The policy waited what the provider asked (20 ms), not its own 30 s default.
    if CAN_RESCHEDULE:
        assert task_states(dr)[("triage", -1)] == ("success", 1), "a reschedule does not use a retry"
        assert "Retry policy rescheduled the task" in out
    else:
        assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert re.search(r"ModelRateLimitError \(HTTP 429\) from gpt-test: re(scheduled|tried) in 0\.02 s", out)
    assert "left by an earlier run" not in out
    assert calls == {"fetch_ticket": 1, "notify_team": 1, "429": RATE_LIMITED_ANSWERS}
    assert "Durable: replayed 3 cached steps (1 model, 2 tool), executed 1 new steps (1 model, 0 tool)" in out
    assert len(server.requests) == 1 + RATE_LIMITED_ANSWERS + 1
