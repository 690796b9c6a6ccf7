"""durable_mode on real dag.test() runs: an unknown mode fails the task at its start, off is durable=False, record
runs live over a recorded cache, replay with nothing recorded fails at once, keep-cache keeps it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states, xcom_value

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

CALLS: Counter[str] = Counter()


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket; the helpdesk is down on the first try."""
    CALLS["fetch_ticket"] += 1
    if current_try() == 1:
        raise ConnectionError("helpdesk down (first try only)")
    return {"id": ticket_id}


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    CALLS["model"] += 1
    if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
        return ModelResponse(parts=[ToolCallPart("fetch_ticket", {"ticket_id": 42}, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart("Ticket 42 triaged")])


def _agent() -> Agent[Any, Any]:
    return Agent(FunctionModel(scripted, model_name="scripted"), toolsets=[FunctionToolset([fetch_ticket])])


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    """This module's counts start empty (the cache folder is the dags tier's ``cache_base``)."""
    CALLS.clear()


def _dag(dag_id: str, retries: int = 1, **operator: Any) -> Any:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag(dag_id, retries=retries) as dag:
        AgentOperator(task_id="triage", prompt="Triage ticket 42.", agent=_agent(), **operator)
    return dag


@pytest.mark.parametrize(
    ("option", "argument", "message"),
    [
        ("sometimes", None, "[pydantic_ai] durable_mode 'sometimes' is not one of auto, replay, record, off"),
        ("auto", "replays", "AgentOperator(durable_mode=...) 'replays' is not one of auto, replay, record, off"),
    ],
)
def test_an_unknown_mode_fails_the_task_at_its_start(option, argument, message, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_MODE", option)
    dr = run_dag(_dag(f"mode_unknown_{option}", retries=0, durable=True, durable_mode=argument))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert message in out
    assert Counter() == CALLS


def test_off_runs_a_durable_task_as_durable_false(cache_base, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_MODE", "off")
    dr = run_dag(_dag("mode_off", durable=True))
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert "Durable:" not in out
    assert not cache_base.exists()
    # Without the cache the retry repeats the model's first answer.
    assert Counter(model=3, fetch_ticket=2) == CALLS


def test_record_runs_every_step_live_over_what_was_recorded(capfd):
    dr = run_dag(_dag("mode_record", durable_mode="record"))
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert xcom_value(dr, "triage") == "Ticket 42 triaged"
    # Try 1 recorded the model's first answer; try 2 (record) deleted it and asked again.
    assert "Durable: durable_mode = record: the cache was discarded; every step runs live" in out
    assert Counter(model=3, fetch_ticket=2) == CALLS
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (2 model, 1 tool)" in out


def test_auto_replays_where_record_did_not(capfd):
    dr = run_dag(_dag("mode_auto", durable_mode="auto"))
    assert dr.state == "success"
    assert Counter(model=2, fetch_ticket=2) == CALLS


def test_replay_with_nothing_recorded_fails_at_once_before_the_model(cache_base, capfd):
    dr = run_dag(_dag("mode_replay_empty", durable_mode="replay"))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert task_states(dr)[("triage", -1)] == ("failed", 1)  # no retry: it would miss the same way
    assert "model step 1 (function:scripted) of the agent of task 'triage' is not in the durable cache at" in out
    assert Counter() == CALLS


def test_replay_from_a_missing_fixture_fails_at_once_naming_the_file(tmp_path, capfd):
    dr = run_dag(_dag("mode_replay_no_fixture", durable_mode="replay", durable_fixtures=str(tmp_path / "nowhere")))
    out = capfd.readouterr().out
    assert task_states(dr)[("triage", -1)] == ("failed", 1)
    assert f"no fixture for task 'triage' at {tmp_path / 'nowhere' / 'triage.json'}" in out
    assert Counter() == CALLS


def test_keep_cache_keeps_a_successful_tasks_cache_and_record_writes_the_fixture(cache_base, tmp_path, capfd):
    fixtures = tmp_path / "fixtures" / "{{ dag.dag_id }}"
    dr = run_dag(_dag("mode_keep", durable_mode="record", durable_keep_cache=True, durable_fixtures=str(fixtures)))
    out = capfd.readouterr().out
    assert dr.state == "success"
    kept = cache_base / "mode_keep"
    assert any(kept.rglob("model-*.json"))
    assert "durable_keep_cache: the cache at" in out
    assert (tmp_path / "fixtures" / "mode_keep" / "triage.json").is_file()  # durable_fixtures is templated


def test_fixtures_alone_make_a_task_durable_and_replay(tmp_path, capfd):
    fixtures = tmp_path / "fixtures"
    recorded = run_dag(_dag("mode_fixture_only", durable_mode="record", durable_fixtures=str(fixtures)))
    assert recorded.state == "success"
    CALLS.clear()
    capfd.readouterr()

    dr = run_dag(_dag("mode_fixture_only", durable_fixtures=str(fixtures)))

    out = capfd.readouterr().out
    assert task_states(dr)[("triage", -1)] == ("success", 1)
    assert xcom_value(dr, "triage") == "Ticket 42 triaged"
    assert not CALLS
    assert "Durable: replayed 3 cached steps (2 model, 1 tool), executed 0 new steps (0 model, 0 tool)" in out
