"""Reading a task instance's whole cache: the survey :meth:`StepStore.survey` and :meth:`StepStore.load` make
(list the prefix once, fetch the packs and single entries in one batched call, verify each entry, honour the
tombstones), and the :class:`Holdings` it leaves on the store for the next pack. The store's own code, split out
of ``store.py`` by concern: only the store calls it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, StepEntry, is_entry_name
from airflow_pydantic_ai.durable.storage.pack import Pack, decode_pack
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name
from airflow_pydantic_ai.durable.storage.stored import (
    StoredEntry,
    Survey,
    modified_time,
    newer,
    stored_bytes,
    stored_digest,
)
from airflow_pydantic_ai.durable.storage.tombstone import Mark, forgotten_by, is_tombstone

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["Holdings", "listing_rows", "named_rows", "take_survey", "verify"]


@dataclass
class Holdings:
    """What a store loaded or wrote, for :meth:`StepStore.pack`: the last survey fills it, each write adds to it."""

    entries: dict[str, tuple[bytes | dict[str, Any], str]] = field(default_factory=dict)
    """Entry name -> (stored form, the object holding it)."""
    unread: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    """Entries of readable packs that could not be verified here (sealed without the key, damaged): a new
    pack carries them as they are, so packing never drops what it could not read."""
    packs_seen: set[str] = field(default_factory=set)
    """The readable packs the last load found (a pack written from what it held replaces them)."""
    forgotten_singles: set[str] = field(default_factory=set)
    """Single entries the last load found holding only a copy a tombstone forgets: a pack removes them too."""
    listing: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Entry name -> its listing fields (``StepEntry.listing_fields``), for the held entries whose metadata this
    store knows (verified or written here): what a pack's listing holds (``pack.py``)."""


def take_survey(store: StepStore, *, listing_only: bool = False) -> Survey:
    """List the prefix, fetch the packs and single entries in one batched call, and verify each entry.

    A pack superseded by a readable pack is not read; an entry both packed and single counts once
    (the copy written last); a copy a tombstone forgets is not found at all, wherever it sits
    (``tombstone.py``). What this finds, the tombstones with it, is what ``StepStore.pack`` packs (``store.held``).

    ``listing_only`` (the read side): the steps a pack's listing describes are taken from it, not opened
    (``Survey.unopened``; ``StepStore.open`` verifies one when it is shown). Never for a replay.
    """
    survey = Survey()
    rows = listing_rows(store)
    contents = store.read_entries(list(rows))
    gone = [name for name, data in contents.items() if isinstance(data, FileNotFoundError)]
    if gone:
        # A try packing at the same moment moved them into a new pack: list once more and read what is new.
        rows = listing_rows(store)
        contents = {name: data for name, data in contents.items() if name in rows}
        contents.update(store.read_entries([name for name in rows if name not in contents]))
    stored: list[StoredEntry] = []
    packs: dict[str, Pack] = {}
    for name, data in sorted(contents.items()):
        size, modified = rows.get(name, (0, None))
        if isinstance(data, bytes):
            survey.bytes_read += len(data)
        if not is_pack_name(name):
            stored.append(StoredEntry(name, data, size, modified, name))
            continue
        try:
            if isinstance(data, BaseException):
                raise CorruptEntry(f"it could not be read: {data}")
            packs[name] = decode_pack(data, owner=store.owner)
        except CorruptEntry as error:
            survey.damaged.append((StoredEntry(name, data, size, modified, name), error))
    replaced = {old for pack in packs.values() for old in pack.replaces}
    listed: dict[str, dict[str, dict[str, Any]]] = {}
    for name, pack in packs.items():
        if name in replaced:
            continue
        size, modified = rows.get(name, (0, None))
        listed[name] = pack.listing(store.cipher) if listing_only else {}
        for packed, body in pack.bodies.items():
            listed_size = listed[name].get(packed, {}).get("size")
            own_size = listed_size if isinstance(listed_size, int) else None
            stored.append(StoredEntry(packed, body, size, modified, name, own_size))
    store.held = held = Holdings(packs_seen=set(packs))
    singles: list[tuple[StepEntry, StoredEntry]] = []
    unopened: set[tuple[str, str]] = set()
    for item in stored:
        try:
            entry = _listed(item, listed.get(item.container, {}))
            if entry is None:
                entry = verify(store, item)
            else:
                unopened.add((item.name, item.container))
        except CorruptEntry as error:
            survey.damaged.append((item, error))
            if item.in_pack and isinstance(item.data, dict):
                held.unread[item.name] = (item.data, item.container)
            continue
        if not item.in_pack:
            singles.append((entry, item))
        known = survey.entries.get(item.name)
        if known is None or newer(entry, known[0]):
            survey.entries[item.name] = (entry, item)
            held.entries[item.name] = (item.data, item.container)  # type: ignore[assignment]
            held.listing[item.name] = entry.listing_fields()
    # The copy found is the newest: a single entry written after the pack was opened like any other.
    survey.unopened = {name for name, (_, item) in survey.entries.items() if (name, item.container) in unopened}
    _honour_tombstones(held, survey, singles)
    return survey


def _listed(item: StoredEntry, listing: dict[str, dict[str, Any]]) -> StepEntry | None:
    """The entry as its pack's listing describes it (not opened), or None: not listed (a companion, a
    tombstone, an older pack), listed with malformed fields, or no longer the very bytes the packer verified
    (edited, damaged since): it is then opened as any other, and a damaged one is found damaged."""
    fields = listing.get(item.name)
    if fields is None or not item.in_pack or not isinstance(item.data, dict):
        return None
    if fields.get("digest") != stored_digest(stored_bytes(item.data)):
        return None
    try:
        entry = StepEntry.listed(fields, name=item.name)
    except CorruptEntry:
        return None
    if entry.is_companion or is_tombstone(entry):  # their payloads are read (calls, forgetting): opened
        return None
    return entry


def _honour_tombstones(held: Holdings, survey: Survey, singles: Sequence[tuple[StepEntry, StoredEntry]]) -> None:
    """Move the tombstones out of the survey's entries, and drop every copy they forget: the newest copy of a
    name is the one a later try might have recorded after it was forgotten; when a mark covers it, it
    covers every older copy too. The tombstones stay held (a pack carries them); what they forget does not."""
    marks: dict[str, Mark] = {}
    for name, (entry, item) in list(survey.entries.items()):
        if not is_tombstone(entry):
            continue
        del survey.entries[name]
        try:
            forgets = forgotten_by(entry)
        except CorruptEntry as error:
            survey.damaged.append((item, error))
            continue
        survey.tombstones[name] = (entry, item)
        for forgotten, mark in forgets.items():
            marks[forgotten] = max(mark, marks.get(forgotten, mark))
    for name, mark in marks.items():
        found = survey.entries.get(name)
        if found is not None and mark.covers(found[0]):
            del survey.entries[name]
            held.entries.pop(name, None)
    held.forgotten_singles = {
        item.name for entry, item in singles if item.name in marks and marks[item.name].covers(entry)
    }


def verify(store: StepStore, item: StoredEntry) -> StepEntry:
    """Verify one entry a survey found; raises ``CorruptEntry`` with the reason."""
    if isinstance(item.data, BaseException):
        raise CorruptEntry(f"it could not be read: {item.data}")
    if isinstance(item.data, bytes):
        return store.decode(item.name, item.data)
    # A shallow copy: verifying removes the checksum field, and the stored form is packed again later.
    return StepEntry.from_body(dict(item.data), name=item.name, cipher=store.cipher, owner=store.owner)


def listing_rows(store: StepStore) -> dict[str, tuple[int, dt.datetime | None]]:
    """Entry and pack name -> (bytes stored, last modified in UTC), from one listing of the prefix.

    A directory under an entry's name is listed too: reading it fails, and that is said (a warning)."""
    return named_rows(store, lambda name: is_entry_name(name) or is_pack_name(name), directories=True)


def named_rows(
    store: StepStore, wanted: Callable[[str], bool], *, directories: bool
) -> dict[str, tuple[int, dt.datetime | None]]:
    """Name -> (bytes stored, last modified in UTC) of the ``wanted`` names, from one listing of the prefix."""
    found: dict[str, tuple[int, dt.datetime | None]] = {}
    for info in store.fresh_listing(detail=True):
        name = str(info.get("name", "")).rsplit("/", 1)[-1]
        if not wanted(name) or (not directories and info.get("type") == "directory"):
            continue
        found[name] = (int(info.get("size") or 0), modified_time(info))
    return found
