"""The calls in doubt of one task instance's cache: ``at_most_once()`` calls a try started and never finished.

A call is in doubt when its ``started`` mark has no tool entry under the same key (the try was cut off while the
call ran); its ``resolution``, when one was recorded for that very start, comes with it. ``airflow pydantic-ai cache
resolve`` finds the call a person names here (by the start of its key, or its tool call id) and records the answer.
An answer "it happened" that a try has used is the call's tool entry by then: that call is no longer in doubt (an
answer given now would change nothing; ``cache rm --from-step`` runs it again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.read import CacheReader, marked_calls
from airflow_pydantic_ai.durable.side_effects import CallInDoubt

__all__ = ["Matches", "calls_in_doubt", "find_call"]


def calls_in_doubt(reader: CacheReader, *, warn: Callable[[str], Any] = lambda message: None) -> list[CallInDoubt]:
    """The calls in doubt of the cache ``reader`` reads (answered or not), oldest start first, as the read side
    classifies them (``marked_calls``: what ``cache show`` and the view show); why a mark or an answer could not be
    read goes to ``warn`` (the call is then taken as a retry takes it)."""
    found: list[CallInDoubt] = []
    for marked in marked_calls(reader):
        if not marked.in_doubt or marked.recorded:  # finished, or its answer was used
            continue
        if marked.problem:
            warn(f"{marked.call.label}: {marked.problem}")
        found.append(marked.call)
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
