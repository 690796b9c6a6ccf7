"""The calls in doubt of one task instance's cache: ``at_most_once()`` calls a try started and never finished.

A call is in doubt when its ``started`` mark has no tool entry under the same key (the try was cut off while the
call ran); its ``resolution``, when one was recorded for that very start, comes with it. ``airflow pydantic-ai cache
resolve`` finds the call a person names here (by the start of its key, or its tool call id) and records the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import CallInDoubt, Resolution

__all__ = ["Matches", "calls_in_doubt", "find_call"]


def calls_in_doubt(reader: CacheReader, *, warn: Callable[[str], Any] = lambda message: None) -> list[CallInDoubt]:
    """The calls in doubt of the cache ``reader`` reads, oldest start first; an unreadable mark or answer is
    reported to ``warn`` (the mark left out, the answer counted as none)."""
    companions = reader.companions()
    if not any(entry.kind == "started" for entry in companions):
        return []  # no at_most_once() call ever started here: the steps need not be read
    finished = {entry.key for entry in reader.entries() if entry.kind == "tool"}
    answers = {entry.key: entry for entry in companions if entry.kind == "resolution"}
    found: list[CallInDoubt] = []
    for mark in companions:
        if mark.kind != "started" or mark.key in finished:
            continue
        resolution = None
        if mark.key in answers:
            try:
                resolution = Resolution.from_payload(answers[mark.key].payload)
            except (KeyError, TypeError, ValueError) as error:
                warn(f"the recorded answer {answers[mark.key].name} cannot be read ({error}); it counts as none")
        try:
            found.append(CallInDoubt.of_mark(mark, resolution))
        except (KeyError, TypeError, ValueError) as error:
            warn(f"the start mark {mark.name} cannot be read ({error}); left out")
    return found


@dataclass(frozen=True)
class Matches:
    """The calls in doubt a reference names (one when it is unambiguous), and every call in doubt."""

    found: list[CallInDoubt]
    every: list[CallInDoubt]


def find_call(doubts: list[CallInDoubt], ref: str) -> Matches:
    """The calls in doubt whose key starts with ``ref`` or whose tool call id is ``ref``."""
    ref = ref.strip()
    by_key = [doubt for doubt in doubts if ref and doubt.key.startswith(ref)]
    by_id = [doubt for doubt in doubts if doubt.started.call_id == ref and doubt not in by_key]
    return Matches(found=by_key + by_id, every=doubts)
