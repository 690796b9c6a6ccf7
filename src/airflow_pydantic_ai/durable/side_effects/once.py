"""At-most-once tool calls: the start of each is recorded before it runs, so a try cut off mid-call is known.

The at-most-once tool policy (``policies.py`` registers it). A tool marked ``at_most_once()`` (its metadata) gets
one small write before each live call: a ``started`` entry under the call's own key (``started-{key}.json``: the
tool, its arguments as the model sent them, the try and the time). When the call ends with an outcome, its tool
entry is recorded as for any tool, and a retry replays that. When the tool raises an exception of its own, it ran to
its end and said it failed: the mark is removed and a retry runs it again, as any tool. When the try is cut off
while the call runs (the worker killed, OOM, a node drained, the run cancelled past its grace), the mark stays
without a result, and a later try that reaches the same call does not run it again. It does what the task's
``on_unknown_outcome`` says:

- ``"ask"``: the run stops and a person is asked (the Airflow side does that: :class:`AskAboutOutcome`);
  where nobody can be asked it behaves as ``"fail"`` and says why;
- ``"fail"``: :class:`OutcomeUnknown`, naming the call, its arguments and how to resolve it;
- ``"rerun"``: the call runs again, with a WARNING naming it.

The answer is recorded once, as a ``resolution`` entry under the same key (:class:`Resolution`), bound to
the start it answers (that try, that time): "it happened" with the result the model is given (replayed as
the call's result from then on), "run it again" (the call runs live once more, with a new start mark), or
"fail the task". A later start of the same call (after "run it again") that is cut off too is a new
unknown, asked again. A tool without the mark pays nothing: no read, no write.

Its state for one call is :class:`OnceGuard` (whether its start is to be recorded, the mark once written, the answer
it replays); whether the call is in doubt is :class:`~.doubt.CallLedger`'s decision, as for every reader.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from airflow_pydantic_ai.durable.errors import DurableStorageError
from airflow_pydantic_ai.durable.side_effects.doubt import CallHint, CallLedger, asking_answer
from airflow_pydantic_ai.durable.side_effects.records import (
    STARTED,
    CallInDoubt,
    StartedCall,
)
from airflow_pydantic_ai.durable.side_effects.tool_policy import TOOL_CONFIG_KEY, CallGuard, ToolPolicy, tool_config
from airflow_pydantic_ai.durable.side_effects.unknown_outcome import (
    AskAboutOutcome,
    OutcomeRules,
    masked_value,
    unknown_outcome_error,
)
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.wording import call_label

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt
    from airflow_pydantic_ai.durable.steps.tool_step import ToolStep

__all__ = [
    "AT_MOST_ONCE",
    "OnceGuard",
    "at_most_once",
    "forget_mark",
    "is_at_most_once",
    "mark_start",
]

_CUT_OFF: Final = "its start is recorded, so a retry does not run it again but does what on_unknown_outcome says"


def at_most_once() -> dict[str, Any]:
    """Tool metadata that makes each call of a tool happen at most once, even when a try is cut off mid-call.

    ``@agent.tool_plain(metadata=at_most_once())``, ``Tool(fn, metadata=at_most_once())``,
    ``FunctionToolset(..., metadata=at_most_once())`` (every tool of the toolset, an MCP server's too through
    its toolset's metadata): before each live call the attempt records that the call started. A later try that
    finds a call started and never finished does not run it again: it asks a person, fails, or runs it again,
    as the task's ``on_unknown_outcome`` says (``docs/side_effects.rst``). Merge it with metadata of your own:
    ``metadata={**at_most_once(), "team": "billing"}``.
    """
    return {TOOL_CONFIG_KEY: {"at_most_once": True}}


def is_at_most_once(tool_def: ToolDefinition) -> bool:
    """Whether the tool's metadata asks for at-most-once calls (:func:`at_most_once`)."""
    config = tool_config(tool_def)
    return isinstance(config, dict) and config.get("at_most_once") is True


@dataclass
class OnceGuard(CallGuard):
    """The at-most-once policy around one live call: settle an earlier start, record this one, forget it when the
    call ends with an exception of its own or a retry that may be forgotten."""

    run: Attempt
    step: ToolStep
    rules: OutcomeRules
    redact: Any = None
    marks_start: bool = False
    """The call is to run live: its start is recorded right before it runs (:meth:`starting`)."""
    started_mark: str | None = None
    """The entry that marks this call as started, once written."""
    given_by: str | None = None
    """For a call whose outcome was unknown: who said it happened, and how (its result replays)."""

    @classmethod
    def of(cls, run: AgentRun, step: ToolStep) -> OnceGuard:
        options = run.attempt.options
        return cls(run.attempt, step, options.unknown_outcome, options.redact)

    def before(self) -> None:
        """Settle an earlier start that never finished: the step replays an answer "it happened", or the call is to
        run live (its start recorded by :meth:`starting`); raises :class:`OutcomeUnknown` or
        :class:`AskAboutOutcome` otherwise."""
        run, step = self.run, self.step
        if step.key is None:
            run.log.warning(
                "Durable: %s is at most once, but it has no key (see the warning above), so its start cannot be "
                "recorded: if this try is cut off while it runs, a retry runs it again",
                step.shown(),
            )
            return
        if run.unread:
            raise DurableStorageError(
                f"{step.shown()} is at most once, and the durable cache could not be read ({run.unread}), so whether "
                "an earlier try started it is unknown: it does not run. Fix the storage; the next try reads the cache "
                "again"
            )
        doubt = _doubt(run, step)
        if doubt is not None and not self._settle(doubt):
            return  # replays the answer's result
        self.marks_start = True

    def _settle(self, doubt: CallInDoubt) -> bool:
        """Apply the recorded answer or the rules to a call in doubt; True when the call is to run live."""
        run, rules, redact = self.run, self.rules, self.redact
        resolution = doubt.resolution
        if resolution is not None:
            if resolution.answer == "happened":
                assert resolution.result is not None
                self.step.take_given(dict(resolution.result))
                self.given_by = resolution.describe()
                run.log.info(
                    "Durable: %s; %s: the result given replaces the call", doubt.describe(), resolution.describe()
                )
                return False
            if resolution.answer == "rerun":
                run.log.warning("Durable: %s; %s: it runs again", doubt.describe(), resolution.describe())
                return True
            raise unknown_outcome_error(doubt, rules, redact=redact, why=resolution.describe())
        if rules.on_unknown == "rerun":
            run.log.warning(
                "Durable: %s: its outcome is unknown and it runs again (on_unknown_outcome='rerun'), so its side "
                "effect may happen twice",
                doubt.describe(),
            )
            return True
        if rules.on_unknown == "ask" and rules.can_ask:
            raise AskAboutOutcome(doubt)
        why = (
            "on_unknown_outcome='fail'"
            if rules.on_unknown == "fail"
            else f"on_unknown_outcome='ask', but {rules.why_no_person}"
        )
        raise unknown_outcome_error(doubt, rules, redact=redact, why=why)

    def starting(self) -> None:
        if self.marks_start:  # issue 29: recorded last, right before the call, once nothing can refuse it
            self.started_mark = mark_start(self.run, self.step, redact=self.redact)

    def retry_recorded(self) -> None:
        """A retry outcome may be forgotten with its answer (``forget_what_failed``): its call's start mark goes
        now, so that a forgotten outcome never leaves the call looking cut off."""
        self._forget()

    def ended_without_outcome(self, error: Exception) -> None:
        """The tool ended and said it failed: not a call cut off. A retry runs it again, as any tool."""
        self._forget()

    def on_retry(self) -> str | None:
        return _CUT_OFF if self.started_mark is not None else None

    def replayed_as(self) -> str | None:
        return f"as {self.given_by}" if self.given_by is not None else None

    def _forget(self) -> None:
        if self.started_mark is not None:
            forget_mark(self.run, self.started_mark)
            self.started_mark = None


AT_MOST_ONCE = ToolPolicy("at most once", recognises=is_at_most_once, guard=OnceGuard.of)
"""The at-most-once policy's entry of the table (``policies.py``)."""


def _doubt(run: Attempt, step: ToolStep) -> CallInDoubt | None:
    """The call in doubt at ``step`` (an earlier start with no result), with its resolution; None when there is none
    (never started, or finished: a tool named live in replay mode runs again by design)."""
    assert step.key is not None
    ledger = CallLedger(run.entries, run.unverified)
    standing = ledger.standing(step.key)
    if not standing.open:
        return None
    shown = step.shown()
    if standing.state == "unverifiable":
        # Issue 35: a mark that exists but cannot be verified (damaged, sealed with a key not kept) still says the
        # call may have started: as if intact, whatever durable_storage_errors says.
        run.log.warning(
            "Durable: the start mark of %s (%s%s) cannot be verified (%s); the call counts as started by an earlier "
            "try with its outcome unknown",
            shown,
            run.store.location,
            standing.mark_name,
            standing.unverified,
        )

    def unusable(entry: StepEntry, error: Exception, which: str) -> None:
        if which == "mark":
            consequence = f"{shown} is treated as started by try {entry.attempt} with its outcome unknown"
        else:
            consequence = f"the outcome of {step.shown()} counts as unanswered"
        run.entry_unusable(entry, error, consequence)

    doubt = ledger.read(standing, CallHint(step.tool_name, step.call_id, step.arguments), unusable=unusable)
    assert doubt is not None
    asking = asking_answer(standing.mark, run.entries.values()) if standing.mark is not None else None
    asked_by = run.step_number(asking) if asking is not None else None
    # How a call in doubt is named: it has no step (yet).
    label = call_label("tool", step.tool_name, step.call_id)
    return replace(doubt, step=step.run.answer_number, label=label, asked_by=asked_by)


def mark_start(run: Attempt, step: ToolStep, *, redact: Any = None) -> str:
    """Record that ``step``'s call starts now (one write), right before it runs; returns the mark's name. Raises
    :class:`~airflow_pydantic_ai.durable.errors.DurableStorageError` when the mark cannot be stored, whatever
    ``durable_storage_errors`` says: a call whose start is not recorded does not run (it fails closed).

    The mark keeps the arguments for the person who may be asked about the call, masked by ``redact`` (Airflow's
    secrets masker): a registered secret among them never reaches the cache, and never keeps the mark out of it.
    """
    assert step.key is not None
    try:
        arguments = step.arguments if redact is None else masked_value(step.arguments, redact)
    except Exception as error:  # the mark matters more than what it shows: keep it, without the arguments
        # Only the error's type: its message may quote the value the masker was given.
        arguments = f"(not kept: the secrets masker failed on them: {type(error).__name__})"
    started = StartedCall(step.tool_name, step.call_id, arguments, run.try_number, time.time())
    entry = StepEntry(
        kind=STARTED,
        key=step.key,
        step=step.run.answer_number,
        attempt=run.try_number,
        label=step.tool_name,
        payload=started.to_payload(),
        call_id=step.call_id,
        role=STARTED,
        recorded_at=started.started_at,
        scope=step.run.entry_scope,
    )
    if run.record(entry, f"the start of {step.shown()}"):
        return entry.name
    raise DurableStorageError(
        f"the start of {step.shown()} could not be recorded in the durable cache at {run.store.location} "
        f"({run.writer.problem or 'see the log above'}), so it does not run: an at_most_once() call runs only once "
        "its start is recorded, or a retry could not tell that it ran. Fix the storage; the next try runs the call "
        "once the cache takes writes"
    )


def forget_mark(run: Attempt, name: str) -> None:
    """Remove the start mark ``name`` (the call ended with an exception of its own, or drew a retry that may be
    forgotten): a retry runs the call again instead of asking about it. Through the writer (its bookkeeping); a
    mark that cannot be removed stays, with a WARNING."""
    run.entries.pop(name, None)
    run.writer.remove(name, if_kept="a retry treats that call's outcome as unknown")
