"""At-most-once tool calls: the start of each is recorded before it runs, so a try cut off mid-call is known.

A tool marked ``at_most_once()`` (its metadata) gets one small write before each live call: a ``started``
entry under the call's own key (``started-{key}.json``: the tool, its arguments as the model sent them, the
try and the time). When the call ends with an outcome, its tool entry is recorded as for any tool, and a
retry replays that. When the tool raises an exception of its own, it ran to its end and said it failed: the
mark is removed and a retry runs it again, as any tool. When the try is cut off while the call runs (the
worker killed, OOM, a node drained, the run cancelled past its grace), the mark stays without a result, and a
later try that reaches the same call does not run it again. It does what the task's ``on_unknown_outcome``
says:

- ``"ask"``: the run stops and a person is asked (the Airflow side does that: :class:`AskAboutOutcome`);
  where nobody can be asked it behaves as ``"fail"`` and says why;
- ``"fail"``: :class:`OutcomeUnknown`, naming the call, its arguments and how to resolve it;
- ``"rerun"``: the call runs again, with a WARNING naming it.

The answer is recorded once, as a ``resolution`` entry under the same key (:class:`Resolution`), bound to
the start it answers (that try, that time): "it happened" with the result the model is given (replayed as
the call's result from then on), "run it again" (the call runs live once more, with a new start mark), or
"fail the task". A later start of the same call (after "run it again") that is cut off too is a new
unknown, asked again. A tool without the mark pays nothing: no read, no write.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from airflow_pydantic_ai.durable.errors import DurableError, DurableStorageError, describe_error
from airflow_pydantic_ai.durable.steps.outcome import Returned, decode_outcome, encode_outcome
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.wording import call_label

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt
    from airflow_pydantic_ai.durable.steps.tool_step import ToolStep

__all__ = [
    "ANSWERS",
    "NO_RESULT",
    "UNKNOWN_OUTCOME_CHOICES",
    "Answer",
    "AskAboutOutcome",
    "CallInDoubt",
    "OutcomeRules",
    "OutcomeUnknown",
    "Resolution",
    "StartedCall",
    "UnknownOutcome",
    "asking_answer",
    "before_live_call",
    "forget_mark",
    "mark_start",
    "masked",
    "parse_result",
    "resolution_entry",
    "unknown_outcome_error",
]

UnknownOutcome = Literal["ask", "fail", "rerun"]
"""What a try does with an at-most-once call an earlier try started and never finished."""
UNKNOWN_OUTCOME_CHOICES: tuple[UnknownOutcome, ...] = ("ask", "fail", "rerun")
Answer = Literal["happened", "rerun", "fail"]
"""A resolution: the call's side effect happened (with the result to give the model), run it again, fail."""
ANSWERS: tuple[Answer, ...] = ("happened", "rerun", "fail")
NO_RESULT: Final = "The call happened; its result is unknown. Do not call it again."
"""What the model is told a call returned when a person says it happened and its result is unknown."""
_STARTED: Final = "started"
_RESOLUTION: Final = "resolution"


def _utc(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class StartedCall:
    """The payload of a ``started`` entry: which call started, in which try, when."""

    tool: str
    call_id: str | None
    arguments: Any
    """As the model sent them (a JSON string or a dict); shown to a person masked."""
    attempt: int
    started_at: float
    unverified: str = ""
    """Why its start mark exists but cannot be read or verified (then ``attempt`` and ``started_at`` are 0: the
    start is unknown, and an answer binds to that unknown start). Empty for a readable mark; never stored."""

    @classmethod
    def unknown(cls, tool: str, call_id: str | None, arguments: Any, why: str) -> StartedCall:
        """A call whose start mark exists but cannot be verified: started by some earlier try, when unknown."""
        return cls(tool, call_id, arguments, 0, 0.0, why)

    @property
    def by(self) -> str:
        """Which try started it and when: ``try 1 at 2026-11-28 10:00:00 UTC``, or, for a mark that cannot be
        verified, ``an earlier try (its start mark cannot be verified: ...)``."""
        if self.unverified:
            return f"an earlier try (its start mark cannot be verified: {self.unverified})"
        return f"try {self.attempt} at {self.when}"

    def to_payload(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "call_id": self.call_id,
            "arguments": self.arguments,
            "attempt": self.attempt,
            "started_at": self.started_at,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StartedCall:
        attempt, started_at = payload["attempt"], payload["started_at"]
        if not isinstance(attempt, int) or not isinstance(started_at, (int, float)):
            raise ValueError(f"a started mark needs an integer attempt and a time, got {attempt!r}, {started_at!r}")
        call_id = payload.get("call_id")
        return cls(
            tool=str(payload["tool"]),
            call_id=None if call_id is None else str(call_id),
            arguments=payload.get("arguments"),
            attempt=attempt,
            started_at=float(started_at),
        )

    @property
    def when(self) -> str:
        return _utc(self.started_at)


@dataclass(frozen=True)
class Resolution:
    """What was decided about one start of a call whose outcome was unknown (the payload of a ``resolution``)."""

    answer: Answer
    attempt: int
    """The try whose start this resolves (with ``started_at``: a later start is not resolved by it)."""
    started_at: float
    result: dict[str, Any] | None = None
    """For ``happened``: the result the model is given, as a tool entry's payload (``encode_outcome``)."""
    answered_by: str | None = None
    via: str = "a person"
    """How it was answered: ``the Required Actions page``, ``airflow pydantic-ai cache resolve``..."""
    answered_at: float | None = None
    no_result: bool = False
    """For ``happened``: the person said its result is unknown; the model is given ``NO_RESULT``."""

    def resolves(self, started: StartedCall) -> bool:
        return self.attempt == started.attempt and abs(self.started_at - started.started_at) < 1e-6

    def to_payload(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "result": self.result,
            "answered_by": self.answered_by,
            "via": self.via,
            "answered_at": self.answered_at,
            "no_result": self.no_result,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Resolution:
        answer = payload["answer"]
        if answer not in ANSWERS:
            raise ValueError(f"unknown answer {answer!r} (expected one of {', '.join(ANSWERS)})")
        result = payload.get("result")
        no_result = bool(payload.get("no_result"))
        if answer == "happened":
            if not isinstance(result, dict):
                raise ValueError("an answer 'happened' carries the result to give the model")
            outcome = decode_outcome(result)  # a result that cannot be rebuilt is no answer
            if isinstance(outcome, Returned) and outcome.value is None:  # never None: the model would call it again
                result, no_result = encode_outcome(Returned(NO_RESULT)), True
        answered_by, answered_at = payload.get("answered_by"), payload.get("answered_at")
        return cls(
            answer=answer,
            attempt=int(payload["attempt"]),
            started_at=float(payload["started_at"]),
            result=result if isinstance(result, dict) else None,
            answered_by=None if answered_by is None else str(answered_by),
            via=str(payload.get("via") or "a person"),
            answered_at=float(answered_at) if isinstance(answered_at, (int, float)) else None,
            no_result=no_result and answer == "happened",
        )

    @classmethod
    def happened(cls, started: StartedCall, value: Any, **who: Any) -> Resolution:
        """The side effect happened; ``value`` is what the model is told the call returned (never None: a
        result is given, or :meth:`happened_without_result` says it is unknown)."""
        if value is None:
            raise ValueError(
                "an answer 'it happened' needs the result the model is given, or the choice that its result is "
                "unknown (the model is then told: " + NO_RESULT + ")"
            )
        return cls("happened", started.attempt, started.started_at, encode_outcome(Returned(value)), **who)

    @classmethod
    def happened_without_result(cls, started: StartedCall, **who: Any) -> Resolution:
        """The side effect happened and its result is unknown: the model is told ``NO_RESULT``."""
        result = encode_outcome(Returned(NO_RESULT))
        return cls("happened", started.attempt, started.started_at, result, no_result=True, **who)

    def describe(self) -> str:
        if self.no_result:
            return f"{self.answered_by or 'someone'} answered 'it happened, result unknown' ({self.via})"
        words = {"happened": "it happened", "rerun": "run it again", "fail": "fail the task"}[self.answer]
        who = self.answered_by or "someone"
        return f"{who} answered '{words}' ({self.via})"


def parse_result(text: str | None) -> Any:
    """The result a person typed for "it happened": JSON when it parses as JSON, else the text itself."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class CallInDoubt:
    """An at-most-once call that an earlier try started and never finished, and what was decided about it."""

    key: str
    step: int
    """The model step whose answer asked for the call."""
    label: str
    """How the log names the call (``step 4: tool charge_card (call c1)``)."""
    started: StartedCall
    resolution: Resolution | None = None
    scope: dict[str, Any] | None = None
    """The agent run the call belongs to (its entries' ``scope``)."""
    asked_by: int | None = None
    """The number of the model step whose answer asked for the call, as ``cache show``, ``--step`` and
    ``--from-step`` number it (the call itself has no step of its own until an answer about it is used); None when
    that answer is not in the cache."""

    @classmethod
    def of_mark(cls, mark: StepEntry, resolution: Resolution | None = None) -> CallInDoubt:
        """The call a ``started`` entry names (raises ``ValueError``/``KeyError`` when the mark is unreadable)."""
        started = StartedCall.from_payload(mark.payload)
        label = call_label("tool", started.tool, started.call_id)
        resolved = resolution if resolution is not None and resolution.resolves(started) else None
        return cls(mark.key, mark.step, label, started, resolved, mark.scope)

    @property
    def ref(self) -> str:
        """A short name for the call, for people and commands (the start of its key)."""
        return self.key[:10]

    def describe(self) -> str:
        asked = f", asked for by step {self.asked_by}," if self.asked_by is not None else ""
        return (
            f"{self.label}{asked} was started by {self.started.by} and never finished "
            "(that try was cut off while it ran)"
        )


@dataclass(frozen=True)
class OutcomeRules:
    """How an attempt treats calls in doubt: the task's ``on_unknown_outcome``, whether a person can be asked,
    and the command that records an answer (for the error message)."""

    on_unknown: UnknownOutcome = "ask"
    can_ask: bool = False
    """True where the Airflow side asks a person (``AgentOperator``, ``@task.pydantic_ai``); False in a plain
    ``@task`` with ``durable_attempt()``, tests and notebooks."""
    resolve_command: str = ""
    """``airflow pydantic-ai cache resolve DAG RUN TASK`` for this task instance (``--call`` and the answer follow)."""
    why_no_person: str = "no person can be asked here (a plain @task with durable_attempt(), or outside Airflow)"


class OutcomeUnknown(DurableError, RuntimeError):
    """An at-most-once call was started by an earlier try and never finished, and this try may not run it again.

    Raised where ``on_unknown_outcome`` is ``"fail"`` (or ``"ask"`` where nobody can be asked), or when the
    recorded answer is "fail the task"; the message names the call and how to resolve it.
    """

    def __init__(self, message: str, *, call: CallInDoubt) -> None:
        super().__init__(message)
        self.call = call


class AskAboutOutcome(DurableError):
    """Internal signal: the run stops so that a person is asked what happened to ``call`` (the Airflow side
    catches it, asks through human-in-the-loop, and records the answer as a :class:`Resolution`)."""

    def __init__(self, call: CallInDoubt) -> None:
        super().__init__(f"{call.describe()}; a person is asked what happened")
        self.call = call


def _doubt(run: Attempt, step: ToolStep) -> CallInDoubt | None:
    """The call in doubt at ``step`` (an earlier start with no result), with its resolution; None when there is none."""
    assert step.key is not None
    name = entry_name(_STARTED, step.key)
    mark = run.entries.get(name)
    if entry_name("tool", step.key) in run.entries:
        return None  # it finished (a tool named live in replay mode runs again by design)
    shown = step.shown()
    label = call_label("tool", step.tool_name, step.call_id)  # how a call in doubt is named: it has no step (yet)
    if mark is None:
        why = run.unverified.get(name)
        if why is None:
            return None  # never started
        # Issue 35: a mark that exists but cannot be verified (damaged, sealed with a key not kept) still says the
        # call may have started: as if intact, whatever durable_storage_errors says.
        run.log.warning(
            "Durable: the start mark of %s (%s%s) cannot be verified (%s); the call counts as started by an earlier "
            "try with its outcome unknown",
            shown,
            run.store.location,
            name,
            why,
        )
        started = StartedCall.unknown(step.tool_name, step.call_id, step.arguments, why)
        return CallInDoubt(step.key, step.run.answer_number, label, started, _answer_for(run, step, started), None)
    try:
        started = StartedCall.from_payload(mark.payload)
    except Exception as error:  # a mark that cannot be read: the call cannot be proven started; say so
        run.entry_unusable(mark, error, f"{shown} is treated as started by try {mark.attempt} with its outcome unknown")
        started = StartedCall(step.tool_name, step.call_id, step.arguments, mark.attempt, mark.recorded_at or 0.0)
    asking = asking_answer(mark, run.entries.values())
    asked_by = run.step_number(asking) if asking is not None else None
    resolution = _answer_for(run, step, started)
    return CallInDoubt(step.key, step.run.answer_number, label, started, resolution, mark.scope, asked_by)


def _answer_for(run: Attempt, step: ToolStep, started: StartedCall) -> Resolution | None:
    """The recorded answer about ``started`` (None: none, another start's, or one that cannot be read)."""
    assert step.key is not None
    answer = run.entries.get(entry_name(_RESOLUTION, step.key))
    if answer is None:
        return None
    try:
        found = Resolution.from_payload(answer.payload)
    except Exception as error:
        run.entry_unusable(answer, error, f"the outcome of {step.shown()} counts as unanswered")
        return None
    return found if found.resolves(started) else None


def asking_answer(mark: StepEntry, entries: Iterable[StepEntry]) -> StepEntry | None:
    """The model step whose answer asked for the call ``mark`` started: of its agent run and model step, recorded
    by the try that started the call or an earlier one (the latest of them)."""
    found = [
        entry
        for entry in entries
        if entry.step_role == "model"
        and entry.step == mark.step
        and entry.scope_id == mark.scope_id
        and entry.attempt <= mark.attempt
    ]
    return max(found, key=lambda entry: (entry.attempt, entry.recorded_at or 0.0)) if found else None


def masked_value(arguments: Any, redact: Any) -> Any:
    """``arguments`` masked by ``redact``: JSON text parsed first, so that values under sensitive keys
    (``{"api_key": ...}``) are masked as well as registered secrets; other text is masked as it is."""
    value = arguments
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not JSON: masked as the text it is
            value = json.loads(value)
    return redact(value) if redact is not None else value


def masked(arguments: Any, redact: Any) -> str:
    """A call's arguments (or the result given for it) as a person is shown them: JSON text, masked by ``redact``,
    cut at 500 characters. JSON text is masked as the value it holds, so that ``{"api_key": ...}`` is masked by
    its key as well as any value registered as a secret."""
    value = masked_value(arguments, redact)
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = str(redact(text)) if redact is not None else text
    return text if len(text) <= 500 else f"{text[:500]}... ({len(text) - 500} more characters)"


def unknown_outcome_error(doubt: CallInDoubt, rules: OutcomeRules, *, redact: Any, why: str) -> OutcomeUnknown:
    """The error that fails the task on a call in doubt: the call, its arguments (masked), how to resolve it."""
    command = rules.resolve_command or "airflow pydantic-ai cache resolve DAG_ID RUN_ID TASK_ID"
    ways = [
        f"record what happened: {command} --call {doubt.ref} --happened --result '<JSON or text for the model>' "
        "(or --happened --no-result when its result is unknown)",
        f"or allow it to run again: {command} --call {doubt.ref} --rerun",
    ]
    if rules.can_ask and rules.on_unknown != "ask":
        ways.insert(0, "set on_unknown_outcome='ask' to be asked on the task's Required Actions page")
    message = (
        f"{doubt.describe()}: its outcome is unknown, so this try does not run it again ({why}). "
        f"Arguments: {masked(doubt.started.arguments, redact)}. To resolve it, "
        + "; ".join(ways)
        + ". Then clear the task: its next try applies the answer. The task fails without spending its retries: "
        "no retry could learn more until an answer is recorded"
    )
    return OutcomeUnknown(message, call=doubt)


def before_live_call(run: Attempt, step: ToolStep, rules: OutcomeRules, *, redact: Any = None) -> None:
    """Before an at-most-once call runs live: settle an earlier start that never finished.

    Returns with the call either replaying (``step.is_replay``: "it happened", with the result given) or to run
    live, its start to be recorded right before it runs (``step.marks_start``: after the budget across tries
    allowed it, :func:`mark_start`); raises :class:`OutcomeUnknown` or :class:`AskAboutOutcome` otherwise.
    """
    if step.key is None:
        run.log.warning(
            "Durable: %s is at most once, but it has no key (see the warning above), so its start cannot be "
            "recorded: if this try is cut off while it runs, a retry runs it again",
            step.shown(),
        )
        return
    if run.unread:
        raise DurableStorageError(
            f"{step.shown()} is at most once, and the durable cache could not be read ({run.unread}), so whether an "
            "earlier try started it is unknown: it does not run. Fix the storage; the next try reads the cache again"
        )
    doubt = _doubt(run, step)
    if doubt is not None and not _settle(run, step, doubt, rules, redact=redact):
        return  # replays the answer's result
    step.marks_start = True


def _settle(run: Attempt, step: ToolStep, doubt: CallInDoubt, rules: OutcomeRules, *, redact: Any) -> bool:
    """Apply the recorded answer or the policy to a call in doubt; True when the call is to run live."""
    resolution = doubt.resolution
    if resolution is not None:
        if resolution.answer == "happened":
            assert resolution.result is not None
            step.take_answer(resolution)
            run.log.info("Durable: %s; %s: the result given replaces the call", doubt.describe(), resolution.describe())
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


def mark_start(run: Attempt, step: ToolStep, *, redact: Any = None) -> None:
    """Record that ``step``'s call starts now (one write), right before it runs; raises
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
        kind=_STARTED,
        key=step.key,
        step=step.run.answer_number,
        attempt=run.try_number,
        label=step.tool_name,
        payload=started.to_payload(),
        call_id=step.call_id,
        role=_STARTED,
        recorded_at=started.started_at,
        scope=step.run.entry_scope,
    )
    if run.record(entry, f"the start of {step.shown()}"):
        step.started_mark = entry.name
        return
    raise DurableStorageError(
        f"the start of {step.shown()} could not be recorded in the durable cache at {run.store.location} "
        f"({run.writer.problem or 'see the log above'}), so it does not run: an at_most_once() call runs only once "
        "its start is recorded, or a retry could not tell that it ran. Fix the storage; the next try runs the call "
        "once the cache takes writes"
    )


def forget_mark(run: Attempt, name: str) -> None:
    """Remove the start mark ``name`` (the call ended with an exception of its own, or drew a retry that may be
    forgotten): a retry runs the call again instead of asking about it."""
    run.entries.pop(name, None)
    try:
        run.store.remove(name)
    except Exception as error:  # the mark stays: a retry asks about a call that in fact ended
        run.log.warning(
            "Durable: could not remove %s%s (%s); a retry treats that call's outcome as unknown",
            run.store.location,
            name,
            describe_error(error),
        )


def resolution_entry(doubt: CallInDoubt, resolution: Resolution) -> StepEntry:
    """The entry that records ``resolution`` of ``doubt`` (written by the Airflow side or a cache command)."""
    return StepEntry(
        kind=_RESOLUTION,
        key=doubt.key,
        step=doubt.step,
        attempt=doubt.started.attempt,
        label=doubt.started.tool,
        payload=resolution.to_payload(),
        call_id=doubt.started.call_id,
        role=_RESOLUTION,
        recorded_at=time.time(),
        scope=doubt.scope,
    )
