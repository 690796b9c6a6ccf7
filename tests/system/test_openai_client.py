"""Durable replay through pydantic-ai's real OpenAI client, against a local scripted server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import current_try, make_dag, run_dag, xcom_value
from tests.helpers.openai_server import ScriptedOpenAIServer
from tests.helpers.operator_runs import durable_and_plain_output

pytestmark = pytest.mark.usefixtures("airflow_db")


def _script(request: dict[str, Any]) -> dict[str, Any]:
    if not any(message.get("role") == "tool" for message in request["messages"]):
        return {"tool_calls": [("fetch_ticket", {"ticket_id": 42}), ("notify_team", {"ticket_id": 42})]}
    return {"content": "Ticket 42 triaged and the team notified."}


# "pydanticai" is common.ai's connection type: a DAG that names such a connection runs unchanged here.
@pytest.mark.parametrize("conn_type", ["pydantic_ai", "pydanticai"])
def test_real_openai_client_steps_replay_through_a_connection(monkeypatch, tmp_path, capfd, conn_type):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    calls = {"fetch_ticket": 0, "notify_team": 0}

    def fetch_ticket(ticket_id: int) -> dict:
        """Fetch a ticket."""
        calls["fetch_ticket"] += 1
        return {"id": ticket_id, "title": "Login page times out"}

    def notify_team(ticket_id: int) -> str:
        """Notify the team; down on the first try."""
        calls["notify_team"] += 1
        if current_try() == 1:
            raise ConnectionError("chat API down")
        return "posted"

    with ScriptedOpenAIServer(_script) as server:
        server.connect(monkeypatch, conn_type=conn_type)
        monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
        with make_dag(f"e2e_openai_client_{conn_type}") as dag:
            AgentOperator(
                task_id="triage",
                prompt="Triage ticket 42 and tell the team.",
                llm_conn_id="local_openai",
                system_prompt="You triage support tickets.",
                toolsets=[FunctionToolset([fetch_ticket, notify_team])],
                durable=True,
            )
        dr = run_dag(dag)
        out = capfd.readouterr().out

    assert dr.state == "success"
    assert xcom_value(dr, "triage") == "Ticket 42 triaged and the team notified."
    # Try 1 asked once (tool calls); try 2 replayed that answer and asked only for the final one.
    assert len(server.requests) == 2
    assert calls == {"fetch_ticket": 1, "notify_team": 2}
    assert "Durable: replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)" in out
    assert re.search(r"Durable: the replay saved 1 model request \(101 input tokens, 10 output tokens\)", out)
    assert not list(tmp_path.rglob("*.json"))


def _rate_limited_script(request: dict[str, Any]) -> dict[str, Any]:
    """Answers an identical request identically (as a caching gateway would), but with a fresh
    ``created`` second and response id, as every provider does."""
    if not any(message.get("role") == "tool" for message in request["messages"]):
        return {"tool_calls": [("fetch_ticket", {"ticket_id": 42}), ("notify_team", {"ticket_id": 42})]}
    return {"content": "Ticket 42 triaged and the team notified."}


def test_a_tool_retry_that_failed_try_1_is_not_replayed_over_the_real_client(monkeypatch, tmp_path, capfd):
    """notify_team asks for a retry on try 1 with agent retries=0: try 1 fails, and try 2 must succeed as the
    same task without durable does. The answer is asked again; its fetch_ticket call is the same call in the
    same conversation (only the response's per-call stamps differ), so it replays instead of running twice."""
    from airflow.sdk import get_current_context
    from pydantic_ai import ModelRetry

    from airflow_pydantic_ai.operators.agent import AgentOperator

    calls: dict[str, int] = {}

    def count(name: str) -> None:
        key = f"{name}:{get_current_context()['ti'].task_id}"
        calls[key] = calls.get(key, 0) + 1

    def fetch_ticket(ticket_id: int) -> dict:
        """Fetch a ticket."""
        count("fetch_ticket")
        return {"id": ticket_id, "title": "Login page times out"}

    def notify_team(ticket_id: int) -> str:
        """Notify the team; rate limited on the first try."""
        count("notify_team")
        if current_try() == 1:
            raise ModelRetry("rate limited (HTTP 429)")
        return "posted"

    with ScriptedOpenAIServer(_rate_limited_script) as server:
        server.connect(monkeypatch)
        monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
        with make_dag("e2e_openai_transient_retry") as dag:
            for task_id, durable in (("durable", True), ("plain", False)):
                AgentOperator(
                    task_id=task_id,
                    prompt="Triage ticket 42 and tell the team.",
                    llm_conn_id="local_openai",
                    toolsets=[FunctionToolset([fetch_ticket, notify_team])],
                    agent_params={"retries": 0},
                    durable=durable,
                )
        dr = run_dag(dag)
        out = capfd.readouterr().out

    assert durable_and_plain_output(dr) == "Ticket 42 triaged and the team notified."
    assert calls["notify_team:durable"] == calls["notify_team:plain"] == 2
    assert calls["fetch_ticket:plain"] == 2
    assert calls["fetch_ticket:durable"] == 1, "the re-asked answer's other call replays"
    # Try 1: one request. Try 2: the answer that failed is asked again, then the final answer.
    assert "Durable: replayed 1 cached steps (0 model, 1 tool), executed 3 new steps (2 model, 1 tool)" in out
    assert len(server.requests) == 6  # 3 per task
