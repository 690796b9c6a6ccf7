"""Approval without Airflow: decisions recorded and replayed like steps, bound to their call; answers read safely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.approval.answer import ApprovalTimedOut, read_answer
from airflow_pydantic_ai.approval.request import PendingCall, build_request, pretty_arguments
from airflow_pydantic_ai.durable import Attempt, DurableCapability
from airflow_pydantic_ai.durable.interception.approvals import WaitingForDecisions, run_until_decision_needed
from airflow_pydantic_ai.durable.steps.decision import Decision
from airflow_pydantic_ai.durable.storage.reader import CacheReader

IDENTITY = task_identity("dag", "mail", run_id="run")


def open_run(base: Path, attempt: int = 1) -> Attempt:
    log = RecordingLog()
    store = local_store(base, IDENTITY, warn=log.warning)
    return Attempt.open(store, attempt=attempt, log=log)


def mail_agent(recipient: str, sent: list[str], requests: list[int], output_type: Any = str) -> Agent[None, Any]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": recipient}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])

    agent = Agent(FunctionModel(model), output_type=output_type)

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    return agent


def run(agent: Agent[None, str], durable: Attempt) -> Any:
    return run_until_decision_needed(agent, "mail", durable, output_type=str, capabilities=[DurableCapability(durable)])


def test_a_recorded_decision_is_replayed_and_listed_by_the_read_side(tmp_path: Path) -> None:
    sent: list[str] = []
    requests: list[int] = []
    first = open_run(tmp_path)
    waiting = run(mail_agent("bob", sent, requests), first)
    assert isinstance(waiting, WaitingForDecisions) and [s.tool_name for s in waiting.pending] == ["send_email"]
    waiting.pending[0].record(Decision(approved=True, answered_by="alice"))

    resumed = open_run(tmp_path)
    result = run(mail_agent("bob", sent, requests), resumed)
    assert result.output == "done: sent to bob"
    assert sent == ["bob"] and len(requests) == 2  # the first model step replayed

    steps = CacheReader(resumed.store).steps()
    assert [(step.kind, step.name) for step in steps] == [
        ("model", "function:function:model:"),
        ("decision", "send_email"),
        ("tool", "send_email"),
        ("model", "function:function:model:"),
    ]
    assert CacheReader(resumed.store).read(2).content == {
        "approved": True,
        "reason": None,
        "answered_by": "alice",
        "timed_out": False,
    }


def test_a_decision_is_bound_to_the_exact_call(tmp_path: Path) -> None:
    sent: list[str] = []
    waiting = run(mail_agent("bob", sent, []), open_run(tmp_path))
    assert isinstance(waiting, WaitingForDecisions)
    waiting.pending[0].record(Decision(approved=True, answered_by="alice"))

    # The model answers again (its recorded answer is gone) at the same place in the conversation, with other
    # arguments: the approval given for bob does not apply to mallory.
    second = open_run(tmp_path)
    second.store.remove(next(name for name in second.entries if name.startswith("model-")))
    other = run(mail_agent("mallory", sent, []), open_run(tmp_path))
    assert isinstance(other, WaitingForDecisions) and other.pending[0].key != waiting.pending[0].key
    assert sent == []


def test_a_rejection_reaches_the_model_as_the_tool_denial(tmp_path: Path) -> None:
    sent: list[str] = []
    waiting = run(mail_agent("bob", sent, []), open_run(tmp_path))
    assert isinstance(waiting, WaitingForDecisions)
    waiting.pending[0].record(Decision(approved=False, reason="not today", answered_by="alice"))
    result = run(mail_agent("bob", sent, []), open_run(tmp_path))
    assert result.output == "done: not today" and sent == []


def test_a_damaged_decision_is_asked_again_never_taken_as_an_approval(tmp_path: Path) -> None:
    waiting = run(mail_agent("bob", [], []), open_run(tmp_path))
    assert isinstance(waiting, WaitingForDecisions)
    step = waiting.pending[0]
    step.record(Decision(approved=True))
    path = tmp_path / "dag" / "run" / "mail" / "-1" / step.entry_name
    path.write_text(path.read_text().replace('"approved":true', '"approved":"yes"'))
    again = run(mail_agent("bob", [], []), open_run(tmp_path))
    assert isinstance(again, WaitingForDecisions)


CALLS = [PendingCall("aaaa", "send_email", "c1", None), PendingCall("bbbb", "drop_table", "c2", None)]


def answer(option: str, timedout: bool = False, **params: Any) -> dict[str, Any]:
    return {
        "chosen_options": [option],
        "params_input": params,
        "responded_by_user": None if timedout else {"id": "alice", "name": "alice"},
        "timedout": timedout,
    }


def test_reading_answers() -> None:
    read = read_answer(answer("Reject all", reason="no"), CALLS, request_is_current=True, timeout_reason="late")
    assert {ref: (d.approved, d.reason, d.answered_by) for ref, d in read.decisions.items()} == {
        "aaaa": (False, "no", "alice"),
        "bbbb": (False, "no", "alice"),
    }
    # A page showing an earlier round: "Approve all" decides nothing; named calls do.
    stale = read_answer(answer("Approve all", call_bbbb="approve"), CALLS, request_is_current=False, timeout_reason="")
    assert list(stale.decisions) == ["bbbb"] and stale.warnings
    per_call = read_answer(
        answer("Decide per call", call_aaaa="approve", call_bbbb="later", call_cccc="approve"),
        CALLS,
        request_is_current=True,
        timeout_reason="",
    )
    assert list(per_call.decisions) == ["aaaa"] and len(per_call.warnings) == 2
    timed_out = read_answer(answer("Reject all", timedout=True), CALLS, request_is_current=False, timeout_reason="late")
    assert {d.reason for d in timed_out.decisions.values()} == {"late"}
    malformed = read_answer({"chosen_options": "Approve all"}, CALLS, request_is_current=True, timeout_reason="")
    assert malformed.decisions == {} and malformed.warnings
    with pytest.raises(ApprovalTimedOut, match="on_approval_timeout='fail'"):
        read_answer({"error": "timeout", "error_type": "timeout"}, CALLS, request_is_current=True, timeout_reason="")


def test_the_request_masks_secrets_and_cuts_long_values() -> None:
    def redact(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: "***" if k == "password" else redact(v) for k, v in value.items()}
        return value.replace("s3cr3t", "***") if isinstance(value, str) else value

    text = pretty_arguments('{"password": "hunter2", "body": "' + "x" * 2000 + '", "note": "s3cr3t"}', redact)
    assert "hunter2" not in text and "s3cr3t" not in text and "(1500 more characters)" in text
    request = build_request(
        [PendingCall("aaaa", "send_email", "c1", {"to": "bob"}), PendingCall("bbbb", "send_email", "c2", {})],
        task_label="dag.mail",
        prompt="Mail bob, key s3cr3t",
        redact=redact,
        reject_on_timeout=True,
        param=lambda default, **schema: {"value": default, **schema},
    )
    assert request.options == ["Approve all", "Reject all", "Decide per call"]
    assert set(request.params) == {"call_aaaa", "call_bbbb", "reason"}
    assert request.defaults == ["Reject all"] and "s3cr3t" not in request.body and '"to": "bob"' in request.body


def test_work_done_outside_the_agent_is_refused_naming_the_tool(tmp_path: Path) -> None:
    from pydantic_ai.exceptions import CallDeferred
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import ExternalToolset

    from airflow_pydantic_ai.durable.interception.approvals import ApprovalsUnsupported
    from airflow_pydantic_ai.operators.agent_checks import refuse_external_tools as _refuse_external_tools

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("render_video", {}, tool_call_id="v1")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def render_video() -> str:
        raise CallDeferred()

    with pytest.raises(ApprovalsUnsupported, match="render_video deferred their call"):
        run(agent, open_run(tmp_path))
    with pytest.raises(ValueError, match=r"external tools \(upload\)"):
        _refuse_external_tools(Agent(FunctionModel(model), toolsets=[ExternalToolset([ToolDefinition(name="upload")])]))


def test_approval_asked_at_run_time_without_durable_says_to_turn_durable_on() -> None:
    from pydantic_ai.exceptions import ApprovalRequired

    from airflow_pydantic_ai.operators.agent import AgentOperator

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("pay", {}, tool_call_id="p1")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def pay() -> str:
        raise ApprovalRequired()

    operator = AgentOperator(task_id="pay", prompt="pay", agent=agent)
    with pytest.raises(ValueError, match="Set durable=True"):
        operator._run_plain(agent, "pay", None)


def test_an_agent_with_output_validators_gets_advice_or_works_with_its_own_deferred_output(tmp_path: Path) -> None:
    from pydantic_ai.tools import DeferredToolRequests

    from airflow_pydantic_ai.durable.interception.approvals import ApprovalsUnsupported

    plain = mail_agent("bob", [], [])
    plain.output_validator(lambda output: output)
    with pytest.raises(ApprovalsUnsupported, match=r"output_type=\[MyOutput, DeferredToolRequests\]"):
        run(plain, open_run(tmp_path / "plain"))

    sent: list[str] = []
    ready = mail_agent("bob", sent, [], output_type=[str, DeferredToolRequests])
    ready.output_validator(lambda output: output)
    durable = open_run(tmp_path / "ready")
    waiting = run_until_decision_needed(
        ready, "mail", durable, output_type=[str, DeferredToolRequests], capabilities=[DurableCapability(durable)]
    )
    assert isinstance(waiting, WaitingForDecisions) and sent == []


def test_the_request_text_stays_true_after_the_answer_and_the_run() -> None:
    # Airflow keeps showing the request's text on the Required Actions page once answered and done.
    for count in (1, 2):
        calls = [PendingCall(f"ref{n}", "send_email", f"c{n}", {}) for n in range(count)]
        request = build_request(
            calls,
            task_label="dag.mail",
            prompt="Mail bob",
            redact=lambda value: value,
            reject_on_timeout=False,
            param=lambda default, **schema: {"value": default, **schema},
        )
        first_line = request.body.splitlines()[0]
        assert "yet" not in first_line and "wants" not in first_line
        verb = "does" if count == 1 else "do"
        assert first_line.endswith(
            f"asked to run {count} tool call{'s' * (count > 1)}, which {verb} not run before a person decides."
        )


def test_deferred_output_is_recognised_by_type_in_every_spelling() -> None:
    from typing import Annotated, Union

    from pydantic_ai.output import ToolOutput
    from pydantic_ai.tools import DeferredToolRequests

    from airflow_pydantic_ai.durable.interception.approvals import allows_deferred_calls, with_deferred_output

    class MyRequests(DeferredToolRequests):
        """A subclass is an ordinary output type to pydantic-ai (the model fills it in), not a stop."""

    allowing = [
        DeferredToolRequests,
        [str, DeferredToolRequests],
        (str, DeferredToolRequests),
        str | DeferredToolRequests,
        Union[str, DeferredToolRequests],  # noqa: UP007 - the older spelling on purpose
        Annotated[str | DeferredToolRequests, "note"],
        [[str], [DeferredToolRequests]],
    ]
    for output_type in allowing:
        assert allows_deferred_calls(output_type), output_type
    for output_type in (str, [str, MyRequests], str | MyRequests, ToolOutput(DeferredToolRequests)):
        assert not allows_deferred_calls(output_type), output_type
    assert with_deferred_output(str | int) == [str, int, DeferredToolRequests]
    assert with_deferred_output([str, DeferredToolRequests]) == [str, DeferredToolRequests]


def test_an_agent_with_validators_and_a_union_output_type_stops_for_approval(tmp_path: Path) -> None:
    # `str | DeferredToolRequests` allows the stop as much as `[str, DeferredToolRequests]` does: the run
    # waits for the decision instead of handing back the stop as the task's output.
    from pydantic_ai.tools import DeferredToolRequests

    sent: list[str] = []
    agent = mail_agent("bob", sent, [], output_type=str | DeferredToolRequests)
    agent.output_validator(lambda output: output)
    durable = open_run(tmp_path)
    waiting = run_until_decision_needed(
        agent, "mail", durable, output_type=agent.output_type, capabilities=[DurableCapability(durable)]
    )
    assert isinstance(waiting, WaitingForDecisions), waiting
    assert [step.tool_name for step in waiting.pending] == ["send_email"] and sent == []


def test_a_delegates_own_deferred_call_error_is_not_taken_for_the_agents(tmp_path: Path) -> None:
    # pydantic-ai's error names DeferredToolRequests whichever run raised it; only a call of *this* run that
    # needs approval gets the advice about this agent's output types.
    from pydantic_ai.exceptions import UserError

    delegate = mail_agent("carol", [], [])  # needs approval, cannot stop for it (str output)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("ask_delegate", {}, tool_call_id="d1")])

    agent = Agent(FunctionModel(model))
    agent.output_validator(lambda output: output)

    @agent.tool_plain
    async def ask_delegate() -> str:
        return (await delegate.run("mail")).output

    with pytest.raises(UserError, match="DeferredToolRequests") as raised:
        run(agent, open_run(tmp_path))
    assert type(raised.value) is UserError


def test_a_decision_applies_when_the_model_step_before_it_ran_live_again(tmp_path: Path) -> None:
    """A response holding a registered secret is never cached, so the resumed run asks the model again: the same
    call must find the person's decision (pydantic-ai 2.78 stamps each response with its ``duration`` and
    ``request_timestamp``, which differ on every request; a key that digests them asked again forever)."""
    from airflow_pydantic_ai.durable import AttemptOptions

    secret = "tok-5ecret-value"

    def redact(value: Any) -> Any:  # what Airflow's masker does with a registered secret
        if isinstance(value, dict):
            return {key: redact(item) for key, item in value.items()}
        if isinstance(value, list):
            return [redact(item) for item in value]
        return value.replace(secret, "***") if isinstance(value, str) else value

    def opened() -> Attempt:
        log = RecordingLog()
        return Attempt.open(
            local_store(tmp_path, IDENTITY, warn=log.warning), attempt=1, log=log, options=AttemptOptions(redact=redact)
        )

    sent: list[str] = []
    requests: list[int] = []
    first = opened()
    waiting = run(mail_agent(f"bob {secret}", sent, requests), first)
    assert isinstance(waiting, WaitingForDecisions)
    assert any("registered as secret" in line for line in first.log.at("warning"))  # the response is not cached
    first.decide(
        waiting.pending[0].call,
        key=str(waiting.pending[0].key),
        step_number=waiting.pending[0].step_number,
        decision=Decision(approved=False, reason="not today", answered_by="alice"),
    )

    result = run(mail_agent(f"bob {secret}", sent, requests), opened())
    assert not isinstance(result, WaitingForDecisions), "the person's decision was not found: asked again"
    assert result.output == "done: not today" and sent == [] and len(requests) == 3
