"""A call cut off mid-run under real ``dag.test()`` runs: ``on_unknown_outcome`` fail, rerun, ask, and cache resolve.

Try 1 is cut off while ``charge_card`` runs, after the card was charged: the tool raises a ``BaseException`` that is
not an ``Exception`` (``CutOff``), which is what a killed worker looks like from the cache: the call's start is
recorded, its result never is. Airflow's task runner fails that try, and try 2 finds the call in doubt.
"""

from __future__ import annotations

import argparse
import contextlib
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
    assert "tool charge_card (call charge-1), asked for by step 1, was started by try 1" in out
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
    assert f"Unknown outcome: waiting for an answer about 1 call ({options})" in out
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
    assert "gives no result for the model (its result field is empty)" in out
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
    assert "tool charge_card (call charge-1), asked for by step 1, was started by try 1" in out


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


# --- two calls in doubt of one model answer ------------------------------------------------------------------------

PAIR_CHARGES: list[str] = []
"""The charges that happened, by customer and try."""


def _pair_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = sorted(str(part.content) for part in returns if isinstance(part, ToolReturnPart))
    if results:
        MODEL_SAW.extend(results)
        return ModelResponse(parts=[TextPart("settled: " + "; ".join(results))])
    return ModelResponse(
        parts=[
            ToolCallPart("charge_card", {"customer": "acme"}, tool_call_id="charge-a"),
            ToolCallPart("charge_card", {"customer": "globex"}, tool_call_id="charge-b"),
        ]
    )


def two_charges() -> Agent[None, str]:
    """Both charges start (a barrier holds them until both have), then the try is cut off on try 1."""
    import threading

    agent = Agent(FunctionModel(_pair_model), name="pair")
    both_started = threading.Barrier(2, timeout=10)

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(customer: str) -> str:
        """Charge the customer's card."""
        PAIR_CHARGES.append(f"{customer} try={current_try()}")
        if current_try() == 1:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_started.wait()
            raise CutOff
        return f"receipt for {customer} (live)"

    return agent


@PARKS
def test_two_calls_in_doubt_are_asked_in_one_question_and_both_answers_apply(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    PAIR_CHARGES.clear()
    dag = charge_dag("unknown_two_calls", agent=two_charges())

    def answer(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        refs = [name.removeprefix("outcome_") for name in detail["params"] if name.startswith("outcome_")]
        assert len(refs) == 2, detail["params"]
        params: dict[str, Any] = {}
        for ref in refs:
            params[f"outcome_{ref}"] = "happened"
            params[f"result_{ref}"] = f"receipt {ref}"
        choose("Answer per call", user="alice", **params)(api, run_id, detail)

    with Responder(api, "unknown_two_calls", "charge", [answer]) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert task_states(dr)[("charge", -1)] == ("success", 2)
    assert sorted(PAIR_CHARGES) == ["acme try=1", "globex try=1"]  # each charged once, never again
    [detail] = responder.details  # asked once, about both
    assert detail["subject"] == "unknown_two_calls.charge: did these 2 tool calls happen?"
    assert detail["options"] == ["Answer per call", "Fail the task"]
    assert "**2 calls wait for an answer.**" in detail["body"]
    assert "charge-a" in detail["body"] and "charge-b" in detail["body"]
    assert "waiting for an answer about 2 calls" in out
    assert out.count("alice answered 'it happened' (the Required Actions page)") >= 2
    assert len(MODEL_SAW) == 2 and all(seen.startswith("receipt ") for seen in MODEL_SAW)


@PARKS
def test_cache_resolve_while_the_task_asks_says_what_the_question_and_its_timeout_do(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow_pydantic_ai.cli.resolve_command import cache_resolve

    said: list[str] = []

    def resolve_then_answer(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        capfd.readouterr()
        arguments = argparse.Namespace(dag_id="unknown_resolve_waiting", run_id=run_id)
        cache_resolve(_resolve_args(arguments, "--happened", result="r-cli"))
        said.append(capfd.readouterr().out)
        choose("It happened", user="alice", result="r-page")(api, run_id, detail)

    dag = charge_dag("unknown_resolve_waiting")
    with Responder(api, "unknown_resolve_waiting", "charge", [resolve_then_answer]):
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    [note] = said
    assert "its question about this call is answered on the Required Actions page (an answer there replaces" in note
    assert "approval_timeout" not in note, note  # none is set
    assert MODEL_SAW == ['"r-page"']  # the page's answer replaced the command's


def test_the_call_in_doubt_is_named_by_a_step_the_cli_takes(capfd: pytest.CaptureFixture[str]) -> None:
    """The error names the call by the model step that asked for it: ``cache show --step`` shows that step (the call
    itself has no step until an answer about it is used), and ``cache show`` names the same step."""
    from airflow_pydantic_ai.cli.cache_command import cache_show

    dr = run_dag(charge_dag("unknown_step_numbers", on_unknown_outcome="fail"))
    out = capfd.readouterr().out
    assert dr.state == "failed", out[-5000:]
    assert "tool charge_card (call charge-1), asked for by step 1, was started by try 1" in out
    assert "step 2: tool charge_card" not in out  # a number no command takes while the call is in doubt

    ids = {"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": "charge", "map_index": -1, "iteration": None}
    shown = {"full": False, "raw": False, "calls": False, "output": "plain"}
    cache_show(argparse.Namespace(**ids, **shown, step=1))
    step = capfd.readouterr().out
    assert step.startswith("Step 1: model ") and "charge-1" in step, step
    cache_show(argparse.Namespace(**ids, **shown, step=None))
    listing = capfd.readouterr().out
    assert "call charge-1: outcome unknown: asked for by step 1, started by try 1 at " in listing, listing


def test_the_cli_figures_agree_for_a_cache_with_a_call_in_doubt(capfd: pytest.CaptureFixture[str]) -> None:
    """``rm`` reports the bytes ``list`` and ``gc`` report (the start mark included); ``gc``'s table has ``list``'s
    columns, no loop iteration outside loops; ``gc --dry-run -o json`` prints ``[]`` when nothing would go."""
    from airflow_pydantic_ai.cli.cache_command import cache_gc, cache_list, cache_rm

    dr = run_dag(charge_dag("unknown_cli_figures", on_unknown_outcome="fail"))
    assert dr.state == "failed"
    capfd.readouterr()
    ids = {"dag_id": dr.dag_id, "run_id": dr.run_id, "task_id": "charge", "map_index": -1, "iteration": None}

    cache_list(argparse.Namespace(dag_id=dr.dag_id, run_id=None, task_id=None, older_than=None, output="json"))
    [listed] = json.loads(capfd.readouterr().out)
    forget = {"forget_calls_in_doubt": True}  # the call in doubt is what this cache holds
    cache_rm(argparse.Namespace(**ids, **forget, from_step=None, dry_run=True, yes=False, force=False, output="table"))
    dry_rm = capfd.readouterr().out
    assert f", {listed['bytes']} bytes stored)" in dry_rm, (listed, dry_rm)

    cache_list(argparse.Namespace(dag_id=dr.dag_id, run_id=None, task_id=None, older_than=None, output="table"))
    list_header = capfd.readouterr().out.splitlines()
    cache_gc(argparse.Namespace(**forget, older_than=None, dry_run=True, yes=False, output="table"))
    gc_table = capfd.readouterr().out.splitlines()
    header = next(line for line in list_header if "dag_id" in line).split()
    assert next(line for line in gc_table if "dag_id" in line).split() == header
    assert "iteration" not in header

    cache_gc(argparse.Namespace(older_than="1000w", dry_run=True, yes=False, output="json"))
    nothing = capfd.readouterr()
    assert json.loads(nothing.out) == [] and "Nothing to delete" in nothing.err
