"""The I/O of one task instance's cache: put, load, pack, list, delete. The bytes are ``entry.py``'s and ``pack.py``'s.

Layout: ``{base}/{dag_id}/{run_id}/{task_id}/{map_index}/{kind}-{key}.json`` (``identity.py`` makes the
prefix). A step is written once, atomically: a single PUT on object stores, a temporary file plus
rename on local disks (not ``fsync``-ed: see ``local_files.py``; a pack is). Nothing is ever rewritten
while a try runs, so the bytes written grow with the size of the steps, not with their square, and a
crash loses at most the step in flight.

A try that ends (failed, or parked for a person's decision) may :meth:`~StepStore.pack` what it loaded
and wrote into one object (``pack-....pack``), written atomically *before* the single entries it holds
and the packs it replaces are removed; the next try then reads a few objects, not one per step.

Entries a run failed on are forgotten by a tombstone (``tombstone.py``), written before anything is deleted:
loading ignores every copy it forgets, whichever object holds it (an old pack a kill left, a zombie's pack).

Besides the steps, a task instance that produced its output holds one ``result`` entry
(``result-output.json``, never packed): the value it pushed to XCom, written before the push, with the
same guarantees as a step. Deleting the cache removes packs and steps first and the result entry last,
so a deletion cut short at any point leaves either the result or nothing that was not there before.

Loading lists the prefix once and fetches the packs and entries in one batched call (concurrent on
object stores): one LIST plus one GET per pack and per single entry. An entry that is torn, garbled,
foreign, or of a future format is skipped with a warning, and so is a pack written half-way (its
entries are then read from the single entries that still exist). Names starting with "." (temporary
files, the start probe, per-try notes) are never loaded as steps.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fsspec.asyn import AsyncFileSystem, sync

from airflow_pydantic_ai.durable.storage import deletion
from airflow_pydantic_ai.durable.storage.entry import (
    RESULT_ENTRY,
    Cipher,
    StepEntry,
    is_entry_name,
)
from airflow_pydantic_ai.durable.storage.identity import TaskIdentity
from airflow_pydantic_ai.durable.storage.local_files import LocalFiles, write_atomically
from airflow_pydantic_ai.durable.storage.pack import encode_pack
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name, pack_name, parse_pack_name
from airflow_pydantic_ai.durable.storage.stored import (
    LoadedCache,
    StoredEntry,
    Survey,
    modified_time,
    stored_bytes,
    stored_digest,
    unverified_entries,
)
from airflow_pydantic_ai.durable.storage.surveying import Holdings, listing_rows, named_rows, take_survey, verify

__all__ = [
    "LoadedCache",
    "LocalFiles",
    "StepStore",
    "StoredEntry",
    "Survey",
    "modified_time",
]  # re-exported: the store returns them


def _check_note_name(name: str) -> None:
    if not name.startswith(".") or "/" in name or name in (".", ".."):
        raise ValueError(f"a note name starts with '.' and is one path segment, got {name!r}")


@dataclass
class StepStore:
    """A task instance's cache on an fsspec filesystem (what ``ObjectStoragePath`` wraps).

    ``root`` is the filesystem path of the task instance's prefix, ``location`` its URL for people.
    """

    fs: Any = field(repr=False)
    root: str
    location: str
    owner: list[Any] | None = None
    """The task instance's identity, written into each entry and checked on load."""
    warn: Callable[[str], None] = print
    cipher: Cipher | None = None
    timeout: float | None = None
    """Seconds one request may take (a write, the listing, a batch of reads): a hard, cancelling
    deadline on asynchronous object stores (S3, GCS, Azure), whose clients otherwise retry for minutes."""
    bytes_written: int = 0
    objects_written: int = 0
    created_folders: list[str] = field(default_factory=list, repr=False)
    """Local folders this store created (outermost first): removed again if a failed try leaves them empty."""
    local_files: LocalFiles = field(default_factory=LocalFiles, repr=False)
    held: Holdings = field(default_factory=Holdings, repr=False)
    """What this store loaded or wrote, for :meth:`pack` (``surveying.py``)."""

    @classmethod
    def for_task(
        cls,
        fs: Any,
        base: str,
        base_url: str,
        identity: TaskIdentity,
        *,
        warn: Callable[[str], None] = print,
        cipher: Cipher | None = None,
        timeout: float | None = None,
    ) -> StepStore:
        """The store of ``identity`` under ``base`` (a path on ``fs``) known to people as ``base_url``."""
        suffix = "/".join(identity.segments())
        return cls(
            fs=fs,
            root=f"{base.rstrip('/')}/{suffix}",
            location=f"{base_url.rstrip('/')}/{suffix}/",
            owner=identity.owner(),
            warn=warn,
            cipher=cipher,
            timeout=timeout,
        )

    @property
    def is_local(self) -> bool:
        protocol = getattr(self.fs, "protocol", "")
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        return any(name in ("file", "local") for name in protocols)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _request(self, method: str, *args: Any, requests: int = 1, **kwargs: Any) -> Any:
        """``fs.<method>(...)``, within ``requests`` x ``timeout`` seconds on asynchronous filesystems."""
        if self.timeout and isinstance(self.fs, AsyncFileSystem) and self.fs.loop is not None:
            # Raises fsspec's FSTimeoutError (a TimeoutError) and cancels the request.
            return sync(self.fs.loop, getattr(self.fs, f"_{method}"), *args, timeout=self.timeout * requests, **kwargs)
        return getattr(self.fs, method)(*args, **kwargs)

    def fresh_listing(self, *, detail: bool) -> list[Any]:
        """One listing of the prefix ([] when it does not exist). Object-store filesystems cache listings
        per process, and another worker may have written since: the cached one is dropped first."""
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(self.root)
        try:
            return list(self._request("ls", self.root, detail=detail))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def load(self) -> LoadedCache:
        """Every usable entry: one listing, then one batched fetch of the packs and the single entries."""
        survey = self.survey()
        loaded = LoadedCache(bytes_read=survey.bytes_read)
        loaded.entries = {name: entry for name, (entry, _) in survey.entries.items()}
        loaded.tombstones = {name: entry for name, (entry, _) in survey.tombstones.items()}
        loaded.unverified = unverified_entries(survey)
        for stored, error in survey.damaged:
            where = f"{stored.name} in {stored.container}" if stored.in_pack else stored.name
            loaded.skipped[where] = str(error)
        for where, reason in loaded.skipped.items():
            if is_pack_name(where):
                self.warn(
                    f"Durable: ignoring cache pack {self.location}{where}: {reason}; its steps are read from the "
                    "single entries that still exist, the others will run live"
                )
            else:
                self.warn(f"Durable: ignoring cache entry {self.location}{where}: {reason}; that step will run live")
        return loaded

    def survey(self, *, listing_only: bool = False) -> Survey:
        """List the prefix, fetch the packs and single entries in one batched call, and verify each entry
        (``surveying.py``). ``listing_only`` (the read side): the steps a pack's listing describes are taken from it,
        not opened (``Survey.unopened``; :meth:`open` verifies one when it is shown). Never for a replay."""
        return take_survey(self, listing_only=listing_only)

    def open(self, item: StoredEntry) -> StepEntry:
        """Verify one entry a survey found (``listing_only``: one it did not open); raises ``CorruptEntry``."""
        return verify(self, item)

    # --- packs -------------------------------------------------------------------------------------

    def pack(self, attempt: int) -> str | None:
        """Pack the entries this store loaded or wrote into one object, then remove what it supersedes.

        The pack is written atomically first (a PUT; temp file + rename on local disks); only then are the
        single entries it holds and the packs it replaces removed (one batched delete on object stores).
        A kill at any point leaves every entry readable: in the old objects, the new pack, or both. The
        recorded output (``RESULT_ENTRY``) is never packed: cleanup after success deletes it last, alone.
        Returns the pack's name, or None when there was nothing to pack.
        """
        held = {name: item for name, item in self.held.entries.items() if name != RESULT_ENTRY}
        carried = {name: item for name, item in self.held.unread.items() if name not in held}
        if not held and not carried:
            return None
        forgotten = sorted(self.held.forgotten_singles - set(held))
        stored = {name: stored_bytes(data) for name, (data, _) in {**carried, **held}.items()}
        replaces = sorted(
            self.held.packs_seen | {container for _, container in held.values() if is_pack_name(container)}
        )
        name = str(pack_name(attempt, stored))
        listing = {
            entry: {**self.held.listing[entry], "size": len(stored[entry]), "digest": stored_digest(stored[entry])}
            for entry in held
            if entry in self.held.listing
        }
        data = encode_pack(
            stored, attempt=attempt, owner=self.owner, replaces=replaces, listing=listing, cipher=self.cipher
        )
        self._put(self._path(name), data, sync=True)  # it replaces objects: on disk before they go
        self.bytes_written += len(data)
        singles = sorted(entry for entry, (_, container) in held.items() if container == entry)
        self.held.entries.update({entry: (stored[entry], name) for entry in held})
        self.held.unread = {entry: (data, name) for entry, (data, _) in carried.items()}
        self.held.packs_seen, self.held.forgotten_singles = {name}, set()
        self._remove_objects([*replaces, *singles, *forgotten])
        return name

    def drop(self, names: Sequence[str]) -> None:
        """Remove the entries ``names`` (single ones in that order); those held in a pack by writing a pack
        without them that replaces it. A name may also be a damaged pack's. Reads the cache first."""
        survey = self.survey()
        found = [item for _, item in survey.entries.values()] + [item for item, _ in survey.damaged]
        objects = {item.container for item in found if not item.in_pack}
        for name in names:
            self.held.entries.pop(name, None)
            self.held.unread.pop(name, None)
        self._remove_objects([name for name in names if name in objects])
        if self.held.packs_seen:  # an entry may be packed (also when its single copy was the one read)
            attempt = max((entry.attempt for entry, _ in survey.entries.values()), default=0)
            if self.pack(attempt) is None:  # nothing left to pack: the packs go too
                self._remove_objects(sorted(self.held.packs_seen))
                self.held.packs_seen = set()

    def _remove_objects(self, names: Sequence[str]) -> None:
        """Delete ``names``: one by one in that order on local disks, in batched requests on object stores
        (S3 ``DeleteObjects`` takes up to 1,000 keys). A name that is already gone is no error."""
        if not names:
            return
        if self.is_local:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    self._request("rm_file", self._path(name))
            return
        paths = [self._path(name) for name in names]
        with contextlib.suppress(FileNotFoundError):
            self._request("rm", paths, requests=1 + len(paths) // 1000)

    def list_entries(self) -> dict[str, tuple[int, dt.datetime | None]]:
        """Entry name -> (bytes stored, last modified in UTC), from one listing of the prefix (no GET)."""
        return named_rows(self, is_entry_name, directories=False)

    def read_entries(self, names: list[str]) -> dict[str, bytes | BaseException]:
        """The bytes of ``names`` (fetched concurrently on object stores); an unreadable one maps to its error."""
        if not names:
            return {}
        paths = [self._path(name) for name in names]
        # The deadline grows with the batch (a few dozen requests run at once).
        contents = self._request("cat", paths, on_error="return", requests=1 + len(paths) // 32)
        if not isinstance(contents, dict):  # a single path comes back as bytes
            contents = {paths[0]: contents}
        return {str(path).rsplit("/", 1)[-1]: data for path, data in contents.items()}

    def decode(self, name: str, data: bytes) -> StepEntry:
        """Parse and verify the stored bytes of entry ``name``; raises ``CorruptEntry`` with the reason."""
        return StepEntry.from_bytes(data, name=name, cipher=self.cipher, owner=self.owner)

    def encode(self, entry: StepEntry) -> bytes:
        """The bytes :meth:`write` stores for ``entry`` (encrypted and bound to this task instance)."""
        return entry.to_bytes(self.cipher, owner=self.owner)

    def put(self, entry: StepEntry) -> None:
        """Encode and write one entry. Raises the storage error; the caller decides what it means."""
        self.write(entry.name, self.encode(entry), entry=entry)

    def write(self, name: str, data: bytes, *, entry: StepEntry | None = None) -> None:
        """Write one encoded entry atomically: a PUT on object stores, temp file + rename on local disks.
        ``entry`` (what ``data`` encodes) lets a pack list it (``pack.py``); without it, a reader opens it."""
        self._put(self._path(name), data)
        self.bytes_written += len(data)
        self.objects_written += 1
        self.held.entries[name] = (data, name)
        if entry is not None:
            self.held.listing[name] = entry.listing_fields()
        else:
            self.held.listing.pop(name, None)

    def _put(self, path: str, data: bytes, *, sync: bool = False) -> None:
        """A PUT on object stores; on local disks a temporary file, then rename (``LocalFiles.write_atomically``),
        with ``sync`` ``fsync``-ed too (a pack)."""
        if self.is_local:
            write_atomically(self.local_files, path, data, created=self.created_folders, sync=sync)
        else:
            self._request("pipe_file", path, data)

    def write_note(self, name: str, data: bytes) -> None:
        """Write a small object beside the entries (``name`` starts with "."): never loaded as a step, not counted."""
        _check_note_name(name)
        self._put(self._path(name), data)

    def read_notes(self, prefix: str) -> dict[str, bytes]:
        """The notes whose names start with ``prefix`` (which starts with "."); an unreadable one is left out."""
        _check_note_name(prefix)
        listing = self.fresh_listing(detail=False)
        if not listing:
            return {}
        names = [str(path).rsplit("/", 1)[-1] for path in listing]
        wanted = [name for name in names if name.startswith(prefix)]
        contents = self.read_entries(wanted)
        return {name: data for name, data in contents.items() if isinstance(data, bytes)}

    def probe(self) -> None:
        """Write and delete a small object under the prefix: proves the cache is writable before any step runs."""
        name = f".probe-{uuid.uuid4().hex}.tmp"  # names starting with "." are never loaded
        path = self._path(name)
        self._put(path, b"probe")
        self._request("rm_file", path)

    def remove(self, name: str) -> None:
        """Delete one entry if it exists (one held in a pack: a pack without it replaces that pack).

        A kill between the two leaves a packed copy, and a zombie try may pack one again: what must never be
        replayed is forgotten by a tombstone written first (``tombstone.py``), not by this alone."""
        held = self.held.entries.pop(name, None)
        if held is not None and held[1] != name:
            self.drop([name])
            return
        self._remove_objects([name])

    def count_entries(self) -> int:
        """How many entries the cache holds, from one listing (a pack's name says how many it holds)."""
        count = 0
        for name in listing_rows(self):
            parsed = parse_pack_name(name)
            count += parsed.entries if parsed is not None else 1
        return count

    def clear(self, newest_first: Sequence[str] = ()) -> None:
        """Delete the whole prefix (and, on local disks, the parent folders it leaves empty): packs first, then
        the single entries (``newest_first`` first, in that order), then ``RESULT_ENTRY``, then the rest. A
        deletion cut short leaves the result entry, or nothing that was not there before (``deletion.py``)."""
        deletion.clear(self, newest_first)

    def refuse_links(self) -> None:
        """Before deleting on a local disk: no deletion follows a link out of the cache root (``deletion.py``)."""
        deletion.refuse_links(self)

    def remove_empty_folders(self) -> None:
        """Remove the local folders this store created that are still empty, innermost first.

        Only folders it created itself, so never the configured base nor a folder another try or task
        instance is using; a folder that holds anything stays.
        """
        for folder in reversed(self.created_folders):
            try:
                os.rmdir(folder)
            except OSError:
                break
        self.created_folders = []

    def exists(self) -> bool:
        try:
            return bool(self.fs.exists(self.root)) and bool(self.fs.ls(self.root, detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return False
