"""At-most-once tools (issue 29): a call cut off mid-run is never run again silently.

A try "cut off" here is one whose tool raises a ``BaseException`` that is not an ``Exception`` (what a SIGKILL,
an OOM kill or the end of the run's grace look like from the cache: a start mark and no result) and that dies
there (``killed=True``: no ``ending``, nothing packed). The real SIGKILL trials are in ``tests/system``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.durable import run_agent
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import (
    AskAboutOutcome,
    OutcomeRules,
    OutcomeUnknown,
    Resolution,
)


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42}, tool_call_id="c1")])


def _agent(charges: list[int], *, cut_off_on: set[int], marked: bool = True, fail_on: set[int] = frozenset()) -> Agent:
    agent: Agent[Any, str] = Agent(FunctionModel(_model))

    @agent.tool_plain(metadata=at_most_once() if marked else None)
    def charge_card(amount: int) -> str:
        charges.append(amount)
        number = len(charges)
        if number in fail_on:
            raise ConnectionError("the bank said no")
        if number in cut_off_on:
            raise CutOff
        return f"charged {amount} (charge {number})"

    return agent


def _cut_off_try(harness: DurableHarness, agent: Agent, **options: Any) -> None:
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True, run_options=options)


def test_a_call_cut_off_is_not_run_again_when_the_policy_says_fail(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    rules = OutcomeRules(on_unknown="fail", resolve_command="airflow pydantic-ai cache resolve d r t")
    with pytest.raises(OutcomeUnknown) as raised:
        harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert charges == [42]
    message = str(raised.value)
    assert "charge_card" in message and "try 1" in message and '"amount": 42' in message
    assert "airflow pydantic-ai cache resolve d r t --call" in message and "--rerun" in message
    assert raised.value.call.started.tool == "charge_card"


def test_ask_where_nobody_can_be_asked_fails_and_says_why(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    with pytest.raises(OutcomeUnknown, match="no person can be asked"):
        harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="ask")})
    assert charges == [42]


def test_rerun_runs_it_again_with_a_warning(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    result, _, log = harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="rerun")})
    assert charges == [42, 42]
    assert result.output == "done: charged 42 (charge 2)"
    assert any("outcome is unknown and it runs again" in line and "charge_card" in line for line in log.at("warning"))


def test_ask_stops_the_run_and_an_answer_it_happened_replays_the_result_given(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    run, _ = harness.open(unknown_outcome=rules)
    with pytest.raises(AskAboutOutcome) as asked, run.ending():
        run_agent(run, agent, "charge it")
    doubt = asked.value.call
    assert doubt.started.attempt == 1 and doubt.started.arguments in ({"amount": 42}, '{"amount":42}')
    # The Airflow side records the person's answer, as it does a decision.
    run.resolve(doubt, Resolution.happened(doubt.started, "charged 42 (receipt r-1)", answered_by="ana"))
    result, _, log = harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert charges == [42]
    assert result.output == "done: charged 42 (receipt r-1)"
    assert any("ana answered 'it happened'" in line for line in log.at("info"))
    # Asked once: later tries replay the answer too.
    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert charges == [42] and result.output == "done: charged 42 (receipt r-1)"


def test_an_answer_run_it_again_runs_it_once_more_and_a_new_cut_off_is_a_new_question(
    harness: DurableHarness,
) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1, 2})
    _cut_off_try(harness, agent)
    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    run, _ = harness.open(unknown_outcome=rules)
    with pytest.raises(AskAboutOutcome) as asked:
        run_agent(run, agent, "charge it")
    doubt = asked.value.call
    run.resolve(doubt, Resolution("rerun", doubt.started.attempt, doubt.started.started_at, answered_by="ana"))
    _cut_off_try(harness, agent, unknown_outcome=rules)  # the rerun is cut off as well
    assert charges == [42, 42]
    with pytest.raises(AskAboutOutcome) as again:
        harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert again.value.call.started.attempt == 3
    assert charges == [42, 42]


def test_an_answer_fail_fails_later_tries_without_asking(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    run, _ = harness.open(unknown_outcome=rules)
    with pytest.raises(AskAboutOutcome) as asked:
        run_agent(run, agent, "charge it")
    doubt = asked.value.call
    run.resolve(doubt, Resolution("fail", doubt.started.attempt, doubt.started.started_at, answered_by="ana"))
    with pytest.raises(OutcomeUnknown, match="ana answered 'fail the task'"):
        harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert charges == [42]


def test_a_finished_call_replays_and_is_never_in_doubt(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on=set())
    harness.run(agent, "charge it", killed=True)
    assert sorted(path.name.split("-")[0] for path in harness.root.iterdir()) == ["model", "model", "started", "tool"]
    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert charges == [42] and result.output == "done: charged 42 (charge 1)"


def test_a_tool_that_raises_has_finished_and_runs_again(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on=set(), fail_on={1})
    with pytest.raises(ConnectionError):
        harness.run(agent, "charge it", killed=True)
    assert not [path for path in harness.root.iterdir() if path.name.startswith("started-")]
    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert charges == [42, 42] and result.output == "done: charged 42 (charge 2)"


def test_a_tool_without_the_mark_writes_nothing_new_and_runs_again(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1}, marked=False)
    _cut_off_try(harness, agent)
    assert sorted(path.name.split("-")[0] for path in harness.root.iterdir()) == ["model"]
    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert charges == [42, 42] and result.output == "done: charged 42 (charge 2)"


def test_the_start_mark_takes_no_step_number(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on=set())
    _, _, log = harness.run(agent, "charge it", killed=True)
    assert any("step 2: tool charge_card (call c1) ran live" in line for line in log.at("info"))
    reader = CacheReader(harness.store())
    assert [info.kind for info in reader.steps()] == ["model", "tool", "model"]
    assert [entry.kind for entry in reader.companions()] == ["started"]


@pytest.mark.parametrize("spelling", ["Tool", "FunctionToolset", "with_metadata"])
def test_every_way_to_mark_a_tool_is_seen(harness: DurableHarness, spelling: str) -> None:
    from pydantic_ai import Tool
    from pydantic_ai.toolsets import FunctionToolset

    charges: list[int] = []

    def charge_card(amount: int) -> str:
        charges.append(amount)
        if len(charges) == 1:
            raise CutOff
        return "charged"

    if spelling == "Tool":
        toolset = FunctionToolset([Tool(charge_card, metadata=at_most_once())])
    elif spelling == "FunctionToolset":
        toolset = FunctionToolset([charge_card], metadata=at_most_once())
    else:
        toolset = FunctionToolset([charge_card]).with_metadata(**at_most_once())
    agent: Agent[Any, str] = Agent(FunctionModel(_model), toolsets=[toolset])
    _cut_off_try(harness, agent)
    with pytest.raises(OutcomeUnknown):
        harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert charges == [42]


def test_a_retry_outcome_forgotten_with_its_answer_leaves_no_call_in_doubt(harness: DurableHarness) -> None:
    from pydantic_ai import ModelRetry
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    charges: list[int] = []

    def until_charged(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        if returns and str(returns[-1].content) == "charged":
            return ModelResponse(parts=[TextPart("done: charged")])
        return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42}, tool_call_id=f"c{len(messages)}")])

    agent: Agent[Any, str] = Agent(FunctionModel(until_charged), retries=1)

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int) -> str:
        charges.append(amount)
        if len(charges) <= 2:
            raise ModelRetry("the bank is busy, try again")
        return "charged"

    with pytest.raises(UnexpectedModelBehavior):
        harness.run(agent, "charge it")
    assert CacheReader(harness.store()).companions() == []
    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert result.output == "done: charged"


def test_a_call_the_budget_refuses_leaves_no_start_mark(harness: DurableHarness) -> None:
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.durable.reporting.budget import RetryBudgetExceeded

    charges: list[int] = []
    agent = _agent(charges, cut_off_on=set())
    with pytest.raises(RetryBudgetExceeded):
        harness.run(agent, "charge it", run_options={"budget": UsageLimits(tool_calls_limit=0)})
    assert charges == []
    assert CacheReader(harness.store()).companions() == []


def test_the_error_masks_values_under_sensitive_keys_of_the_arguments() -> None:
    from airflow_pydantic_ai.durable.side_effects import CallInDoubt, StartedCall, unknown_outcome_error

    def redact(value: Any) -> Any:
        return (
            {key: "***" if key == "api_key" else item for key, item in value.items()}
            if isinstance(value, dict)
            else value
        )

    for arguments in ({"amount": 42, "api_key": "sk-1"}, '{"amount": 42, "api_key": "sk-1"}'):
        doubt = CallInDoubt("k" * 64, 1, "tool charge_card", StartedCall("charge_card", "c1", arguments, 1, 0.0))
        message = str(unknown_outcome_error(doubt, OutcomeRules(on_unknown="fail"), redact=redact, why="test"))
        assert '"amount": 42' in message and "sk-1" not in message and '"api_key": "***"' in message


def test_the_cut_off_try_says_the_retry_will_not_run_the_call_again(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it")
    [line] = [line for line in harness.logs[-1].at("info") if "charge_card (call c1) failed" in line]
    assert "a retry does not run it again but does what on_unknown_outcome says" in line
    assert "runs again on a retry" not in line


def test_a_registered_secret_among_the_arguments_is_masked_in_the_mark_and_the_call_stays_guarded(
    harness: DurableHarness,
) -> None:
    secret = "sk-live-registered-4242"

    def redact(value: Any) -> Any:  # what Airflow's masker does with a registered secret
        if isinstance(value, dict):
            return {key: redact(item) for key, item in value.items()}
        return value.replace(secret, "***") if isinstance(value, str) else value

    def with_secret(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42, "token": secret}, tool_call_id="c1")])

    charges: list[int] = []
    agent: Agent[Any, str] = Agent(FunctionModel(with_secret))

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int, token: str) -> str:
        charges.append(amount)
        raise CutOff

    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True, run_options={"redact": redact})
    [mark] = CacheReader(harness.store()).companions()
    assert mark.payload["arguments"] == {"amount": 42, "token": "***"}
    assert not any(secret in path.read_text(errors="replace") for path in harness.root.rglob("*.json"))
    with pytest.raises(OutcomeUnknown) as raised:
        harness.run(agent, "charge it", run_options={"redact": redact, "unknown_outcome": OutcomeRules("fail")})
    assert charges == [42] and secret not in str(raised.value)


def test_a_masker_that_fails_on_the_arguments_keeps_them_out_of_the_mark_and_the_call_guarded(
    harness: DurableHarness,
) -> None:
    """The mark matters more than what it shows: a masker that cannot take the arguments (one that only takes
    text, as the bench's did) leaves them out of the mark instead of failing the call or leaving it unguarded."""

    def text_only(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("never", "***")
        raise TypeError(f"cannot mask {value!r}")  # an error quoting the value it was given

    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True, run_options={"redact": text_only})
    [mark] = CacheReader(harness.store()).companions()
    assert mark.payload["arguments"] == "(not kept: the secrets masker failed on them: TypeError)"
    with pytest.raises(OutcomeUnknown) as raised:
        harness.run(agent, "charge it", run_options={"redact": text_only, "unknown_outcome": OutcomeRules("fail")})
    assert charges == [42] and "charge_card" in str(raised.value)


def test_an_answer_used_is_the_calls_own_step_numbered_as_the_log_names_it(harness: DurableHarness) -> None:
    """The try that uses an answer "it happened" records the result given as the call's entry: the listing gets a
    tool step where the log named the call, and the next model step is numbered after it (both were "step 2")."""
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    run, _ = harness.open(unknown_outcome=rules)
    with pytest.raises(AskAboutOutcome) as asked, run.ending():
        run_agent(run, agent, "charge it")
    doubt = asked.value.call
    run.resolve(doubt, Resolution.happened(doubt.started, "charged 42 (receipt r-1)", answered_by="ana"))
    _, _, log = harness.run(agent, "charge it", run_options={"unknown_outcome": rules})

    listed = [(step.number, step.kind, step.name) for step in CacheReader(harness.store()).steps()]
    assert [(number, kind) for number, kind, _ in listed] == [(1, "model"), (2, "tool"), (3, "model")]
    assert listed[1][2] == "charge_card"
    info = log.at("info")
    assert any(line.startswith("Durable: step 2: tool charge_card (call c1) replayed as ana") for line in info)
    assert any(line.startswith("Durable: step 3: model ") and "ran live" in line for line in info)
    # A later try replays the recorded result as any other; the call is not in doubt any more.
    result, _, log = harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert result.output == "done: charged 42 (receipt r-1)" and charges == [42]
    assert any(
        line.startswith("Durable: step 2: tool charge_card (call c1) replayed from the cache")
        for line in log.at("info")
    )


def test_an_earlier_runs_cache_is_deleted_but_the_call_it_cut_off_stays_in_doubt(harness: DurableHarness) -> None:
    """A DAG run created again with the same ids (or ``airflow tasks test`` given an existing run's id, which reuses
    its try number) deletes the cache, but the start mark of a call in doubt (issue 35 item 2): the new run makes
    the same call, with the same idempotency key, and must not charge again silently."""
    from tests.helpers.durable import RecordingLog

    from airflow_pydantic_ai.durable import Attempt, AttemptOptions

    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    _cut_off_try(harness, agent)
    [mark] = harness.root.glob("started-*.json")
    log = RecordingLog()
    rules = OutcomeRules(on_unknown="fail", resolve_command="airflow pydantic-ai cache resolve d r t")
    options = AttemptOptions(belongs=lambda tries: False, unknown_outcome=rules)
    run = Attempt.open(harness.store(log), attempt=1, log=log, options=options)
    left, kept = log.at("warning")
    assert "(1 step by try 1, written " in left, "the start mark is no step"
    assert "kept the start marks of 1 at-most-once call" in kept and "tool charge_card (call c1)" in kept
    assert "airflow pydantic-ai cache resolve d r t --call REF" in kept and "--forget-calls-in-doubt" in kept
    assert [path.name for path in harness.root.iterdir()] == [mark.name], "the model step is deleted"
    with pytest.raises(OutcomeUnknown), run.ending():
        run_agent(run, agent, "charge it")
    assert charges == [42], "the new run does not charge again"


def test_a_start_mark_kept_from_an_earlier_run_does_not_make_the_new_runs_cache_look_like_another_runs(
    harness: DurableHarness,
) -> None:
    """The earlier run's try 3 started the call: the kept mark says ``try 3``, and the new run's try 2 (which may only
    find tries 1 and 2) must still replay what its own try 1 recorded, not discard it as an earlier run's."""
    from tests.helpers.durable import RecordingLog

    from airflow_pydantic_ai.durable import Attempt, AttemptOptions

    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    harness.attempt = 2
    _cut_off_try(harness, agent)  # try 3 of the earlier run
    rules = OutcomeRules(on_unknown="fail")
    for new_try in (1, 2):
        log = RecordingLog()
        options = AttemptOptions(
            belongs=lambda tries, latest=new_try - 1: all(attempt <= latest for attempt in tries),
            unknown_outcome=rules,
        )
        run = Attempt.open(harness.store(log), attempt=new_try, log=log, options=options)
        with pytest.raises(OutcomeUnknown), run.ending():
            run_agent(run, agent, "charge it")
        earlier = [line for line in log.at("warning") if "left by an earlier run" in line]
        assert len(earlier) == (1 if new_try == 1 else 0), log.texts()
    assert "replayed 1 cached step" in log.summary(), "try 2 replays the model step its own try 1 recorded"
    assert charges == [42]


def test_an_answer_it_happened_never_gives_the_model_none() -> None:
    # Issue 35 item 4: a result, or the explicit "result unknown" whose text the model reads.
    from airflow_pydantic_ai.durable.side_effects import StartedCall
    from airflow_pydantic_ai.durable.side_effects.records import NO_RESULT
    from airflow_pydantic_ai.durable.steps.outcome import decode_outcome

    started = StartedCall("charge_card", "c1", {"amount": 42}, 1, 1.5)
    with pytest.raises(ValueError, match="needs the result the model is given"):
        Resolution.happened(started, None)
    unknown = Resolution.happened_without_result(started, answered_by="ana")
    assert unknown.describe() == "ana answered 'it happened, result unknown' (a person)"
    assert unknown.result is not None and decode_outcome(unknown.result).value == NO_RESULT  # type: ignore[union-attr]
    assert Resolution.from_payload(unknown.to_payload()) == unknown
    # An answer an earlier release recorded with no result is read as "result unknown".
    legacy = {**Resolution("happened", 1, 1.5).to_payload(), "result": {"outcome": "return", "value": None}}
    legacy.pop("no_result")
    from airflow_pydantic_ai.durable.steps.outcome import Returned, encode_outcome

    legacy["result"] = encode_outcome(Returned(None))
    read = Resolution.from_payload(legacy)
    assert read.no_result and decode_outcome(read.result).value == NO_RESULT  # type: ignore[arg-type,union-attr]
