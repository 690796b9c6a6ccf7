"""The one numbering of a cache's steps: what the task log, the UI view and ``cache show`` call "step N".

Steps are numbered from 1 in the order they were recorded: by the model step they belong to (a tool call
belongs to the model answer that asked for it), then by the try that wrote them (a try that took another
path lists its steps after the earlier try's), the model answer first, then the decisions made on its
calls, then its tool and output function calls by the time they were written, then the recorded output.
The steps of an agent run started inside a tool call (a delegate) come right before that call's own entry
(they happened while it ran), run by run, each in the same order; the runs of further agents at the top
level come last. Numbering "step N and everything after it" is what ``cache rm --from-step`` and the view's
"Run live from this step" delete.

Two users, one rule: :class:`~airflow_pydantic_ai.durable.storage.reader.CacheReader` numbers a whole cache
with :func:`in_listing_order`; a durable attempt keeps a :class:`StepNumbers` of what the cache holds as it
goes (the entries it loaded, then each entry it writes) and names each step in its log by
:meth:`StepNumbers.number`: the number the step has in the listing of the cache at that moment, which is
the number the view and ``cache show`` give it.

Limits, said in ``docs/durability.rst``: a later try that takes another path writes steps that can be
listed before later steps of an earlier try (so an older log's numbers can shift by them); the steps of parallel
tool calls that each run a delegate are numbered as they happen, and the listing puts each call's delegate
steps together once the calls are written; entries written by release 0.1.0 carry no time and are ordered
by their objects' modification time in the listing, by name in a try's log.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from airflow_pydantic_ai.durable.kinds import KINDS
from airflow_pydantic_ai.durable.storage.entry import TOP_PARENT, StepEntry

__all__ = ["ListingRow", "StepNumbers", "in_listing_order", "listing_order"]

# Each kind's rank among the entries of one model answer (the kind table says why).
_ROLE_ORDER = {role: spec.rank for role, spec in KINDS.items()}
_UNKNOWN_RANK = max(_ROLE_ORDER.values())

OrderKey = tuple[int, int, int, float, str]
T = TypeVar("T")


def listing_order(entry: StepEntry, modified: dt.datetime | None = None) -> OrderKey:
    """Where ``entry`` sorts among the steps of its agent run (``modified``: its object's time, for entries
    that carry no time of their own)."""
    seconds = entry.recorded_at
    if seconds is None:
        seconds = modified.timestamp() if modified is not None else 0.0
    return (entry.step, entry.attempt, _ROLE_ORDER.get(entry.step_role, _UNKNOWN_RANK), float(seconds), entry.name)


@dataclass(frozen=True)
class ListingRow(Generic[T]):
    """One entry to number, with its order key and whatever its caller keeps beside it."""

    order: OrderKey
    entry: StepEntry
    item: T


def _orphan_order(scope_id: tuple[str, int]) -> tuple[bool, int]:
    return (scope_id[0] == TOP_PARENT, scope_id[1])


def in_listing_order(rows: Iterable[ListingRow[T]]) -> list[ListingRow[T]]:
    """The rows in listing order (see the module's docstring): step N is the N-th."""
    runs: dict[tuple[str, int] | None, list[ListingRow[T]]] = {}
    for row in rows:
        runs.setdefault(row.entry.scope_id, []).append(row)
    for steps in runs.values():
        steps.sort(key=lambda row: row.order)
    if (len(runs) <= 1 and None in runs) or not runs:
        return runs.get(None, [])
    started_by: dict[str, list[tuple[str, int]]] = {}
    for scope_id in runs:
        if scope_id is not None:
            started_by.setdefault(scope_id[0], []).append(scope_id)
    for scopes in started_by.values():
        scopes.sort(key=lambda scope_id: scope_id[1])
    placed: set[tuple[str, int] | None] = set()
    ordered: list[ListingRow[T]] = []

    def emit(scope_id: tuple[str, int] | None) -> None:
        placed.add(scope_id)
        for row in runs.get(scope_id, []):
            for child in started_by.get(row.entry.key, ()) if row.entry.kind == "tool" else ():
                emit(child)
            ordered.append(row)

    emit(None)
    # Runs whose starting call left no entry (it failed, or it is still running): after the model step of the
    # first run that asked for the call; then the further top-level runs, in the order they started.
    orphans = sorted((scope for scope in runs if scope is not None and scope not in placed), key=_orphan_order)
    for scope_id in orphans:
        if scope_id in placed:
            continue
        position = len(ordered)
        if scope_id[0] != TOP_PARENT:
            at = int((runs[scope_id][0].entry.scope or {}).get("at", 0))
            position = next(
                (index for index, row in enumerate(ordered) if row.entry.scope is None and row.entry.step > at),
                position,
            )
        tail = ordered[position:]
        del ordered[position:]
        emit(scope_id)
        ordered.extend(tail)
    return ordered


class StepNumbers:
    """The step numbers of a cache as one attempt sees it: what it loaded, then what it writes (and removes).

    Numbering a step costs a binary search while every entry belongs to the attempt's first agent run (the
    common case); with nested or further runs it orders the whole listing.
    """

    def __init__(self, entries: Iterable[StepEntry] = ()) -> None:
        self._rows: dict[str, ListingRow[None]] = {}
        for entry in entries:  # the loaded cache: keyed once and sorted once, not inserted one by one
            if entry.is_companion:  # a call's companion (a started mark...) takes no number
                continue
            self._rows[entry.name] = ListingRow(listing_order(entry), entry, None)
        self._keys: list[OrderKey] = sorted(row.order for row in self._rows.values() if row.entry.scope_id is None)
        self._scoped = len(self._rows) - len(self._keys)
        self._coming: dict[str, StepEntry] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, entry: StepEntry) -> None:
        """``entry`` is in the cache now (written, or found at the start); it replaces one of the same name."""
        if entry.is_companion:  # a call's companion (a started mark...) takes no number
            return
        self.discard(entry.name)
        row = ListingRow(listing_order(entry), entry, None)
        self._rows[entry.name] = row
        if entry.scope_id is None:
            bisect.insort(self._keys, row.order)
        else:
            self._scoped += 1

    def discard(self, name: str) -> None:
        """The entry ``name`` is no longer in the cache (removed, or about to be replaced)."""
        row = self._rows.pop(name, None)
        if row is None:
            return
        if row.entry.scope_id is None:
            index = bisect.bisect_left(self._keys, row.order)
            if index < len(self._keys) and self._keys[index] == row.order:
                del self._keys[index]
        else:
            self._scoped -= 1

    @contextmanager
    def coming(self, entry: StepEntry) -> Iterator[None]:
        """While ``entry``'s call runs: it is written when the call ends (unless the call fails)."""
        self._coming[entry.name] = entry
        try:
            yield
        finally:
            self._coming.pop(entry.name, None)

    def number(self, entry: StepEntry, *, never_written: bool = False) -> int:
        """The number ``entry`` has in the listing: as it is stored when the cache holds it, else as it would
        be if it were written now (a step that is not recorded is named by that number).

        ``never_written``: the step failed and is not recorded, so the calls of the same model answer still
        running (:meth:`coming`) are written after it and listed before it (as a retry numbers it, once they are
        replayed): it is numbered after them. A sibling that then fails too is counted all the same."""
        number = self._number_now(entry)
        if never_written:
            number += sum(
                1
                for name, other in self._coming.items()
                if name != entry.name
                and name not in self._rows  # written already: counted
                and other.step == entry.step
                and other.scope_id == entry.scope_id
            )
        return number

    def _number_now(self, entry: StepEntry) -> int:
        order = listing_order(entry)
        held = self._rows.get(entry.name)
        if not self._scoped and entry.scope_id is None:
            index = bisect.bisect_left(self._keys, order)
            if held is not None and held.order < order:
                index -= 1  # its stored row sorts before it: not counted twice
            return index + 1
        rows = [row for name, row in self._rows.items() if name != entry.name]
        mine = ListingRow(order, entry, None)
        ordered = in_listing_order([*rows, mine])
        return next(index for index, row in enumerate(ordered, start=1) if row is mine)
