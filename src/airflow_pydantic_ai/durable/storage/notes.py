"""What each durable attempt ended with, kept beside the cache for people (the UI view).

Layout: ``{prefix}/.attempt-{try:05d}``, one small JSON object per try: the try number, the
summary line, the "changed: ..." warning if the try logged one, and when it ended; beside it
``{prefix}/.attempt-{try:05d}.end`` (:class:`TryEnding`) when the try did not succeed: how it ended
(the exception's class and its message with secrets masked, or waiting for a person's approval). Names
start with ".", so the step loader and the read side never take them for steps.

Guarantees: a record holds no prompt, no payload and no model output (only counts, the names of
changed request components, and an exception's message masked by the caller and cut to
``MESSAGE_LIMIT`` characters); writing it never fails an attempt (an error is logged at WARNING);
a damaged record is ignored. Records go with the cache: deleting the cache deletes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["MESSAGE_LIMIT", "AttemptRecord", "TryEnding", "latest_attempt", "record_attempt", "record_ending"]

_PREFIX = ".attempt-"
_ENDING_SUFFIX = ".end"
_FORMAT = "airflow-pydantic-ai/attempt"
_ENDING_FORMAT = "airflow-pydantic-ai/attempt-ending"
MESSAGE_LIMIT = 300
"""Characters of an exception's message kept in a :class:`TryEnding`."""


@dataclass(frozen=True)
class TryEnding:
    """How a try that did not succeed ended: it failed on an exception, or stopped to wait for a person."""

    attempt: int
    how: Literal["failed", "waiting"]
    error_class: str = ""
    """The exception's class name (``ConnectionError``); empty for a wait."""
    message: str = ""
    """The exception's message, secrets masked by the caller, cut to ``MESSAGE_LIMIT`` characters;
    for a wait, what it waits in (``awaiting_input``, ``deferred``)."""

    @classmethod
    def failed(cls, attempt: int, error: BaseException, redact: Callable[[Any], Any]) -> TryEnding:
        message = " ".join(str(redact(str(error))).split())
        if len(message) > MESSAGE_LIMIT:
            message = f"{message[: MESSAGE_LIMIT - 3]}..."
        return cls(attempt=attempt, how="failed", error_class=type(error).__name__, message=message)

    def describe(self) -> str:
        """One sentence for people: ``Failed: ConnectionError: chat API down``."""
        if self.how == "waiting":
            # The same wait asks for approvals or about calls in doubt: worded for both.
            where = "Waiting for a person's answer on the Required Actions page"
            return f"{where} ({self.message})" if self.message else where
        return f"Failed: {self.error_class}: {self.message}" if self.message else f"Failed: {self.error_class}"

    def name(self) -> str:
        return f"{_PREFIX}{self.attempt:05d}{_ENDING_SUFFIX}"

    def to_bytes(self) -> bytes:
        body = {
            "format": _ENDING_FORMAT,
            "attempt": self.attempt,
            "how": self.how,
            "error_class": self.error_class,
            "message": self.message,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TryEnding | None:
        """The ending, or None when ``data`` is not a readable one."""
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or body.get("format") != _ENDING_FORMAT:
                return None
            how = body["how"]
            if how not in ("failed", "waiting"):
                return None
            return cls(
                attempt=int(body["attempt"]),
                how=how,
                error_class=str(body.get("error_class") or ""),
                message=str(body.get("message") or "")[:MESSAGE_LIMIT],
            )
        except (ValueError, TypeError, KeyError, RecursionError):
            return None


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
    ending: TryEnding | None = None
    """How the try ended when it did not succeed (a note of its own beside this one); None if unknown."""

    def name(self) -> str:
        return f"{_PREFIX}{self.attempt:05d}"

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "format": _FORMAT,
            "attempt": self.attempt,
            "summary": self.summary,
            "changed": list(self.changed),
            "ended_at": self.ended_at,
        }
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


def record_ending(store: StepStore, ending: TryEnding, *, warn: Callable[..., Any]) -> None:
    """Write how a try ended beside the cache; a storage error is logged, never raised."""
    try:
        store.write_note(ending.name(), ending.to_bytes())
    except Exception as error:
        warn("Durable: could not write how the try ended beside the cache at %s: %s", store.location, error)


def latest_attempt(store: StepStore) -> AttemptRecord | None:
    """The record of the latest try that wrote one, with how it ended when that is known; or None."""
    notes = store.read_notes(_PREFIX)
    records = [AttemptRecord.from_bytes(data) for name, data in notes.items() if not name.endswith(_ENDING_SUFFIX)]
    latest = max((record for record in records if record is not None), key=lambda record: record.attempt, default=None)
    if latest is None:
        return None
    ending = TryEnding.from_bytes(notes.get(TryEnding(latest.attempt, "failed").name(), b""))
    return replace(latest, ending=ending) if ending is not None else latest
