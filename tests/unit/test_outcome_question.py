"""The Airflow side of on_unknown_outcome without a metadata DB: the option and argument, the rules a try opens with,
the question a person is asked about a call in doubt, reading the answer, and finding calls in doubt in a cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, task_identity

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.approval.answer import read_answer, read_outcome_answer, read_outcome_answers
from airflow_pydantic_ai.approval.flow import Resume
from airflow_pydantic_ai.approval.request import OutcomeCall, PendingCall, build_outcome_request, build_outcomes_request
from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt, find_call
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import OutcomeRules, Resolution, resolution_entry
from airflow_pydantic_ai.tries.lifecycle import NO_PERSON_IN_A_PLAIN_TASK, outcome_rules
from airflow_pydantic_ai.tries.settings import on_unknown_outcome_option


def _param(default: Any, **schema: Any) -> dict[str, Any]:
    return {"value": default, **schema}


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: "***" if key == "api_key" else _redact(item) for key, item in value.items()}
    return value.replace("s3cr3t", "***") if isinstance(value, str) else value


# --- the option and the argument ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["retry", "ASK", ""])
def test_a_bad_argument_fails_when_the_dag_is_parsed_naming_it_and_the_choices(value: str) -> None:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with pytest.raises(ValueError, match=rf"AgentOperator on_unknown_outcome={value!r} is not one of ask, fail, rerun"):
        AgentOperator(task_id="t", prompt="p", model_id="test", durable=True, on_unknown_outcome=value)


def test_the_decorator_takes_the_argument_and_checks_it() -> None:
    from airflow.sdk import DAG, task

    with DAG("decorated", schedule=None):

        @task.pydantic_ai(model_id="test", durable=True, on_unknown_outcome="fail")
        def settle() -> str:
            return "settle"

        assert settle().operator.on_unknown_outcome == "fail"

        @task.pydantic_ai(model_id="test", durable=True, on_unknown_outcome="never")
        def broken() -> str:
            return "settle"

        with pytest.raises(ValueError, match="on_unknown_outcome='never' is not one of ask, fail, rerun"):
            broken()


def test_the_option_decides_when_the_task_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    assert on_unknown_outcome_option() == "ask"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ON_UNKNOWN_OUTCOME", " Rerun ")
    assert on_unknown_outcome_option() == "rerun"
    assert on_unknown_outcome_option("fail") == "fail"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ON_UNKNOWN_OUTCOME", "sometimes")
    with pytest.raises(ValueError, match=r"\[pydantic_ai\] durable_on_unknown_outcome 'sometimes' is not one of"):
        on_unknown_outcome_option()


def test_the_operator_can_ask_and_a_plain_task_says_why_it_cannot() -> None:
    identity = task_identity("billing", "charge", run_id="manual__1", map_index=3)
    asks = outcome_rules(None, identity, no_person=None)
    assert (asks.on_unknown, asks.can_ask) == ("ask", True)
    assert asks.resolve_command.endswith("cache resolve billing manual__1 charge --map-index 3")
    plain = outcome_rules("ask", identity, no_person=NO_PERSON_IN_A_PLAIN_TASK)
    assert not plain.can_ask and "durable_attempt() has no human-in-the-loop step" in plain.why_no_person
    assert "on_unknown_outcome='fail'/'rerun'" in plain.why_no_person


def test_without_human_in_the_loop_ask_behaves_as_fail_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_pydantic_ai.approval import wait

    def missing() -> None:
        raise RuntimeError("asking a person ... needs Airflow 3.1 or later (human-in-the-loop)")

    monkeypatch.setattr(wait, "_standard_provider", missing)
    rules = outcome_rules("ask", task_identity(), no_person=None)
    assert not rules.can_ask and "needs Airflow 3.1 or later" in rules.why_no_person


# --- the question ---------------------------------------------------------------------------------


def test_the_question_shows_the_call_masked_when_it_started_and_what_each_answer_does() -> None:
    request = build_outcome_request(
        tool="charge_card",
        ref="3f9a1c0b2e",
        call_id="c1",
        arguments='{"customer": "acme", "api_key": "sk-1", "note": "s3cr3t"}',
        started="try 1 at 2026-11-28 10:00:00 UTC",
        task_label="billing.charge",
        redact=_redact,
        timeout="4:00:00",
        param=_param,
    )
    assert request.subject == "billing.charge: did this tool call happen?"
    assert request.options == ["It happened", "It happened, result unknown", "Run it again", "Fail the task"]
    assert request.defaults is None  # nobody answering never counts as an answer
    assert set(request.params) == {"result"}
    body = request.body
    assert "`charge_card` (ref `3f9a1c0b2e`, call id `c1`)" in body and "try 1 at 2026-11-28 10:00:00 UTC" in body
    assert '"customer": "acme"' in body and "sk-1" not in body and "s3cr3t" not in body
    assert "**It happened**" in body and "**Run it again**" in body and "**Fail the task**" in body
    assert "Nobody answering within 4:00:00 fails the task." in body


def test_one_question_asks_about_every_call_in_doubt_and_says_how_many_wait() -> None:
    calls = [
        OutcomeCall("charge_card", "aaaa", "c1", {"customer": "acme", "api_key": "sk-1"}, "try 1 at 10:00 UTC"),
        OutcomeCall("charge_card", "bbbb", "c2", {"customer": "globex"}, "try 1 at 10:00 UTC"),
    ]
    request = build_outcomes_request(calls, task_label="billing.charge", redact=_redact, timeout="", param=_param)
    assert request.subject == "billing.charge: did these 2 tool calls happen?"
    assert request.options == ["Answer per call", "Fail the task"]
    assert set(request.params) == {"outcome_aaaa", "result_aaaa", "outcome_bbbb", "result_bbbb"}
    assert request.params["outcome_aaaa"]["value"] == "fail"  # nothing runs again unless a person says so
    assert "**2 calls wait for an answer.**" in request.body
    assert "call id `c1`" in request.body and "call id `c2`" in request.body and "sk-1" not in request.body


def test_each_call_in_doubt_is_answered_by_its_own_fields_or_all_by_fail_the_task() -> None:
    fields = {"outcome_aaaa": "happened", "result_aaaa": "r-1", "outcome_bbbb": "rerun", "result_bbbb": ""}
    event = {"chosen_options": ["Answer per call"], "params_input": fields, "responded_by_user": {"name": "ana"}}
    answers = read_outcome_answers(event, ["aaaa", "bbbb"], request_is_current=True)
    assert answers.answered_by == "ana" and not answers.warnings
    assert (answers.answers["aaaa"].answer, answers.answers["aaaa"].result) == ("happened", "r-1")
    assert (answers.answers["bbbb"].answer, answers.answers["bbbb"].result) == ("rerun", None)
    failed = read_outcome_answers(
        {"chosen_options": ["Fail the task"], "params_input": fields}, ["aaaa", "bbbb"], request_is_current=True
    )
    assert {ref: found.answer for ref, found in failed.answers.items()} == {"aaaa": "fail", "bbbb": "fail"}
    missing = read_outcome_answers(
        {"chosen_options": ["Answer per call"], "params_input": {"outcome_aaaa": "happened"}},
        ["aaaa", "bbbb"],
        request_is_current=True,
    )
    assert set(missing.answers) == {"aaaa"} and "without the field 'outcome_bbbb'" in missing.warnings[0]


def test_an_answer_reads_as_the_option_chosen_with_the_result_text() -> None:
    event = {
        "chosen_options": ["It happened"],
        "params_input": {"result": '{"receipt": "r-1"}'},
        "responded_by_user": {"id": "1", "name": "alice"},
    }
    answer = read_outcome_answer(event, "abc", request_is_current=True)
    assert (answer.answer, answer.result, answer.answered_by) == ("happened", '{"receipt": "r-1"}', "alice")
    rerun = read_outcome_answer(
        {"chosen_options": ["Run it again"], "params_input": {"result": " "}}, "abc", request_is_current=True
    )
    assert (rerun.answer, rerun.result) == ("rerun", None)


def test_on_a_page_showing_an_earlier_question_only_the_calls_own_field_answers() -> None:
    stale = {"chosen_options": ["Approve all"], "params_input": {}}
    ignored = read_outcome_answer(stale, "abc", request_is_current=False)
    assert ignored.answer is None and "only the field 'outcome_abc'" in ignored.warnings[0]
    own = {"chosen_options": ["Approve all"], "params_input": {"outcome_abc": "Happened", "result": "r-1"}}
    assert read_outcome_answer(own, "abc", request_is_current=False).answer == "happened"
    wrong = read_outcome_answer({"params_input": {"outcome_abc": "maybe"}}, "abc", request_is_current=False)
    assert wrong.answer is None and "not one of happened, no-result, rerun, fail" in wrong.warnings[0]


def test_an_answer_that_says_nothing_usable_is_ignored_and_a_timeout_is_reported() -> None:
    unknown = read_outcome_answer({"chosen_options": ["Approve all"]}, "abc", request_is_current=True)
    assert unknown.answer is None and unknown.warnings
    assert read_outcome_answer("yes", "abc", request_is_current=True).answer is None
    timed_out = read_outcome_answer({"error": "timed out", "error_type": "timeout"}, "abc", request_is_current=True)
    assert "nobody answered within the approval_timeout" in timed_out.timed_out
    with pytest.raises(RuntimeError, match="the wait for an answer failed"):
        read_outcome_answer({"error": "boom"}, "abc", request_is_current=True)


def test_the_resume_arguments_carry_the_call_asked_about() -> None:
    doubt = {"key": "k" * 64, "ref": "kkkkkkkkkk", "tool": "charge_card", "attempt": 1, "started_at": 1.5}
    resume = Resume.from_kwargs(
        {}, {"doubts": [doubt], "request_ti": "ti", "shown_refs": ["outcome_kkkkkkkkkk"], "round": 0}
    )
    assert resume.doubts == [doubt] and resume.pending == [] and resume.round == 0
    parked_by_0_2 = Resume.from_kwargs({}, {"doubt": doubt, "request_ti": "ti", "shown_refs": [], "round": 0})
    assert parked_by_0_2.doubts == [doubt]
    with pytest.raises(ValueError, match="without the calls it waited for"):
        Resume.from_kwargs({}, {"request_ti": "ti"})


def test_an_approval_on_a_page_showing_the_question_is_decided_by_its_call_fields() -> None:
    # The try asked about a call in doubt first: Airflow keeps that request's options for the whole try.
    event = {"chosen_options": ["It happened"], "params_input": {"call_aaaa": "approve"}}
    answer = read_answer(
        event, [PendingCall("aaaa", "send_email", "m1", {})], request_is_current=False, timeout_reason=""
    )
    assert answer.decisions["aaaa"].approved and not answer.warnings


# --- calls in doubt in a cache --------------------------------------------------------------------


class CutOff(BaseException):
    """The worker died while the tool ran."""


def _agent(charges: list[str], *, cut_off: bool) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42}, tool_call_id="c1")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int) -> str:
        charges.append("charged")
        if cut_off:
            raise CutOff
        return "receipt"

    return agent


def test_a_call_cut_off_is_found_by_its_ref_or_its_call_id_with_its_answer(tmp_path: Path) -> None:
    harness = DurableHarness(str(tmp_path))
    with pytest.raises(CutOff):
        harness.run(_agent([], cut_off=True), "charge", killed=True)
    reader = CacheReader(harness.store())
    [doubt] = calls_in_doubt(reader)
    assert doubt.started.tool == "charge_card" and doubt.started.attempt == 1 and doubt.resolution is None
    assert find_call([doubt], doubt.ref).found == [doubt] == find_call([doubt], "c1").found
    assert find_call([doubt], "nope").found == []
    harness.store().put(resolution_entry(doubt, Resolution("rerun", 1, doubt.started.started_at, answered_by="ana")))
    [answered] = calls_in_doubt(reader)
    assert answered.resolution is not None and answered.resolution.answer == "rerun"


def test_a_call_that_finished_is_not_in_doubt(tmp_path: Path) -> None:
    harness = DurableHarness(str(tmp_path))
    with pytest.raises(CutOff):
        harness.run(_agent([], cut_off=True), "charge", killed=True)
    harness.run(_agent([], cut_off=False), "charge", run_options={"unknown_outcome": OutcomeRules(on_unknown="rerun")})
    assert calls_in_doubt(CacheReader(harness.store())) == []
