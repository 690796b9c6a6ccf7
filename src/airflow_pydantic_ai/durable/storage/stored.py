"""What reading a task instance's cache finds, before and after each entry is verified: the stored entries
(in an object of their own or in a pack, with their own stored size), a survey of the whole cache, the loaded
cache an attempt replays from, and the time of a listing row. No I/O: the store (``store.py``) fills them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, StepEntry, is_entry_name
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name

__all__ = [
    "LoadedCache",
    "StoredEntry",
    "Survey",
    "modified_time",
    "newer",
    "stored_bytes",
    "stored_digest",
    "unverified_entries",
]


def modified_time(info: dict[str, Any]) -> dt.datetime | None:
    """The modification time in an fsspec listing row (``mtime`` on local disks, ``LastModified`` on S3...)."""
    for key in ("LastModified", "last_modified", "mtime", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, dt.datetime):
            return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return None


@dataclass
class LoadedCache:
    """The usable entries of a task instance's cache, by name, and the names that were skipped."""

    entries: dict[str, StepEntry] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0
    tombstones: dict[str, StepEntry] = field(default_factory=dict)
    """The tombstones found (``tombstone.py``): already honoured in ``entries``, never steps."""
    unverified: dict[str, str] = field(default_factory=dict)
    """Entry name -> why it could not be verified, for entries that exist with no readable copy
    (:func:`unverified_entries`): an at-most-once call whose start mark is one of them is in doubt."""


@dataclass(frozen=True)
class StoredEntry:
    """One entry as found in storage, before it is verified: in an object of its own, or in a pack."""

    name: str
    data: bytes | dict[str, Any] | BaseException
    """Its stored bytes (a single entry), its parsed stored form (in a pack), or why it could not be read."""
    object_size: int
    """Bytes of the object that holds it (a pack holds more than this entry)."""
    modified: dt.datetime | None
    container: str
    """The object that holds it: its own name, or the pack's."""
    own_size: int | None = None
    """Bytes of its stored form, when its pack's listing says (else worked out by :attr:`size`)."""

    @property
    def in_pack(self) -> bool:
        return self.container != self.name

    @property
    def size(self) -> int:
        """Bytes of this entry as stored: its object's, or, in a pack, its own stored form there (a pack keeps
        each entry byte for byte as it was stored singly). Worked out when asked: reading a cache to replay it
        never needs it."""
        if self.own_size is not None:
            return self.own_size
        if self.in_pack and isinstance(self.data, dict):
            return len(stored_bytes(self.data))
        return self.object_size


@dataclass
class Survey:
    """What a task instance's cache holds: every verified entry (the newest copy of each, less what a tombstone
    forgets), and what is damaged."""

    entries: dict[str, tuple[StepEntry, StoredEntry]] = field(default_factory=dict)
    damaged: list[tuple[StoredEntry, CorruptEntry]] = field(default_factory=list)
    """Entries (or whole packs, under the pack's name) that must not be replayed, with the reason."""
    bytes_read: int = 0
    tombstones: dict[str, tuple[StepEntry, StoredEntry]] = field(default_factory=dict)
    """The tombstones (``tombstone.py``), kept apart from the entries: never a step."""
    unopened: set[str] = field(default_factory=set)
    """Entries taken from their pack's listing and not opened (a ``listing_only`` survey): their payload is
    empty; ``StepStore.open`` verifies one (the read side, for the step it shows)."""


def stored_bytes(data: bytes | dict[str, Any]) -> bytes:
    """An entry's stored form as bytes (an entry read from a pack was parsed: written back as compact JSON)."""
    if isinstance(data, bytes):
        return data
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # lone surrogates (undecodable file names): ASCII escapes read back the same
        return json.dumps(data, separators=(",", ":")).encode()


def stored_digest(data: bytes) -> str:
    """The SHA-256 of an entry's stored form: a pack's listing names it, so that a reader knows an entry it does
    not open is still the very one the packer verified (``pack.py``)."""
    return hashlib.sha256(data).hexdigest()


def newer(entry: StepEntry, than: StepEntry) -> bool:
    """Whether ``entry`` was written after ``than`` (a later try, or later in the same try): the newest copy of a
    name wins when a cache holds it twice (a pack and a single entry)."""
    return (entry.attempt, entry.recorded_at or 0.0) > (than.attempt, than.recorded_at or 0.0)


_NAMED_IN_A_PACK = re.compile(rb'"([a-z_]+-[A-Za-z0-9_.-]+\.json)":\{')


def unverified_entries(survey: Survey) -> dict[str, str]:
    """Entry name -> why it could not be verified, for every entry that exists in storage with no readable copy:
    a damaged single entry, a damaged or sealed entry of a readable pack, and the entries a pack that cannot be
    read as a whole still names in its bytes (a torn or garbled pack keeps its entries' names in clear).
    What the at-most-once guard needs: a start mark that exists but cannot be read still says the call started."""
    found: dict[str, str] = {}
    for item, error in survey.damaged:
        if not item.in_pack and is_pack_name(item.name):
            data = item.data if isinstance(item.data, bytes) else b""
            for raw in _NAMED_IN_A_PACK.findall(data):
                name = raw.decode("ascii", "replace")
                if is_entry_name(name):
                    found.setdefault(name, f"in {item.name}, which cannot be read: {error}")
            continue
        found.setdefault(item.name, str(error))
    return {name: why for name, why in found.items() if name not in survey.entries}
