"""The read side of a task instance's cache: its steps in recorded order, one step decoded, deletion.

What people use to look at a cache (the ``airflow pydantic-ai cache`` commands, the UI view, tests)
goes through :class:`CacheReader`; nobody parses entry names or JSON by hand.

Numbering: the steps are numbered from 1 in listing order (``numbering.py``: the one rule, which the task
log uses too). The same numbering drives :meth:`CacheReader.delete_from`: deleting step N and everything
after it makes the next try replay steps 1..N-1 and run live from step N ("fork at step N").

Guarantees: reading never changes the cache; a damaged entry is listed as damaged (never a traceback)
and is still deleted by :meth:`~CacheReader.delete_all` and :meth:`~CacheReader.delete_from`; an
encrypted entry is decoded only with the key (without it, it is listed as encrypted); nothing is
deleted outside the task instance's prefix. Packs (what a try that ended packed into one object) are a
layout detail: their entries are listed, numbered, shown and deleted as steps like any other. A pack's
listing (``pack.py``) lists and numbers its steps without opening them: showing one step decrypts and
verifies that step only, whatever else the pack holds (a listed step that turns out damaged is shown as
damaged when it is shown; a pack without a listing is opened entry by entry, as before). Tombstones
(``tombstone.py``) are not steps: never listed, and what they forget is not listed either (a retry would not
replay it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_pydantic_ai.durable.kinds import StepRole
from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, SealedEntry, StepEntry
from airflow_pydantic_ai.durable.storage.numbering import ListingRow, in_listing_order, listing_order
from airflow_pydantic_ai.durable.storage.step_costs import StepCost
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.durable.storage.stored import Survey

__all__ = ["CacheReader", "PendingRow", "StepDetail", "StepInfo", "StepKindShown"]

StepKindShown = StepRole | Literal["damaged", "encrypted"]
"""A step's role (the kind table's: a call's companions too; a tombstone is never listed, the store keeps it
apart), or why it cannot be read."""
_DEFAULT_LIMIT = 4096


@dataclass(frozen=True)
class StepInfo:
    """One step of a cache, as a person sees it."""

    number: int
    """1-based position in recorded order (the numbering of ``cache show`` and ``cache rm --from-step``)."""
    kind: StepKindShown
    name: str
    """The model id (``openai:gpt-4o``), or the tool or output function name; empty when unreadable."""
    call_id: str | None
    attempt: int | None
    """The try that wrote it."""
    recorded_at: dt.datetime | None
    """When it was written (UTC): from the entry, or the object's modification time for older entries."""
    size: int
    """Bytes of its entry as stored: its own object's, or in a pack its own bytes there (never a share of the pack)."""
    entry_name: str
    problem: str = ""
    """Why a damaged or encrypted entry cannot be shown."""
    cost: StepCost = field(default_factory=StepCost)
    """A model step's tokens and estimated cost, as recorded (``step_costs.py``)."""
    agent: str | None = None
    """The agent that made the step, when it is not the attempt's first agent (a delegate, a second agent)."""
    depth: int = 0
    """0 for the attempt's first agent; 1 for a run started inside one of its tool calls, and so on."""

    @property
    def shown_name(self) -> str:
        """The name with the agent that made the step, when it is not the attempt's first: ``check (agent helper)``."""
        return f"{self.name} (agent {self.agent})" if self.agent else self.name

    def as_row(self) -> dict[str, Any]:
        """The step as a flat dict (the columns of ``cache show``)."""
        return {
            "step": self.number,
            "kind": self.kind,
            "name": self.shown_name,
            "call_id": self.call_id or "",
            "attempt": self.attempt,
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else "",
            "bytes": self.size,
            "input_tokens": _or_empty(self.cost.input_tokens),
            "output_tokens": _or_empty(self.cost.output_tokens),
            "cost_usd": _or_empty(self.cost.cost_usd),
        }


@dataclass(frozen=True)
class StepDetail:
    """One step decoded: its metadata and the stored content (the response parts, or the tool outcome)."""

    info: StepInfo
    content: Any
    """JSON data: ``{"parts": [...], "usage": {...}}`` for a model step, ``{"outcome": ..., ...}`` for a call,
    ``{"approved": ..., "reason": ..., "answered_by": ...}`` for a decision."""

    @property
    def plain(self) -> Any:
        """The content with recorded values as a person reads them: ``{"type": "json", "value": 3}`` is ``3``,
        a dataclass or pydantic model its fields (the class name beside them); what has no plain JSON form
        (bytes, an adapted value) keeps its tagged node. :attr:`content` is the stored form."""
        if isinstance(self.content, dict) and "value" in self.content:
            return {**self.content, "value": _plain(self.content["value"])}
        return self.content

    def render(self, *, limit: int | None = _DEFAULT_LIMIT, redact: Callable[[str], str] | None = None) -> str:
        """The content as indented JSON, secrets masked by ``redact``, cut at ``limit`` characters (None: whole)."""
        text = json.dumps(self.content, indent=2, ensure_ascii=False, default=str)
        if redact is not None:
            text = redact(text)
        if limit is not None and len(text) > limit:
            text = f"{text[:limit]}\n... ({len(text) - limit} more characters; show the whole step with --full)"
        return text


@dataclass(frozen=True)
class PendingRow:
    """A model request submitted to a provider that works on it later (a batch, a background response; issue 38),
    as its ``pending`` entry recorded it: shown by ``cache show`` and the view beside the steps."""

    step: int
    """The model step's number when it was submitted."""
    kind: str
    """``batch`` or ``background``."""
    provider: str
    model_name: str
    job_id: str
    submitted_at: str
    """ISO 8601, UTC."""
    status: str
    """The provider's status when it was last seen, or ``collected`` once the step's response is recorded."""
    resubmissions: int = 0

    def line(self) -> str:
        """``step 3: batch batch_abc (openai gpt-4o), submitted 2026-12-06T23:10:00+00:00, in_progress``."""
        again = f", submitted again {self.resubmissions}x" if self.resubmissions else ""
        return (
            f"step {self.step}: {self.kind} {self.job_id} ({self.provider} {self.model_name}), submitted "
            f"{self.submitted_at}, {self.status}{again}"
        )


@dataclass
class CacheReader:
    """Reads (and deletes) one task instance's cache through its :class:`StepStore`."""

    store: StepStore
    _held: Survey | None = field(default=None, init=False, repr=False, compare=False)

    @contextmanager
    def one_survey(self) -> Iterator[None]:
        """Within it, every read reuses one survey of the store: a page that shows the steps, the calls and a
        step lists and fetches the cache once (on S3: one set of GETs, not one per part). Not for deleting."""
        self._held = self.store.survey(listing_only=True)
        try:
            yield
        finally:
            self._held = None

    def survey(self) -> Survey:
        """What the store holds: the held survey inside :meth:`one_survey`, else a new one."""
        return self._held if self._held is not None else self.store.survey(listing_only=True)

    def exists(self) -> bool:
        """Whether the task instance has anything recorded."""
        return self.store.count_entries() > 0

    def steps(self) -> list[StepInfo]:
        """Every entry, numbered in recorded order; damaged and undecryptable entries come last."""
        return [info for info, _ in self._read()]

    def entries(self) -> list[StepEntry]:
        """The readable entries in recorded order (what ``cache export`` writes as a fixture), each opened."""
        if self._held is None:
            with self.one_survey():
                return self.entries()
        opened = (self._opened(entry) for _, entry in self._read() if entry is not None)
        return [entry for entry in opened if isinstance(entry, StepEntry)]

    def companions(self) -> list[StepEntry]:
        """The readable entries that belong to a tool call and are not numbered steps (the mark that an
        at-most-once call started, the resolution of one cut off, a resumable tool's checkpoints), oldest first."""
        survey = self.survey()
        found = [entry for entry, _ in survey.entries.values() if entry.is_companion]
        return sorted(found, key=lambda entry: (entry.recorded_at or 0.0, entry.name))

    def pending_requests(self) -> list[PendingRow]:
        """The model requests a provider was given to work on (batches, background responses), oldest first;
        ``collected`` once the step's response is recorded."""
        survey = self.survey()
        rows: list[PendingRow] = []
        for entry in self.companions():
            ticket = entry.payload.get("ticket") if entry.step_role == "pending" else None
            if not isinstance(ticket, dict):
                continue
            collected = f"model-{entry.key}.json" in survey.entries
            rows.append(
                PendingRow(
                    step=int(ticket.get("step") or entry.step),
                    kind=str(ticket.get("kind", "")),
                    provider=str(ticket.get("provider", "")),
                    model_name=str(ticket.get("model_name", "")),
                    job_id=str(ticket.get("job_id", "")),
                    submitted_at=str(ticket.get("submitted_at", "")),
                    status="collected" if collected else str(ticket.get("status", "")),
                    resubmissions=int(ticket.get("resubmissions") or 0),
                )
            )
        return rows

    def read(self, number: int) -> StepDetail:
        """Step ``number`` decoded (the only entry opened, when the others are in a pack's listing); raises
        ``KeyError`` when there is no such step."""
        if self._held is None:
            with self.one_survey():
                return self.read(number)
        for info, entry in self._read():
            if info.number != number:
                continue
            opened = self._opened(entry) if entry is not None else None
            if isinstance(opened, StepEntry):
                return StepDetail(info, _content(opened))
            shown = info if opened is None else replace(info, kind="damaged", problem=str(opened))
            return StepDetail(shown, {"problem": shown.problem})
        raise KeyError(f"no step {number} in the durable cache at {self.store.location}")

    def delete_all(self) -> int:
        """Delete the whole cache; returns how many entries it held."""
        count = self.store.count_entries()
        self.store.clear()
        return count

    def delete_from(self, number: int) -> list[StepInfo]:
        """Delete step ``number`` and every step after it, newest first; returns what was deleted."""
        if number < 1:
            raise ValueError(f"steps are numbered from 1, got {number}")
        self.store.refuse_links()  # as delete_all: never through a link out of the cache root
        doomed = [info for info in self.steps() if info.number >= number]
        # A model step's submission to a provider (a ``pending`` ticket) goes with it: the step is asked anew.
        tickets = {f"pending-{info.entry_name.removeprefix('model-')}" for info in doomed if info.kind == "model"}
        self.store.drop([*(name for name in tickets if name in self.survey().entries)])
        self.store.drop([info.entry_name for info in reversed(doomed)])
        return doomed

    # --- reading ---------------------------------------------------------------------------------

    def _opened(self, entry: StepEntry) -> StepEntry | CorruptEntry:
        """``entry`` with its payload: as found, or (taken from its pack's listing) opened and verified now."""
        survey = self.survey()
        if entry.name not in survey.unopened:
            return entry
        try:
            return self.store.open(survey.entries[entry.name][1])
        except CorruptEntry as error:
            return error

    def _read(self) -> list[tuple[StepInfo, StepEntry | None]]:
        survey = self.survey()
        readable = [
            ListingRow(listing_order(entry, item.modified), entry, item)
            for entry, item in survey.entries.values()
            if not entry.is_companion  # a call's companions are shown with it (companions()), not numbered
        ]
        result: list[tuple[StepInfo, StepEntry | None]] = []
        for row in in_listing_order(readable):
            entry, item = row.entry, row.item
            scope = entry.scope or {}
            agent = scope.get("agent")
            info = StepInfo(
                number=len(result) + 1,
                kind=entry.step_role,
                name=entry.label,
                call_id=entry.call_id,
                attempt=entry.attempt,
                recorded_at=_timestamp(entry.recorded_at) or item.modified,
                size=item.size,
                entry_name=item.name,
                cost=StepCost.of(entry.kind, entry.usage),
                agent=None if agent is None and not scope else str(agent or "(unnamed agent)"),
                depth=int(scope.get("depth", 1)) if scope else 0,
            )
            result.append((info, entry))
        # A damaged copy of an entry that is readable elsewhere (packed and single) is not a step of its own.
        damaged = [(item, error) for item, error in survey.damaged if item.name not in survey.entries]
        for item, error in sorted(damaged, key=lambda row: (row[0].name, row[0].container)):
            kind: StepKindShown = "encrypted" if isinstance(error, SealedEntry) else "damaged"
            info = StepInfo(
                number=len(result) + 1,
                kind=kind,
                name="",
                call_id=None,
                attempt=None,
                recorded_at=item.modified,
                size=item.size,
                entry_name=item.name,
                problem=str(error),
            )
            result.append((info, None))
        return result


def _or_empty(value: float | None) -> float | str:
    return "" if value is None else value


def _timestamp(seconds: float | None) -> dt.datetime | None:
    if seconds is None:
        return None
    try:
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _content(entry: StepEntry) -> Any:
    if entry.kind == "model":
        response = entry.payload.get("response") or {}
        return {
            "parts": response.get("parts", []),
            "model_name": response.get("model_name"),
            "finish_reason": response.get("finish_reason"),
            "usage": entry.usage,
        }
    return entry.payload


_SEQUENCES = ("list", "tuple", "set", "frozenset")
_STRING_VALUES = ("float", "date", "datetime", "time", "uuid", "decimal")


def _plain(node: Any) -> Any:
    """A value node of the codec's tagged JSON as plain JSON, where it has a plain form (for people only)."""
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        return node
    kind = node["type"]
    if kind == "json":
        return node.get("value")
    if kind in _SEQUENCES and isinstance(node.get("items"), list):
        return [_plain(item) for item in node["items"]]
    if kind == "dict" and isinstance(node.get("items"), list):
        return {str(_plain(key)): _plain(item) for key, item in node["items"]}
    if kind in ("dataclass", "pydantic") and isinstance(node.get("fields"), dict):
        fields = {name: _plain(item) for name, item in node["fields"].items()}
        return {"class": node.get("class"), **fields}
    if kind in _STRING_VALUES and "class" not in node:
        return node.get("value")
    if kind == "enum":
        return f"{node.get('class')}.{node.get('name')}"
    return node
