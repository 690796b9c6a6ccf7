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

__all__ = ["FORGET_FLAG", "Matches", "calls_in_doubt", "doubts_of", "find_call", "forgetting_refused", "named_calls"]

FORGET_FLAG = "--forget-calls-in-doubt"
"""The flag of ``cache rm`` and ``cache gc`` that deletes a cache holding a call in doubt all the same."""


def calls_in_doubt(reader: CacheReader, *, warn: Callable[[str], Any] = lambda message: None) -> list[CallInDoubt]:
    """The calls in doubt of the cache ``reader`` reads (answered or not), oldest start first, as the read side
    classifies them (``marked_calls``: what ``cache show`` and the view show); why a mark or an answer could not be
    read goes to ``warn`` (the call is then taken as a retry takes it)."""
    found: list[CallInDoubt] = []
    for marked in marked_calls(reader):
        if not marked.open:  # finished, or its answer was used (the engine's one decision: side_effects/doubt.py)
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


def doubts_of(cache: Any, base: Any) -> list[CallInDoubt]:
    """The calls in doubt of ``cache`` (a ``CacheSummary`` of ``cache list``) under ``base`` (a ``CacheBase``), read
    with the configured cipher; one read of that cache."""
    return calls_in_doubt(CacheReader(cache.store(base.fs, cipher=base.cipher, timeout=base.timeout)))


def named_calls(doubts: list[CallInDoubt]) -> str:
    """Each call in doubt by name, ref and start: ``tool charge_card (call c1) (ref 3f9a1c0b2e, started by try 1
    at ...)``, separated by "; "."""
    return "; ".join(f"{doubt.label} (ref {doubt.ref}, started by {doubt.started.by})" for doubt in doubts)


def forgetting_refused(what: str, doubts: list[CallInDoubt], resolve: str) -> str:
    """Why deleting ``what`` is refused while it holds ``doubts``, and the ways on (the CLI and the view say it
    alike). ``resolve``: the ``cache resolve`` command of that task instance."""
    return (
        f"{what} holds {len(doubts)} call{'s' if len(doubts) != 1 else ''} in doubt, at_most_once() calls a try "
        f"started and never finished: {named_calls(doubts)}. Deleting it would forget that they may have happened, "
        "and a later try would run them again. Resolve each (" + resolve + " --call REF --happened --result ... | "
        "--happened --no-result | --rerun | --fail) and let a try apply the answer, or delete it all the same with "
        f"cache rm {FORGET_FLAG}, which names each call it forgets"
    )
