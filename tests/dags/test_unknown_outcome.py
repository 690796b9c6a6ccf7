"""A call cut off mid-run under real ``dag.test()`` runs: ``on_unknown_outcome`` fail, rerun, ask, and cache resolve.

Try 1 is cut off while ``charge_card`` runs, after the card was charged: the tool raises a ``BaseException`` that is
not an ``Exception`` (``CutOff``), which is what a killed worker looks like from the cache: the call's start is
recorded, its result never is. Airflow's task runner fails that try, and try 2 finds the call in doubt.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import clear_and_rerun, current_try, make_dag, run_dag, task_states, xcom_value
from tests.helpers.compat import requires_approval_parking
from tests.helpers.hitl_api import HitlApi, Responder, choose, sweep_timeouts_after

from airflow_pydantic_ai import _compat, at_most_once

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")
RESOLVE = " ".join([*_compat.cli_command_prefix(), "cache", "resolve"])
"""The command as this Airflow spells it (``airflow-pydantic-ai`` on 3.1)."""
PARKS = requires_approval_parking()

CHARGES: list[int] = []
"""The card charges that happened, by the try that made them."""
MODEL_SAW: list[str] = []
"""What the model was told the call returned."""


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    CHARGES.clear()
    MODEL_SAW.clear()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, airflow_db: None) -> HitlApi:
    return HitlApi.start(tmp_path_factory.mktemp("api"))


def _cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = [part for part in returns if isinstance(part, ToolReturnPart)]
    if results:
        MODEL_SAW.append(json.dumps(results[-1].content, default=str))
        return ModelResponse(parts=[TextPart(f"settled: {json.dumps(results[-1].content, default=str)}")])
    arguments = {"customer": "acme", "amount_cents": 4200, "api_key": "sk-live-do-not-show"}
    return ModelResponse(parts=[ToolCallPart("charge_card", arguments, tool_call_id="charge-1")])


def cashier(cut_off_on_try: int | None = 1) -> Agent[None, str]:
    agent = Agent(FunctionModel(_cashier), name="cashier")

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(customer: str, amount_cents: int, api_key: str) -> str:
        """Charge the customer's card."""
        CHARGES.append(current_try())
        if current_try() == cut_off_on_try:
            raise CutOff
        return f"receipt r-{len(CHARGES)}"

    return agent


def charge_dag(dag_id: str, retries: int = 1, **operator_kwargs: Any) -> Any:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag(dag_id, retries=retries) as dag:
        AgentOperator(
            task_id="charge",
            prompt="Settle invoice 118",
            agent=operator_kwargs.pop("agent", None) or cashier(),
            durable=True,
            **operator_kwargs,
        )
    return dag


def test_fail_stops_the_retry_and_names_the_call_and_the_resolve_command(capfd: pytest.CaptureFixture[str]) -> None:
    dr = run_dag(charge_dag("unknown_fail", on_unknown_outcome="fail"))
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert task_states(dr)[("charge", -1)] == ("failed", 2)
    assert CHARGES == [1]  # the retry did not charge again
    assert "OutcomeUnknown" in out
    assert "tool charge_card (call charge-1) was started by try 1" in out
    assert f"{RESOLVE} unknown_fail {dr.run_id} charge --call " in out
    assert "on_unknown_outcome='fail'" in out
    assert "sk-live-do-not-show" not in out


def test_fail_fails_the_task_without_spending_its_retries(capfd: pytest.CaptureFixture[str]) -> None:
    # Issue 35 item 3: try 2 finds the call in doubt and the task fails then, not after try 4.
    dr = run_dag(charge_dag("unknown_fail_no_retries", retries=3, on_unknown_outcome="fail"))
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert task_states(dr)[("charge", -1)] == ("failed", 2), out[-5000:]
    assert CHARGES == [1]
    assert "The task fails without spending its retries" in out
    assert "Then clear the task: its next try applies the answer" in out


def test_fail_in_a_plain_task_with_durable_attempt_does_not_spend_its_retries(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.sdk import task

    from airflow_pydantic_ai import DurableCapability, durable_attempt

    agent = cashier()
    with make_dag("unknown_fail_plain", retries=3) as dag:

        @task
        def charge() -> str:
            with durable_attempt(on_unknown_outcome="fail"):
                return agent.run_sync("Settle invoice 118", capabilities=[DurableCapability()]).output

        charge()
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert task_states(dr)[("charge", -1)] == ("failed", 2), out[-5000:]
    assert CHARGES == [1]
    assert "The task fails without spending its retries" in out


def test_rerun_runs_the_call_again_with_a_warning(capfd: pytest.CaptureFixture[str]) -> None:
    dr = run_dag(charge_dag("unknown_rerun", on_unknown_outcome="rerun"))
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert CHARGES == [1, 2]
    assert "its outcome is unknown and it runs again (on_unknown_outcome='rerun')" in out
    assert xcom_value(dr, "charge") == 'settled: "receipt r-2"'


def test_the_option_decides_when_the_task_does_not(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ON_UNKNOWN_OUTCOME", "rerun")
    dr = run_dag(charge_dag("unknown_option"))
    assert dr.state == "success", capfd.readouterr().out[-5000:]
    assert CHARGES == [1, 2]


def test_a_bad_option_fails_the_task_naming_it(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ON_UNKNOWN_OUTCOME", "retry")
    dr = run_dag(charge_dag("unknown_bad_option", retries=0))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert "[pydantic_ai] durable_on_unknown_outcome 'retry' is not one of ask, fail, rerun" in out
    assert CHARGES == []  # checked when the try starts, before any step


@PARKS
def test_ask_waits_and_an_answer_it_happened_gives_the_model_the_result(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = charge_dag("unknown_ask_happened")
    answer = choose("It happened", user="alice", result='{"receipt": "r-1", "amount_cents": 4200}')
    with Responder(api, "unknown_ask_happened", "charge", [answer]) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert CHARGES == [1]  # charged once, by the try that was cut off
    assert MODEL_SAW == ['{"receipt": "r-1", "amount_cents": 4200}']
    assert xcom_value(dr, "charge") == 'settled: {"receipt": "r-1", "amount_cents": 4200}'
    assert task_states(dr)[("charge", -1)] == ("success", 2)
    detail = responder.details[0]
    assert detail["subject"] == "unknown_ask_happened.charge: did this tool call happen?"
    assert detail["options"] == ["It happened", "It happened, result unknown", "Run it again", "Fail the task"]
    body = detail["body"]
    assert "`charge_card`" in body and "call id `charge-1`" in body and "in try 1 at " in body and " UTC" in body
    assert '"customer": "acme"' in body and "sk-live-do-not-show" not in body and "***" in body
    assert "result" in detail["params"]
    options = "It happened / It happened, result unknown / Run it again / Fail the task"
    assert f"Unknown outcome: waiting for an answer ({options})" in out
    [asked] = [line for line in out.splitlines() if "a person is asked whether it happened" in line]
    assert "[warning" in asked, "a call cut off mid-run is worth a WARNING, as with rerun"
    assert "alice answered 'it happened' (the Required Actions page)" in out


NO_RESULT = "The call happened; its result is unknown. Do not call it again."


@PARKS
def test_it_happened_needs_a_result_or_the_choice_result_unknown_which_the_model_reads(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    # Issue 35 item 4: "It happened" with an empty result is asked again; "result unknown" is said to the model.
    dag = charge_dag("unknown_ask_no_result")
    answers = [choose("It happened", user="alice", result=""), choose("It happened, result unknown", user="alice")]
    with Responder(api, "unknown_ask_no_result", "charge", answers) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert CHARGES == [1]
    assert [json.dumps(NO_RESULT)] == MODEL_SAW, "the model never reads None"
    assert len(responder.details) == 2, "the answer without a result was asked again"
    assert "gives no result for the model (the field 'result' is empty)" in out
    assert "alice answered 'it happened, result unknown' (the Required Actions page)" in out
    assert "**It happened, result unknown**" in responder.details[0]["body"]


@PARKS
def test_ask_about_a_call_whose_start_mark_cannot_be_verified(
    api: HitlApi, capfd: pytest.CaptureFixture[str], cache_base: Path
) -> None:
    # Issue 35 item 1: before try 2, a byte of the start mark flips (in the pack try 1 left); the call is still in
    # doubt, the person is asked, and the answer is applied.
    def flip_a_byte_of_the_mark(context: Any) -> None:
        if current_try() != 2:
            return
        [pack] = cache_base.rglob("pack-*.pack")
        data = bytearray(pack.read_bytes())
        mark = data.index(b'"started-', data.index(b'"entries":'))
        data[data.index(b"charge_card", mark)] = ord("C")  # the same damage if the resumed try flips it again
        pack.write_bytes(bytes(data))

    dag = charge_dag("unknown_ask_unverified", pre_execute=flip_a_byte_of_the_mark)
    answer = choose("It happened, result unknown", user="alice")
    with Responder(api, "unknown_ask_unverified", "charge", [answer]) as responder:
        dr = run_dag(dag)
    state = dr.state
    out = capfd.readouterr().out
    assert state == "success", out[-5000:]
    assert CHARGES == [1]
    assert [json.dumps(NO_RESULT)] == MODEL_SAW
    assert "in an earlier try (its start mark cannot be verified" in responder.details[0]["body"]
    assert "alice answered 'it happened, result unknown' (the Required Actions page)" in out


def test_cache_resolve_happened_needs_a_result_or_no_result(capfd: pytest.CaptureFixture[str]) -> None:
    from airflow_pydantic_ai.cli.resolve_command import cache_resolve

    dag = charge_dag("unknown_resolve_no_result", on_unknown_outcome="fail")
    dr = run_dag(dag)
    assert dr.state == "failed"
    capfd.readouterr()
    with pytest.raises(SystemExit, match="--happened needs the result the model is given"):
        cache_resolve(_resolve_args(dr, "--happened"))
    with pytest.raises(SystemExit, match="--result null gives the model no result"):
        cache_resolve(_resolve_args(dr, "--happened", result="null"))

    cache_resolve(_resolve_args(dr, "--happened", no_result=True))
    assert "answered 'it happened, result unknown'" in capfd.readouterr().out
    state, _ = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert state == "success", out[-5000:]
    assert CHARGES == [1]
    assert [json.dumps(NO_RESULT)] == MODEL_SAW


@PARKS
def test_an_answer_fail_the_task_fails_it_with_the_call_named(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    dag = charge_dag("unknown_ask_fail", retries=1)
    with Responder(api, "unknown_ask_fail", "charge", [choose("Fail the task", user="alice")]):
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert CHARGES == [1]
    assert "alice answered 'fail the task' (the Required Actions page)" in out
    assert "tool charge_card (call charge-1) was started by try 1" in out


@PARKS
def test_nobody_answering_in_time_fails_the_task(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    from datetime import timedelta

    dag = charge_dag("unknown_ask_timeout", approval_timeout=timedelta(seconds=1), on_approval_timeout="reject")
    with Responder(api, "unknown_ask_timeout", "charge", [sweep_timeouts_after(1.5)]) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert CHARGES == [1]
    assert "Nobody answering within 0:00:01 fails the task." in responder.details[0]["body"]
    assert "nobody answered within the approval_timeout" in out


def _resolve_args(dr: Any, *answer: str, result: str | None = None, no_result: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        dag_id=dr.dag_id,
        run_id=dr.run_id,
        task_id="charge",
        call="charge-1",
        happened="--happened" in answer,
        rerun="--rerun" in answer,
        fail="--fail" in answer,
        result=result,
        no_result=no_result,
        map_index=-1,
        iteration=None,
    )


def test_cache_resolve_rerun_then_clear_runs_the_call_again(
    capfd: pytest.CaptureFixture[str], cache_base: Path
) -> None:
    from airflow_pydantic_ai.cli.resolve_command import cache_resolve

    dag = charge_dag("unknown_resolve_rerun", on_unknown_outcome="fail")
    dr = run_dag(dag)
    assert dr.state == "failed"
    assert CHARGES == [1]
    capfd.readouterr()

    cache_resolve(_resolve_args(dr, "--rerun"))
    said = capfd.readouterr().out
    assert "Recorded for tool charge_card (call charge-1)" in said and "answered 'run it again'" in said
    assert RESOLVE in said and "clear the task instance" in said

    state, try_number = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert (state, try_number) == ("success", 3), out[-5000:]
    assert CHARGES == [1, 3]
    assert f"answered 'run it again' ({RESOLVE}): it runs again" in out


def test_cache_resolve_happened_then_clear_replays_the_result_given(capfd: pytest.CaptureFixture[str]) -> None:
    from airflow_pydantic_ai.cli.resolve_command import cache_resolve

    dag = charge_dag("unknown_resolve_happened", on_unknown_outcome="fail")
    dr = run_dag(dag)
    assert dr.state == "failed"
    cache_resolve(_resolve_args(dr, "--happened", result="receipt r-1 (from the bank's dashboard)"))
    state, _ = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert state == "success", out[-5000:]
    assert CHARGES == [1]
    assert MODEL_SAW == ['"receipt r-1 (from the bank\'s dashboard)"']
