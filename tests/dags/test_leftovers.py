"""What a failed durable task leaves behind, and what its log says about it (dag.test() with real retries)."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import make_dag, run_dag, task_states
from tests.helpers.durable import stored_entries
from tests.helpers.operator_runs import durable_operator

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

RETRY_ZERO_HINT = "Durable: this task has retries=0: a retry is what replays the recorded steps"
LAST_TRY = "Durable: no retry is coming, so the cache at "


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket."""
    return {"id": ticket_id}


def notify_team(ticket_id: int) -> str:
    """Always fails."""
    raise ConnectionError("chat API down")


def _model_down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ConnectionError("model endpoint down")


def test_a_try_that_writes_nothing_leaves_no_empty_folders(capfd, cache_base):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag("leftover_empty", retries=1) as dag:
        AgentOperator(task_id="triage", prompt="Triage 42.", agent=Agent(FunctionModel(_model_down)), durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "failed"
    assert task_states(dr)[("triage", -1)] == ("failed", 2)
    assert "model endpoint down" in out
    # The configured base stays (it was there before the task); nothing below it does.
    assert cache_base.is_dir()
    assert list(cache_base.iterdir()) == []


def test_a_failed_try_keeps_folders_that_hold_steps(capfd, cache_base):
    with make_dag("leftover_kept", retries=0) as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage 42.")
    dr = run_dag(dag)
    capfd.readouterr()
    assert dr.state == "failed"
    assert len(stored_entries(cache_base)) == 2


def test_last_try_says_the_cache_is_kept_not_that_a_retry_comes(capfd, cache_base):
    with make_dag("leftover_last_try", retries=1) as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage 42.")
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "failed"
    first, _, last = out.partition("Durable: replayed 0 cached steps")
    assert "failed after" in first
    assert "it is not cached and runs again on a retry" in first
    assert LAST_TRY not in first
    assert "runs again on a retry" not in last
    assert "it is not cached and no retry is coming (this is the last try)" in last
    location = f"file://{cache_base}/leftover_last_try/{dr.run_id}/triage/-1/"
    assert out.count(f"{LAST_TRY}{location} is kept") == 1
    assert f"rm -r '{cache_base}/leftover_last_try/{dr.run_id}/triage/-1'" in last
    assert RETRY_ZERO_HINT not in out


@pytest.mark.parametrize(("retries", "hints"), [(0, 1), (1, 0)])
def test_retries_zero_earns_one_hint(capfd, cache_base, retries: int, hints: int):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag(f"leftover_hint_{retries}", retries=retries) as dag:
        AgentOperator(task_id="hello", prompt="Say hi.", model_id="test", durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert out.count(RETRY_ZERO_HINT) == hints
