"""Record once, replay offline: the example agent DAG recorded against the OpenAI-compatible test server (the
real ``openai`` client over HTTP), then replayed from its fixture with the server stopped or watching."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import run_dag, xcom_value
from tests.helpers.example_llm import EXAMPLE_DAG, TRIAGE, support_llm_connection, triage_script
from tests.helpers.openai_server import ScriptedOpenAIServer

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable.storage.fixtures import fixture_path
from airflow_pydantic_ai.testing import DurableReplay, ReplayFailed

pytestmark = pytest.mark.usefixtures("airflow_db")

SECRET = "sk-fixture-secret-7f3a"
"""The connection's API key: Airflow registers it with the secrets masker when the task reads the connection."""
TOOL_CALLED = "fetch_ticket(42) called"


def _example_dag() -> Any:
    dags, errors = _compat.load_dags(str(EXAMPLE_DAG))
    assert not errors
    return dags["example_tested_agent"]


@pytest.fixture
def server(monkeypatch):
    with ScriptedOpenAIServer(triage_script) as running:
        monkeypatch.setenv("AIRFLOW_CONN_SUPPORT_LLM", support_llm_connection(running.base_url, SECRET))
        yield running


def _player(tmp_path: Path, monkeypatch, *, record: bool) -> DurableReplay:
    cache = tmp_path / ("record-cache" if record else "replay-cache")
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{cache}")
    return DurableReplay(record=record, cache_base=cache)


def _record(tmp_path, monkeypatch, dag: Any = None) -> Path:
    fixtures = tmp_path / "fixtures"
    result = _player(tmp_path, monkeypatch, record=True)(dag or EXAMPLE_DAG, "triage", fixtures=fixtures)
    assert result.state == "success"
    assert result.xcom == TRIAGE
    return fixtures


def test_record_once_then_replay_with_the_server_stopped(tmp_path, monkeypatch, caplog, capfd):
    caplog.set_level(logging.INFO, logger="example_tested_agent.tools")
    with ScriptedOpenAIServer(triage_script) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SUPPORT_LLM", support_llm_connection(server.base_url, SECRET))
        fixtures = _record(tmp_path, monkeypatch)
    assert len(server.requests) == 2
    assert caplog.text.count(TOOL_CALLED) == 1
    recorded_requests = len(server.requests)
    caplog.clear()
    capfd.readouterr()

    result = _player(tmp_path, monkeypatch, record=False)(EXAMPLE_DAG, "triage", fixtures=fixtures)

    out = capfd.readouterr().out
    assert result.state == "success"
    assert result.xcom == TRIAGE
    assert len(server.requests) == recorded_requests  # and the server is gone: a live request would have failed
    assert TOOL_CALLED not in caplog.text + out
    assert "Durable: replayed 3 cached steps (2 model, 1 tool), executed 0 new steps (0 model, 0 tool)" in out
    fixture = fixture_path(fixtures, "triage")
    assert SECRET not in fixture.read_text()
    print(f"example fixture: {fixture.stat().st_size} bytes")


class OtherTriage(BaseModel):
    ticket_id: int
    priority: str
    summary: str
    owner_team: str


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a support ticket from the new helpdesk API."""
    logging.getLogger("example_tested_agent.tools").info("fetch_ticket(%s) called", ticket_id)
    return {"id": ticket_id}


CHANGES = {
    "prompt": ("prompt", f"Triage ticket 42 today. Key {SECRET}.", "changed: user prompt."),
    "instructions": (
        "system_prompt",
        "You triage support tickets. Fetch the ticket first. Be brief.",
        "changed: instructions/system prompt.",
    ),
    "tool description": ("toolsets", [FunctionToolset([fetch_ticket])], "changed: tool definitions (~fetch_ticket)."),
    "output type": ("output_type", OtherTriage, "changed: output schema."),
    "model id": ("model_id", "openai-chat:gpt-4.1-mini", "changed: model."),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_fails_the_replay_before_any_live_call_and_names_it(change, server, tmp_path, monkeypatch, capfd):
    dag = _example_dag()
    triage = dag.task_dict["triage"]
    triage.prompt = f"Triage ticket 42. Key {SECRET}."
    fixtures = _record(tmp_path, monkeypatch, dag)
    requests = len(server.requests)
    capfd.readouterr()

    attribute, value, named = CHANGES[change]
    setattr(triage, attribute, value)
    with pytest.raises(ReplayFailed) as failed:
        _player(tmp_path, monkeypatch, record=False)(dag, "triage", fixtures=fixtures)

    out = capfd.readouterr().out
    assert str(failed.value).startswith("task triage: model step 1 (openai:gpt-")
    assert named in str(failed.value)
    assert SECRET not in str(failed.value)
    assert len(server.requests) == requests
    assert "fetch_ticket(42) called" not in out
    [message] = {line for line in out.splitlines() if "does not match the fixture" in line and "Exception: " in line}
    assert "Exception: model step 1 (openai:gpt-" in message
    assert "of the agent of task 'triage' does not match the fixture" in message
    assert named in message
    assert SECRET not in out
    assert SECRET not in fixture_path(fixtures, "triage").read_text()
    if change == "prompt":
        assert "-Triage ticket 42. Key ***." in out
        assert "+Triage ticket 42 today. Key ***." in out
        assert "-Triage ticket 42. Key ***.\n+Triage ticket 42 today. Key ***." in str(failed.value)
    # No retry: the code changed, not the world (the example task has retries=1).
    assert out.count("Durable: durable_mode = replay: every step must replay") == 1


def test_record_refreshes_a_stale_fixture(server, tmp_path, monkeypatch):
    dag = _example_dag()
    fixtures = _record(tmp_path, monkeypatch, dag)
    dag.task_dict["triage"].prompt = "Triage ticket 42 before noon."
    with pytest.raises(ReplayFailed, match="changed: user prompt"):
        _player(tmp_path, monkeypatch, record=False)(dag, "triage", fixtures=fixtures)

    _record(tmp_path, monkeypatch, dag)
    refreshed = _player(tmp_path, monkeypatch, record=False)(dag, "triage", fixtures=fixtures)
    assert refreshed.state == "success"
    assert refreshed.xcom == TRIAGE


def test_auto_mode_on_a_fixture_runs_changed_steps_live(server, tmp_path, monkeypatch, capfd):
    dag = _example_dag()
    fixtures = _record(tmp_path, monkeypatch, dag)
    requests = len(server.requests)
    capfd.readouterr()
    triage = dag.task_dict["triage"]
    triage.prompt, triage.durable_fixtures = "Triage ticket 42 before noon.", str(fixtures)
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/auto-cache")

    dr = run_dag(dag.partial_subset(task_ids=["triage"], include_upstream=False))

    out = capfd.readouterr().out
    assert dr.state == "success"
    assert xcom_value(dr, "triage") == TRIAGE
    assert len(server.requests) == requests + 2
    assert "differs from what attempt 1 recorded as step 1; changed: user prompt" in out
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (2 model, 1 tool)" in out


def test_the_example_fixture_replays_and_is_small():
    from tests.helpers.example_llm import EXAMPLE_FIXTURES

    fixture = fixture_path(EXAMPLE_FIXTURES, "triage")
    body = json.loads(fixture.read_text())
    assert [step["kind"] for step in body["steps"]] == ["model", "tool", "model"]
    assert fixture.stat().st_size < 16_000
