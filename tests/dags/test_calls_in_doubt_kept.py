"""Deleting never forgets a call in doubt (issue 35 item 2): the view's delete, and a run's own success cleanup.

``cache rm``, ``cache gc`` and ``cache list`` are tried through the real CLI in ``tests/system/test_cache_cli.py``.
The view's app answers through FastAPI's test client on a real (failed) task instance, as in
``test_active_states.py``; the cache comes from real attempts (``tests/helpers/calls_in_doubt.py``).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import make_dag, run_dag
from tests.helpers.durable import DurableHarness
from tests.helpers.view import view_client, view_query

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.durable import TaskIdentity

pytestmark = pytest.mark.usefixtures("airflow_db")


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


def test_the_views_delete_refuses_a_cache_holding_a_call_in_doubt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from tests.helpers.calls_in_doubt import write_three_calls

    def fails() -> None:
        raise RuntimeError("cut off")

    with make_dag(f"doubt_view_{uuid.uuid4().hex[:8]}", retries=0) as dag:
        PythonOperator(task_id="book", python_callable=fails)
    dr = run_dag(dag)
    assert dr.state == "failed"
    identity = TaskIdentity(dag.dag_id, dr.run_id, "book", -1)
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    harness = DurableHarness(base=str(base), identity=identity)
    write_three_calls(harness)
    held = sorted(path.name for path in harness.root.iterdir())

    answer = view_client().post(f"/delete?{view_query(identity)}", headers={"authorization": "Bearer x"})

    assert answer.status_code == 409, answer.text[:500]
    assert "holds 1 call in doubt" in answer.text and "tool send_invoice (call c3)" in answer.text
    assert "--forget-calls-in-doubt" in answer.text
    assert sorted(path.name for path in harness.root.iterdir()) == held


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
    calls = _model.asked = getattr(_model, "asked", 0) + 1  # type: ignore[attr-defined]
    return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42}, tool_call_id=f"c{calls}")])


def test_a_successful_run_keeps_the_start_mark_of_a_call_it_never_reached(tmp_path: Path) -> None:
    # Try 1 is cut off while charge_card (call c1) runs; its model step is then lost (a step that no longer
    # replays: the code changed), so try 2 asks the model again, which calls c2 instead, and succeeds. c1's
    # outcome is still unknown: the success cleanup keeps its start mark and says so.
    _model.asked = 0  # type: ignore[attr-defined]
    charges: list[str] = []
    agent: Agent[Any, str] = Agent(FunctionModel(_model))

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int) -> str:
        charges.append(str(amount))
        if len(charges) == 1:
            raise CutOff
        return "receipt r-2"

    harness = DurableHarness(base=str(tmp_path / "cache"))
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True)
    [mark] = harness.root.glob("started-*.json")
    for model in harness.root.glob("model-*.json"):
        model.unlink()

    result, run, log = harness.run(agent, "charge it")
    run.finish()

    assert result.output == "done: receipt r-2" and len(charges) == 2
    assert [path.name for path in harness.root.iterdir()] == [mark.name], "only the start mark is kept"
    [warning] = [line for line in log.at("warning") if "kept the start marks" in line]
    assert "1 at-most-once call" in warning and "tool charge_card (call c1)" in warning
    assert "--forget-calls-in-doubt" in warning


# --- A try that discards the cache keeps its calls in doubt (issue 35 item 2): real dag.test() runs -------------

CHARGES: list[int] = []
"""The card charges that happened, by the try that made them."""
ON_CLEAR = "clear with on_clear=fresh"


def _cashier_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"settled: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"amount_cents": 4200}, tool_call_id="charge-1")])


def _charge_dag(dag_id: str, retries: int, **operator_kwargs: Any) -> Any:
    """An agent whose ``at_most_once()`` payment tool is cut off the first time it runs (after the charge)."""
    from airflow_pydantic_ai.operators.agent import AgentOperator

    agent: Agent[None, str] = Agent(FunctionModel(_cashier_model))

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount_cents: int) -> str:
        from tests.helpers.airflow_run import current_try

        CHARGES.append(current_try())
        if len(CHARGES) == 1:
            raise CutOff
        return f"receipt r-{len(CHARGES)}"

    with make_dag(dag_id, retries=retries) as dag:
        AgentOperator(
            task_id="charge",
            prompt="Settle invoice 118",
            agent=agent,
            durable=True,
            on_unknown_outcome="fail",
            **operator_kwargs,
        )
    return dag


def _kept_and_failed(out: str, dag_id: str, run_id: str, doing: str) -> None:
    """The try that discarded the cache kept the start mark, said so, and failed on the call instead of charging."""
    from airflow_pydantic_ai import _compat

    assert CHARGES == [1], f"{doing} charged the card again: {CHARGES}\n{out[-5000:]}"
    [kept] = [line for line in out.splitlines() if "kept the start marks of 1 at-most-once call" in line]
    assert "tool charge_card (call charge-1)" in kept
    resolve = " ".join([*_compat.cli_command_prefix(), "cache", "resolve", dag_id, run_id, "charge"])
    assert f"{resolve} --call REF" in kept, kept
    assert "OutcomeUnknown" in out and "tool charge_card (call charge-1)" in out


@pytest.fixture
def _charges(cache_base: Path) -> None:
    CHARGES.clear()


@pytest.mark.usefixtures("_charges")
@pytest.mark.skipif(
    __import__("airflow_pydantic_ai._compat", fromlist=["x"]).clear_asks_to_keep_task_state(),
    reason="on Airflow 3.4 keep_task_state decides, and clear_task_instances keeps it",
)
def test_a_clear_with_on_clear_fresh_keeps_the_call_in_doubt(capfd: pytest.CaptureFixture[str]) -> None:
    from tests.helpers.airflow_run import clear_and_rerun, task_states

    dag = _charge_dag("kept_on_clear_fresh", retries=0, on_clear="fresh")
    dr = run_dag(dag)
    capfd.readouterr()
    assert dr.state == "failed" and CHARGES == [1]

    assert clear_and_rerun(dag, dr, "charge") == ("failed", 2)
    out = capfd.readouterr().out

    assert "cleared with on_clear=fresh: discarded the cache at " in out
    _kept_and_failed(out, dag.dag_id, dr.run_id, ON_CLEAR)
    assert task_states(dr)[("charge", -1)] == ("failed", 2)


@pytest.mark.usefixtures("_charges")
def test_durable_mode_record_keeps_the_call_in_doubt(capfd: pytest.CaptureFixture[str]) -> None:
    from tests.helpers.airflow_run import task_states

    dag = _charge_dag("kept_on_record", retries=1, durable_mode="record")
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "failed", out[-5000:]
    assert "durable_mode = record: discarded the cache at " in out
    _kept_and_failed(out, dag.dag_id, dr.run_id, "durable_mode = record")
    assert task_states(dr)[("charge", -1)] == ("failed", 2)


@pytest.mark.usefixtures("_charges")
def test_an_earlier_dag_runs_cache_keeps_its_call_in_doubt(capfd: pytest.CaptureFixture[str]) -> None:
    # The DAG run is deleted and created again with the same ids (dag.test() given the same logical date): the new
    # run's charge has the same idempotency key as the one the earlier run was cut off in.
    from datetime import UTC, datetime

    from tests.helpers.airflow_run import task_states

    when = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
    dag = _charge_dag("kept_earlier_run", retries=0)
    first = run_dag(dag, logical_date=when, run_after=when)
    capfd.readouterr()
    assert first.state == "failed" and CHARGES == [1]

    second = run_dag(dag, logical_date=when, run_after=when)
    out = capfd.readouterr().out

    assert second.run_id == first.run_id and second.state == "failed", out[-5000:]
    assert "was left by an earlier run with the same ids" in out
    _kept_and_failed(out, dag.dag_id, second.run_id, "the new DAG run")
    assert task_states(second)[("charge", -1)] == ("failed", 1)
