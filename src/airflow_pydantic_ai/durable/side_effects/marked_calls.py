"""The at-most-once calls of a cache as a person reads them: each call that left a start mark, and where it stands.

An ``at_most_once()`` call records a ``started`` entry before it runs (``once.py``). Read back, each start mark is
in one of three states, decided as a retry decides it (by :class:`~.doubt.CallLedger`, the one decision):

- ``unfinished``: no tool entry under the call's key and no answer for that start: the try was cut off while the
  call ran, and its outcome is unknown (the next try that reaches it asks, fails or reruns);
- ``resolved``: cut off, and a ``resolution`` answers that very start (it happened, with the result given; run it
  again; fail the task); once a try used an answer "it happened", the result given is the call's tool entry too
  (``MarkedCall.recorded``), and later tries replay that entry;
- ``finished``: a tool entry of the same key exists and no answer is about this start: the call ended with an
  outcome, nothing is in doubt.

What ``cache show`` and the view list (``MarkedCall``, from :func:`marked_calls`). One survey of the store; the
start marks and answers are read with the engine's own classes, so the view agrees with what a retry does: an
answer whose result cannot be rebuilt counts as none, an unreadable mark as a start by the try that wrote it.
pydantic-ai (which checks an answer's result) is imported only when the cache holds a start mark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from airflow_pydantic_ai.durable.side_effects.doubt import CallHint, CallLedger, Standing, asking_answer
from airflow_pydantic_ai.durable.side_effects.records import CallInDoubt, Resolution
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.storage.stored import unverified_entries

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.storage.reader import CacheReader

__all__ = ["CallState", "MarkedCall", "marked_calls"]

_UNVERIFIED = CallHint(label="tool (its start mark cannot be read)")
"""How the listing names a call whose start mark cannot be verified (its tool is unknown here)."""

CallState = Literal["unfinished", "resolved", "finished"]
"""Where a call that left a start mark stands: cut off and unanswered, cut off and answered, or ended."""


@dataclass(frozen=True)
class MarkedCall:
    """One at-most-once call that left a start mark: the call (its tool, arguments, try and time), its state, the
    answer about it, and the names of the checkpoints it saved."""

    call: CallInDoubt
    """The call as the engine names it (``ref``, ``label``, ``started``; ``resolution`` only when it answers this
    start)."""
    state: CallState
    checkpoints: tuple[str, ...] = ()
    """The names of the values it saved with ``tool_checkpoint()`` (resumable tools), in the order saved."""
    problem: str = ""
    """Why its start mark or its answer could not be read (the call is then shown as a retry treats it)."""
    recorded: bool = False
    """The call has its own tool entry (a step of the listing): it finished, or a try used the answer given."""

    @property
    def in_doubt(self) -> bool:
        """Cut off while it ran (answered or not): a person may want to know."""
        return self.state != "finished"

    @property
    def open(self) -> bool:
        """In doubt for a retry (answered or not): it has no tool entry of its own (``doubt.CallLedger``'s ``open``)."""
        return not self.recorded

    @property
    def ref(self) -> str:
        """What ``cache resolve --call`` takes (the start of the call's key)."""
        return self.call.ref

    @property
    def tool_entry_name(self) -> str:
        """The name of the call's own entry (a tool step of the listing) once it finished."""
        return entry_name("tool", self.call.key)

    def describe(self) -> str:
        """Its state in one line: ``outcome unknown: started by try 1 at 2026-11-28 10:00:00 UTC, never finished``."""
        started = f"started by {self.call.started.by}"
        if self.call.asked_by is not None:
            started = f"asked for by step {self.call.asked_by}, {started}"
        if self.state == "finished":
            return f"at most once: {started}, finished"
        if self.state == "unfinished":
            return f"outcome unknown: {started}, never finished"
        assert self.call.resolution is not None
        return f"{started}, cut off; {self.call.resolution.describe()}"

    def arguments(self, redact: Callable[[Any], Any] | None = None) -> str:
        """The arguments as the model sent them, masked by ``redact`` and cut at 500 characters."""
        return _masked(self.call.started.arguments, redact)

    def result(self, redact: Callable[[Any], Any] | None = None) -> str | None:
        """For an answer "it happened": the result the model is given, masked and cut; None otherwise."""
        resolution = self.call.resolution
        if resolution is None or resolution.answer != "happened" or resolution.result is None:
            return None
        return _masked(_given(resolution), redact)


def marked_calls(reader: CacheReader) -> list[MarkedCall]:
    """Every at-most-once call of ``reader``'s cache that left a start mark, oldest start first (one survey; where
    each stands is :class:`~.doubt.CallLedger`'s decision, as a retry's)."""
    survey = reader.survey()
    entries = {name: entry for name, (entry, _) in survey.entries.items()}
    ledger = CallLedger(entries, unverified_entries(survey))
    marked = ledger.marked()
    if not marked:
        return []
    checkpoints: dict[str, list[StepEntry]] = {}
    for entry in entries.values():
        if entry.step_role == "checkpoint" and isinstance(entry.payload.get("call"), str):
            checkpoints.setdefault(entry.payload["call"], []).append(entry)
    numbers = {step.entry_name: step.number for step in reader.steps()}  # the same survey: no second read
    found = [_row(ledger, standing, entries, checkpoints.get(standing.key, []), numbers) for standing in marked]
    return sorted(found, key=lambda marked: (marked.call.started.started_at, marked.call.key))


def _row(
    ledger: CallLedger,
    standing: Standing,
    entries: dict[str, StepEntry],
    saved: list[StepEntry],
    numbers: dict[str, int],
) -> MarkedCall:
    """One call's row: read as a retry reads it, with why its mark or answer could not be read."""
    problems: list[str] = []

    def unusable(entry: StepEntry, error: Exception, which: str) -> None:
        if which == "mark":  # as a retry treats it: started by the try that wrote it, outcome unknown
            problems.insert(0, f"its start mark cannot be read ({error})")
        else:  # as a retry treats it: no answer
            problems.append(f"its answer cannot be read ({error}), so it counts as unanswered")

    call = ledger.read(standing, _UNVERIFIED if standing.mark is None else None, unusable=unusable)
    assert call is not None
    if standing.mark is None:  # issue 35: in doubt, its tool unknown here (the retry that reaches it knows it)
        problems.insert(
            0,
            f"its start mark cannot be verified ({standing.unverified}); the call counts as started, its outcome "
            "unknown",
        )
    else:
        asking = asking_answer(standing.mark, entries.values())
        number = numbers.get(asking.name) if asking is not None else None
        if number is not None:
            call = replace(call, asked_by=number)
    recorded = standing.state == "finished"
    state: CallState = "resolved" if call.resolution is not None else "finished" if recorded else "unfinished"
    ordered = sorted(saved, key=lambda entry: entry.recorded_at or 0.0)
    names = tuple(str(entry.payload.get("name", "")) for entry in ordered)
    return MarkedCall(call, state, names, "; ".join(problems), recorded)


def _masked(value: Any, redact: Callable[[Any], Any] | None) -> str:
    from airflow_pydantic_ai.durable.side_effects.unknown_outcome import masked

    return masked(value, redact)


def _given(resolution: Resolution) -> Any:
    """The value an answer "it happened" gives the model (its stored outcome decoded; checked when it was read)."""
    from airflow_pydantic_ai.durable.steps.outcome import Returned, decode_outcome

    assert resolution.result is not None
    outcome = decode_outcome(resolution.result)
    return outcome.value if isinstance(outcome, Returned) else resolution.result
