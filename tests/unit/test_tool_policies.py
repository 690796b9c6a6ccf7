"""Tool policies as one table (issue 37): a new policy is one entry; whether a call is in doubt is decided once;
removals go through the writer.

A policy of the test's own (``audited``) is put in the table for one test: the toolset and the tool step call its
guard's hooks without a line of their own for it. The doubt tests cut a try off (a ``BaseException`` from the tool:
a start mark and no result) and ask every reader of the cache: they must agree with the retry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai import at_most_once, live_tool
from airflow_pydantic_ai.durable.attempt.cleanup import CallsKept
from airflow_pydantic_ai.durable.read import CacheReader, marked_calls
from airflow_pydantic_ai.durable.side_effects import OutcomeRules, OutcomeUnknown, Resolution, policies
from airflow_pydantic_ai.durable.side_effects.doubt import CallLedger
from airflow_pydantic_ai.durable.side_effects.tool_policy import TOOL_CONFIG_KEY, CallGuard, ToolPolicy, tool_config
from airflow_pydantic_ai.durable.storage.entry import entry_name


class CutOff(BaseException):
    """The worker died while the tool ran."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("act", {"amount": 42}, tool_call_id="c1")])


def _agent(calls: list[int], metadata: dict[str, Any] | None, *, raise_on: dict[int, BaseException]) -> Agent:
    agent: Agent[Any, str] = Agent(FunctionModel(_model))

    @agent.tool_plain(metadata=metadata)
    def act(amount: int) -> str:
        calls.append(amount)
        error = raise_on.get(len(calls))
        if error is not None:
            raise error
        return f"acted {amount} (call {len(calls)})"

    return agent


# --- a new policy is one entry of the table --------------------------------------------------------------------


@dataclass
class _Audit(CallGuard):
    """The test policy's guard: it notes each hook the tool step calls."""

    heard: list[str]
    step: Any = field(repr=False, default=None)

    def before(self) -> None:
        self.heard.append(f"before {self.step.tool_name}")

    def starting(self) -> None:
        self.heard.append("starting")

    def retry_recorded(self) -> None:
        self.heard.append("retry recorded")

    def ended_without_outcome(self, error: Exception) -> None:
        self.heard.append(f"ended without outcome: {type(error).__name__}")


def _audited(tool_def: ToolDefinition) -> bool:
    config = tool_config(tool_def)
    return isinstance(config, dict) and config.get("audited") is True


@pytest.fixture
def heard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hooks the ``audited`` policy's guards heard, that policy being one more entry of the table."""
    heard: list[str] = []
    audited = ToolPolicy("audited", recognises=_audited, guard=lambda run, step: _Audit(heard, step))
    monkeypatch.setattr(policies, "POLICIES", (*policies.POLICIES, audited))
    return heard


def test_a_new_policy_is_one_entry_of_the_table(harness: DurableHarness, heard: list[str]) -> None:
    calls: list[int] = []
    agent = _agent(calls, {TOOL_CONFIG_KEY: {"audited": True}}, raise_on={1: ConnectionError("down")})
    with pytest.raises(ConnectionError):
        harness.run(agent, "act")
    assert heard == ["before act", "starting", "ended without outcome: ConnectionError"]
    heard.clear()
    result, _, _ = harness.run(agent, "act")
    assert result.output == "done: acted 42 (call 2)" and heard == ["before act", "starting"]
    heard.clear()
    result, _, _ = harness.run(agent, "act")  # replayed: no live call, so no guard
    assert calls == [42, 42] and heard == [] and result.output == "done: acted 42 (call 2)"


def test_a_retry_outcome_is_told_to_the_guard(harness: DurableHarness, heard: list[str]) -> None:
    calls: list[int] = []
    agent = _agent(calls, {TOOL_CONFIG_KEY: {"audited": True}}, raise_on={1: ModelRetry("again")})
    harness.run(agent, "act")
    assert calls == [42] and heard == ["before act", "starting", "retry recorded"]


def test_the_table_recognises_each_policy_from_the_tool_definition() -> None:
    def policy_names(metadata: dict[str, Any] | None, **fields: Any) -> list[str]:
        tool_def = ToolDefinition(name="t", metadata=metadata, **fields)
        return [policy.name for policy in policies.policies_of(tool_def)]

    assert policy_names(None) == []
    assert policy_names(live_tool()) == ["live"]
    assert policy_names(at_most_once()) == ["at most once"]
    assert policy_names({**at_most_once(), "team": "billing"}) == ["at most once"]
    assert policies.guard_of((), None, None) is policies.NO_GUARD  # type: ignore[arg-type]
    assert not policies.LIVE.recorded and policies.AT_MOST_ONCE.recorded


# --- whether a call is in doubt is decided once ---------------------------------------------------------------


def _cut_off(harness: DurableHarness, calls: list[int]) -> Agent:
    agent = _agent(calls, at_most_once(), raise_on={1: CutOff()})
    with pytest.raises(CutOff):
        harness.run(agent, "act", killed=True)
    return agent


def test_every_reader_agrees_on_a_call_in_doubt(harness: DurableHarness) -> None:
    calls: list[int] = []
    agent = _cut_off(harness, calls)
    run, _ = harness.open(unknown_outcome=OutcomeRules(on_unknown="fail"))
    [mark] = [entry for entry in run.entries.values() if entry.step_role == "started"]
    ledger = CallLedger(run.entries, run.unverified)
    assert ledger.standing(mark.key).state == "started" and ledger.standing("nokey").state == "never started"
    # The attempt's question (the approval flow asks it), the listing, the cleanup: one answer.
    [doubt] = run.calls_in_doubt()
    assert doubt.key == mark.key and doubt.started.tool == "act" and doubt.resolution is None
    assert run.call_in_doubt(mark.key, "act") == doubt
    [listed] = marked_calls(CacheReader(harness.store()))
    assert listed.state == "unfinished" and listed.open and listed.call.key == mark.key
    assert set(CallsKept.of(run.entries, run.unverified).entries) == {mark.name}
    # A tool entry written since (by the attempt that deletes) finishes it for the cleanup too.
    assert not CallsKept.of(run.entries, run.unverified, [entry_name("tool", mark.key)])
    # The retry decides alike: the call is not run again.
    with pytest.raises(OutcomeUnknown):
        harness.run(agent, "act", run_options={"unknown_outcome": OutcomeRules(on_unknown="fail")})
    assert calls == [42]


def test_an_answer_resolves_the_call_for_every_reader(harness: DurableHarness) -> None:
    calls: list[int] = []
    agent = _cut_off(harness, calls)
    run, _ = harness.open()
    [doubt] = run.calls_in_doubt()
    run.resolve(doubt, Resolution.happened(doubt.started, "acted (receipt r-1)", answered_by="ana"))
    assert run.calls_in_doubt() == []  # answered: no longer asked about
    answered = run.call_in_doubt(doubt.key, "act")
    assert answered is not None and answered.resolution is not None
    [listed] = marked_calls(CacheReader(harness.store()))
    assert listed.state == "resolved" and listed.open
    result, _, _ = harness.run(agent, "act")
    assert result.output == "done: acted (receipt r-1)" and calls == [42]
    [listed] = marked_calls(CacheReader(harness.store()))
    assert listed.state == "resolved" and not listed.open  # the answer was used: its result is the call's entry
    run, _ = harness.open()
    assert run.calls_in_doubt() == [] and run.call_in_doubt(doubt.key, "act") is None


def test_a_mark_that_cannot_be_verified_is_in_doubt_for_every_reader(harness: DurableHarness) -> None:
    calls: list[int] = []
    _cut_off(harness, calls)
    [mark_file] = harness.root.glob("started-*.json")
    mark_file.write_bytes(b"\x00 not an entry")
    run, _ = harness.open()
    key = mark_file.name.removeprefix("started-").removesuffix(".json")
    assert CallLedger(run.entries, run.unverified).standing(key).state == "unverifiable"
    [doubt] = run.calls_in_doubt()
    assert doubt.key == key and doubt.started.unverified
    [listed] = marked_calls(CacheReader(harness.store()))
    assert listed.state == "unfinished" and "cannot be verified" in listed.problem
    assert set(CallsKept.of(run.entries, run.unverified).unverified) == {mark_file.name}


# --- removals go through the writer ---------------------------------------------------------------------------


def test_a_mark_removed_leaves_the_writer_bookkeeping_true(harness: DurableHarness) -> None:
    calls: list[int] = []
    agent = _agent(calls, at_most_once(), raise_on={1: ConnectionError("down")})
    run, log = harness.open()
    with pytest.raises(ConnectionError), run.ending():
        from airflow_pydantic_ai.durable import run_agent

        run_agent(run, agent, "act")
    assert not any(name.startswith("started-") for name in run.writer.written)
    assert not list(harness.root.glob("started-*")) and not any("could not remove" in line for line in log.texts)


def test_a_removal_that_fails_is_one_warning_and_the_entry_stays_written(
    harness: DurableHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, log = harness.open()
    entry = next(iter(run.entries.values()), None)
    assert entry is None  # a fresh cache
    from airflow_pydantic_ai.durable.storage.entry import StepEntry

    written = StepEntry(kind="started", key="k1", step=1, attempt=1, label="act", payload={}, role="started")
    assert run.writer.persist(written, "a mark")

    def refuse(name: str) -> None:
        raise PermissionError("read-only bucket")

    monkeypatch.setattr(run.store, "remove", refuse)
    assert not run.writer.remove(written.name, if_kept="a retry treats that call's outcome as unknown")
    assert written.name in run.writer.written
    [line] = [line for line in log.at("warning") if "could not remove" in line]
    assert "read-only bucket" in line and "a retry treats that call's outcome as unknown" in line
    monkeypatch.undo()
    assert run.writer.remove(written.name, if_kept="")
    assert written.name not in run.writer.written and not (harness.root / written.name).exists()
