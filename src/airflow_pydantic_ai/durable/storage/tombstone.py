"""Tombstones: the mark that forgets the entries a run failed on, whichever object holds a copy of them.

A run that gives up (``UnexpectedModelBehavior``) must not have its last answer, nor the retries that answer
drew, replayed by the next try (``attempt/ending.py``). Deleting them is not enough: a copy may sit in a pack
that is rewritten only later (a kill in between leaves it there), and a zombie try that loaded it may pack it
again after it was deleted. So the attempt first writes one tombstone, an entry of the kind ``forgotten``,
naming each entry with the copy it forgets (the try that recorded it and when, a :class:`Mark`), and only then
deletes. The store (``StepStore.survey``) ignores every copy of a named entry recorded at or before its mark,
single or packed, whoever packed it; a copy recorded later (the model asked again: the same request, so the
same name) is used. A tombstone is packed like an entry, so it lasts as long as the cache, and cleanup after
success deletes it with the rest. It is never a step: nothing counts, numbers or shows it as one.

No I/O (``store.py`` does it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.kinds import KINDS
from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, StepEntry

__all__ = ["FORGOTTEN_KIND", "Mark", "forgotten_by", "is_tombstone", "tombstone"]

FORGOTTEN_KIND = KINDS["forgotten"].prefix


@dataclass(frozen=True, order=True)
class Mark:
    """Which copy of an entry a tombstone forgets: the one recorded by try ``attempt`` at ``recorded_at``, and
    every older one (ordered as ``stored.newer`` orders copies: by try, then by time)."""

    attempt: int
    recorded_at: float

    @classmethod
    def of(cls, entry: StepEntry) -> Mark:
        """The mark of ``entry``'s copy (entries written before 0.2.0 carry no time: 0)."""
        return cls(entry.attempt, entry.recorded_at or 0.0)

    def covers(self, entry: StepEntry) -> bool:
        """Whether ``entry`` is that copy or an older one (a later try's copy is not forgotten)."""
        return Mark.of(entry) <= self


def tombstone(forgotten: Mapping[str, Mark], *, attempt: int, step: int, recorded_at: float) -> StepEntry:
    """The tombstone try ``attempt`` writes to forget the entries ``forgotten`` (name -> the copy it forgets),
    at model step ``step``. Its key is a digest of what it forgets: writing it twice writes the same object."""
    marks = {name: {"attempt": at.attempt, "recorded_at": at.recorded_at} for name, at in sorted(forgotten.items())}
    text = json.dumps(marks, sort_keys=True, separators=(",", ":"))
    return StepEntry(
        kind=FORGOTTEN_KIND,
        key=hashlib.sha256(text.encode()).hexdigest(),
        step=step,
        attempt=attempt,
        label=f"{len(marks)} forgotten",
        payload={"forgotten": marks},
        role="forgotten",
        recorded_at=recorded_at,
    )


def is_tombstone(entry: StepEntry) -> bool:
    return entry.kind == FORGOTTEN_KIND


def forgotten_by(entry: StepEntry) -> dict[str, Mark]:
    """What a verified tombstone forgets (name -> mark); raises ``CorruptEntry`` when its payload is malformed."""
    marks: Any = entry.payload.get("forgotten")
    try:
        return {str(name): Mark(int(mark["attempt"]), float(mark["recorded_at"])) for name, mark in marks.items()}
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise CorruptEntry(f"its list of forgotten entries is malformed: {error}") from None
