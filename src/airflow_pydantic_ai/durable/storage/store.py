"""The I/O of one task instance's cache: put, load, list, delete. The bytes are ``entry.py``'s business.

Layout: ``{base}/{dag_id}/{run_id}/{task_id}/{map_index}/{kind}-{key}.json`` (``identity.py`` makes the
prefix). A step is written once, atomically: a single PUT on object stores, a temporary file plus
rename on local disks. Nothing is ever rewritten, so the bytes written grow with the size of the
steps, not with their square, and a crash loses at most the step in flight.

Besides the steps, a task instance that produced its output holds one ``result`` entry
(``result-output.json``): the value it pushed to XCom, written before the push, with the same
guarantees as a step. Deleting the cache removes the steps newest first and the result entry last,
so a deletion cut short at any point leaves either the result or nothing that was not there before.

Loading lists the prefix once and fetches the entries in one batched call (concurrent on object
stores). An entry that is torn, garbled, foreign, or of a future format is skipped with a warning.
Names starting with "." (temporary files, the start probe, per-try notes) are never loaded as steps.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from fsspec.asyn import AsyncFileSystem, sync

from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY, Cipher, CorruptEntry, StepEntry, is_entry_name
from airflow_pydantic_ai.durable.storage.identity import TaskIdentity, make_private_folders

__all__ = ["LoadedCache", "LocalFiles", "StepStore", "modified_time"]


class LocalFiles:
    """The local-disk calls of an atomic write. Fault drills pass their own (a kill before the rename...)."""

    def create(self, path: str) -> BinaryIO:
        """A new file readable by its owner only; fails if ``path`` exists."""
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return os.fdopen(descriptor, "wb")

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target)


def _check_note_name(name: str) -> None:
    if not name.startswith(".") or "/" in name or name in (".", ".."):
        raise ValueError(f"a note name starts with '.' and is one path segment, got {name!r}")


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

    def _fresh_listing(self, *, detail: bool) -> list[Any]:
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
        """List the prefix once and fetch every entry in one batched call."""
        loaded = LoadedCache()
        listing = self._fresh_listing(detail=False)
        if not listing:
            return loaded
        paths = [str(path) for path in listing if is_entry_name(str(path).rsplit("/", 1)[-1])]
        if not paths:
            return loaded
        # Fetched concurrently; the deadline grows with the batch (a few dozen requests run at once).
        contents = self._request("cat", paths, on_error="return", requests=1 + len(paths) // 32)
        if not isinstance(contents, dict):  # a single path comes back as bytes
            contents = {paths[0]: contents}
        for path, data in sorted(contents.items()):
            name = str(path).rsplit("/", 1)[-1]
            if isinstance(data, BaseException):
                loaded.skipped[name] = f"it could not be read: {data}"
                continue
            loaded.bytes_read += len(data)
            try:
                loaded.entries[name] = StepEntry.from_bytes(data, name=name, cipher=self.cipher, owner=self.owner)
            except CorruptEntry as error:
                loaded.skipped[name] = str(error)
        for name, reason in loaded.skipped.items():
            self.warn(f"Durable: ignoring cache entry {self.location}{name}: {reason}; that step will run live")
        return loaded

    def list_entries(self) -> dict[str, tuple[int, dt.datetime | None]]:
        """Entry name -> (bytes stored, last modified in UTC), from one listing of the prefix (no GET)."""
        listing = self._fresh_listing(detail=True)
        if not listing:
            return {}
        found: dict[str, tuple[int, dt.datetime | None]] = {}
        for info in listing:
            name = str(info.get("name", "")).rsplit("/", 1)[-1]
            if info.get("type") == "directory" or not is_entry_name(name):
                continue
            found[name] = (int(info.get("size") or 0), modified_time(info))
        return found

    def read_entries(self, names: list[str]) -> dict[str, bytes | BaseException]:
        """The bytes of ``names`` (fetched concurrently on object stores); an unreadable one maps to its error."""
        if not names:
            return {}
        paths = [self._path(name) for name in names]
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
        self.write(entry.name, self.encode(entry))

    def write(self, name: str, data: bytes) -> None:
        """Write one encoded entry atomically: a PUT on object stores, temp file + rename on local disks."""
        self._put(self._path(name), data)
        self.bytes_written += len(data)
        self.objects_written += 1

    def _put(self, path: str, data: bytes) -> None:
        if self.is_local:
            self._put_local(path, data)
        else:
            self._request("pipe_file", path, data)

    def _put_local(self, path: str, data: bytes) -> None:
        directory = os.path.dirname(path)
        self.created_folders.extend(make_private_folders(directory))
        temporary = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
        try:
            handle = self.local_files.create(temporary)
        except FileNotFoundError:
            # Another try of this task instance removed the folder it had left empty just now: once more.
            self.created_folders.extend(make_private_folders(directory))
            handle = self.local_files.create(temporary)
        try:
            with handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            self.local_files.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def write_note(self, name: str, data: bytes) -> None:
        """Write a small object beside the entries (``name`` starts with "."): never loaded as a step, not counted."""
        _check_note_name(name)
        self._put(self._path(name), data)

    def read_notes(self, prefix: str) -> dict[str, bytes]:
        """The notes whose names start with ``prefix`` (which starts with "."); an unreadable one is left out."""
        _check_note_name(prefix)
        listing = self._fresh_listing(detail=False)
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
        """Delete one entry if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self._request("rm_file", self._path(name))

    def clear(self, newest_first: Sequence[str] = ()) -> None:
        """Delete the whole prefix (and, on local disks, the parent folders it leaves empty).

        The entries named in ``newest_first`` go first, one by one in that order, then every other
        entry still listed, then ``RESULT_ENTRY``, then whatever is left (temporary files). A
        deletion cut short therefore leaves the result entry, or the oldest steps of the chain.
        """
        listed = {str(path).rsplit("/", 1)[-1] for path in self._fresh_listing(detail=False)}
        ordered = [name for name in newest_first if name in listed and name != RESULT_ENTRY]
        known = set(ordered)
        ordered += sorted(name for name in listed if is_entry_name(name) and name not in known and name != RESULT_ENTRY)
        if RESULT_ENTRY in listed:
            ordered.append(RESULT_ENTRY)
        for name in ordered:
            self.remove(name)
        try:
            self._request("rm", self.root, recursive=True, requests=3)
        except FileNotFoundError:
            return
        if self.is_local:
            parent = os.path.dirname(self.root)
            for _ in range(3):  # task_id, run_id, dag_id folders; never the configured base itself
                try:
                    os.rmdir(parent)
                except OSError:
                    break
                parent = os.path.dirname(parent)

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
