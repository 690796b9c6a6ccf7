"""Whether a call is in doubt, decided once: from a cache's entries and the names it could not verify.

Every reader asks :class:`CallLedger` (the live path before an at-most-once call, the listing of ``cache show`` and the
view, the cleanup that keeps calls in doubt through a deletion, and the approval flow through the attempt's
questions), so they cannot disagree. A call stands in one of these states (:data:`CallState`):

- ``never started``: no start mark under its key;
- ``finished``: a tool entry under its key (written earlier, or by this attempt): nothing is in doubt;
- ``started``: a start mark and no tool entry: the try that wrote it was cut off while the call ran;
- ``unverifiable``: a start mark exists but cannot be read or verified (issue 35): started all the same, by an
  earlier try at an unknown time.

A call started or unverifiable is *open*; it is *resolved* when an answer about that very start is recorded
(:meth:`CallLedger.read`, which reads the mark and the answer with the same fallbacks for every reader: a mark that
cannot be read is a start by the try that wrote it, an answer that cannot be read is none). Deciding the state reads
nothing but names; reading a call imports the records' codec only then (so a cache without start marks stays
pydantic-ai-free on the read side).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_pydantic_ai.durable.side_effects.records import (
    RESOLUTION,
    STARTED,
    CallInDoubt,
    Resolution,
    StartedCall,
)
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.wording import call_label

__all__ = ["CallHint", "CallLedger", "CallState", "Standing", "Unusable", "asking_answer"]

CallState = Literal["never started", "finished", "started", "unverifiable"]
"""Where one call stands by the names in the cache (see the module's docstring)."""

Unusable = Callable[[StepEntry, Exception, str], None]
"""Told when a mark (``"mark"``) or an answer (``"answer"``) cannot be read: the entry, the error, which."""


def _ignore(entry: StepEntry, error: Exception, which: str) -> None:
    return None


@dataclass(frozen=True)
class CallHint:
    """What the asker knows of a call beyond its mark (the live path knows the tool it is about to run): used for a
    mark that cannot be read or verified."""

    tool: str = "(unknown: its start mark cannot be read)"
    call_id: str | None = None
    arguments: Any = None
    label: str | None = None
    """How to name the call when its mark cannot be verified (default: ``tool NAME``)."""


@dataclass(frozen=True)
class Standing:
    """One call's state by the names in the cache, with its mark and answer entries when they were read."""

    key: str
    state: CallState
    mark: StepEntry | None = None
    answer: StepEntry | None = None
    unverified: str = ""
    """Why its start mark cannot be verified (state ``unverifiable``)."""

    @property
    def open(self) -> bool:
        """Started (readable mark or not) and not finished: in doubt until an answer about that start."""
        return self.state in ("started", "unverifiable")

    @property
    def mark_name(self) -> str:
        return entry_name(STARTED, self.key)


class CallLedger:
    """The calls of one cache that left a start mark, and where each stands: the one decision every reader asks."""

    def __init__(
        self,
        entries: Mapping[str, StepEntry],
        unverified: Mapping[str, str] = {},
        finished: Collection[str] = (),
    ) -> None:
        """``entries``: the cache as read (by name); ``unverified``: names that exist but could not be verified
        (name -> why); ``finished``: names of tool entries written since (by the attempt that asks)."""
        self._entries = entries
        self._unverified = unverified
        self._finished = frozenset(finished) if finished else frozenset()

    def _recorded(self, key: str) -> bool:
        name = entry_name("tool", key)
        return name in self._entries or name in self._finished

    def standing(self, key: str) -> Standing:
        """Where the call ``key`` stands."""
        name = entry_name(STARTED, key)
        mark = self._entries.get(name)
        answer = self._entries.get(entry_name(RESOLUTION, key))
        if self._recorded(key):
            return Standing(key, "finished", mark, answer)
        if mark is not None:
            return Standing(key, "started", mark, answer)
        why = self._unverified.get(name)
        if why is not None:
            return Standing(key, "unverifiable", None, answer, why)
        return Standing(key, "never started", None, answer)

    def marked(self) -> list[Standing]:
        """Every call that left a readable start mark (finished or not), then every open one whose mark cannot be
        verified (by name)."""
        found = [self.standing(entry.key) for entry in self._entries.values() if entry.step_role == STARTED]
        for name in sorted(self._unverified):
            if name.startswith(f"{STARTED}-") and name not in self._entries:
                standing = self.standing(name.removeprefix(f"{STARTED}-").removesuffix(".json"))
                if standing.state == "unverifiable":
                    found.append(standing)
        return found

    def open_calls(self) -> list[Standing]:
        """The calls in doubt, answered or not: started or unverifiable, not finished."""
        return [standing for standing in self.marked() if standing.open]

    def read(
        self, standing: Standing, hint: CallHint | None = None, *, unusable: Unusable = _ignore
    ) -> CallInDoubt | None:
        """The call ``standing`` names, its mark and answer read (None: never started). A mark that cannot be read
        counts as a start by the try that wrote it; one that cannot be verified as a start by an earlier try at an
        unknown time; an answer that cannot be read, or that answers another start, as none (``unusable`` is told)."""
        if standing.state == "never started" or (standing.mark is None and not standing.unverified):
            return None
        hint = hint or CallHint()
        if standing.mark is None:
            started = StartedCall.unknown(hint.tool, hint.call_id, hint.arguments, standing.unverified)
            label = hint.label or call_label("tool", hint.tool, hint.call_id)
            return CallInDoubt(standing.key, 0, label, started, self._answer(standing, started, unusable), None)
        mark = standing.mark
        try:
            started = StartedCall.from_payload(mark.payload)
        except Exception as error:  # a mark that cannot be read: the call cannot be proven started; say so
            unusable(mark, error, "mark")
            started = StartedCall(mark.label, mark.call_id, hint.arguments, mark.attempt, mark.recorded_at or 0.0)
        label = call_label("tool", started.tool, started.call_id)
        resolution = self._answer(standing, started, unusable)
        return CallInDoubt(standing.key, mark.step, label, started, resolution, mark.scope)

    def call(self, key: str, tool: str) -> CallInDoubt | None:
        """The call ``key`` as the cache says now, with its answer (``tool``: what it was asked about as, for a mark
        that cannot be verified); None when it is not open (never started, or finished)."""
        standing = self.standing(key)
        if not standing.open:
            return None
        return self.read(standing, CallHint(tool, label=f"tool {tool}"))

    def unanswered(self) -> list[CallInDoubt]:
        """The calls in doubt no answer resolves yet, oldest start first (an unreadable mark or answer: as a retry
        treats it)."""
        found = [self.read(standing) for standing in self.open_calls()]
        doubts = [doubt for doubt in found if doubt is not None and doubt.resolution is None]
        return sorted(doubts, key=lambda doubt: (doubt.started.started_at, doubt.key))

    @staticmethod
    def _answer(standing: Standing, started: StartedCall, unusable: Unusable) -> Resolution | None:
        if standing.answer is None:
            return None
        try:
            found = Resolution.from_payload(standing.answer.payload)
        except Exception as error:
            unusable(standing.answer, error, "answer")
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
