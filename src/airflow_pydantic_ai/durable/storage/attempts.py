"""What each durable attempt ended with, kept beside the cache for people (the UI view).

Layout: ``{prefix}/.attempt-{try:05d}``, one small JSON object per try: the try number, the
summary line, the "changed: ..." warning if the try logged one, and when it ended. The name starts
with ".", so the step loader and the read side never take it for a step.

Guarantees: a record holds no prompt, no payload and no model output (only counts and the names of
changed request components); writing it never fails an attempt (an error is logged at WARNING);
a damaged record is ignored. Records go with the cache: deleting the cache deletes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["AttemptRecord", "latest_attempt", "record_attempt"]

_PREFIX = ".attempt-"
_FORMAT = "airflow-pydantic-ai/attempt"


@dataclass(frozen=True)
class AttemptRecord:
    """The end of one durable try, as the view shows it."""

    attempt: int
    summary: str
    """The summary line the try logged (``Durable: replayed ...``)."""
    changed: tuple[str, ...] = ()
    """The "changed: ..." warnings the try logged (names of request components, never their content)."""
    ended_at: float = field(default_factory=time.time)
    """Seconds since the epoch."""

    def name(self) -> str:
        return f"{_PREFIX}{self.attempt:05d}"

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {"format": _FORMAT, **asdict(self)}
        body["changed"] = list(self.changed)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> AttemptRecord | None:
        """The record, or None when ``data`` is not a readable attempt record."""
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or body.get("format") != _FORMAT:
                return None
            return cls(
                attempt=int(body["attempt"]),
                summary=str(body["summary"]),
                changed=tuple(str(line) for line in body.get("changed") or ()),
                ended_at=float(body.get("ended_at") or 0.0),
            )
        except (ValueError, TypeError, KeyError, RecursionError):
            return None


def record_attempt(store: StepStore, record: AttemptRecord, *, warn: Callable[..., Any]) -> None:
    """Write ``record`` beside the cache; a storage error is logged, never raised."""
    try:
        store.write_note(record.name(), record.to_bytes())
    except Exception as error:
        warn("Durable: could not write the attempt record beside the cache at %s: %s", store.location, error)


def latest_attempt(store: StepStore) -> AttemptRecord | None:
    """The record of the latest try that wrote one, or None."""
    records = [AttemptRecord.from_bytes(data) for data in store.read_notes(_PREFIX).values()]
    readable = [record for record in records if record is not None]
    return max(readable, key=lambda record: record.attempt, default=None)
