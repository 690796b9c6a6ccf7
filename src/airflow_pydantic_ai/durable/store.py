"""The cache of one task instance: one small JSON object per step, under one readable prefix.

Layout: ``{base}/{dag_id}/{run_id}/{task_id}/{map_index}/{kind}-{key}.json``. Each id is one path
segment (percent-encoded where needed), so ``etl`` + ``load_data`` never meets ``etl_load`` +
``data``. A step is written once, atomically: a single PUT on object stores, a temporary file
plus rename on local disks. Nothing is ever rewritten, so the bytes written grow with the size of
the steps, not with their square, and a crash loses at most the step in flight.

Besides the steps, a task instance that produced its output holds one ``result`` entry
(``result-output.json``): the value it pushed to XCom, written before the push, with the same
guarantees as a step (checksum, owner binding, encryption). Deleting the cache removes the steps
newest first and the result entry last, so a deletion cut short at any point leaves either the
result or nothing that was not there before.

Loading lists the prefix once and fetches the entries in one batched call (concurrent on object
stores). An entry that is torn, garbled, foreign, or of a future format is skipped with a warning.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import quote, unquote

from fsspec.asyn import AsyncFileSystem, sync

__all__ = [
    "DECISION_KIND",
    "ENTRY_FORMAT",
    "ENTRY_KINDS",
    "RESULT_ENTRY",
    "SCHEMA_VERSION",
    "Cipher",
    "CorruptEntry",
    "LoadedCache",
    "SealedEntry",
    "StepEntry",
    "StepStore",
    "TaskIdentity",
    "id_segment",
    "is_shortened",
    "make_private_folders",
    "modified_time",
]

ENTRY_FORMAT = "airflow-pydantic-ai/step"
SCHEMA_VERSION = 1
_SAFE_CHARACTERS = "-_.:+~@=,"

StepKind = Literal["model", "tool", "result", "decision"]
StepRole = Literal["model", "tool", "output", "result", "decision"]
"""What an entry is to a person: a model request, a tool call, a call of an output function
(stored with kind ``tool``, so that entry names stay as they were), the task's recorded output, or
a person's decision on a tool call that needed approval."""
DECISION_KIND: StepKind = "decision"
"""The kind (and entry name prefix) of a recorded approval decision: named here, used everywhere."""
ENTRY_KINDS: tuple[StepKind, ...] = ("model", "tool", "result", DECISION_KIND)
_ROLES: tuple[str | None, ...] = (None, "model", "tool", "output", "result", DECISION_KIND)

RESULT_KEY = "output"
RESULT_ENTRY = f"result-{RESULT_KEY}.json"
"""The name of the entry holding the output a try pushed to XCom (kind ``result``): one per task instance."""


class CorruptEntry(ValueError):
    """A stored entry that must not be replayed; the message says why."""


class SealedEntry(CorruptEntry):
    """An encrypted entry read without the key (``durable_encrypt`` is off here)."""


class Cipher(Protocol):
    """Authenticated encryption of whole entries (Airflow's Fernet object fits)."""

    def encrypt(self, data: bytes) -> bytes: ...

    def decrypt(self, token: bytes) -> bytes: ...


@dataclass(frozen=True)
class TaskIdentity:
    """What a cache is keyed by: one task instance, across all of its tries."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def owner(self) -> list[Any]:
        """The identity as stored inside each entry (authenticated with the entry when encrypted)."""
        return [self.dag_id, self.run_id, self.task_id, self.map_index]

    def segments(self) -> list[str]:
        """The path segments of this task instance's cache, each safe and readable."""
        return [_segment(self.dag_id), _segment(self.run_id), _segment(self.task_id), str(self.map_index)]

    @classmethod
    def from_segments(cls, segments: Sequence[str]) -> TaskIdentity | None:
        """The inverse of :meth:`segments`: the task instance whose cache lives under these segments.

        Returns None when an id was shortened (``{start}%%{sha256}``, see ``is_shortened()``): only
        its digest is stored, so the id cannot be recovered from the path; find the task instance
        whose ``segments()`` equal these instead. Raises ``ValueError`` when the segments are not a
        cache's (wrong count, a map index that is not an integer, an id that does not encode back
        to the same segment).
        """
        if len(segments) != 4:
            raise ValueError(f"a cache is 4 path segments deep (dag, run, task, map index), got {list(segments)!r}")
        *ids, map_index_text = segments
        try:
            map_index = int(map_index_text)
        except ValueError:
            raise ValueError(f"the map index segment {map_index_text!r} is not an integer") from None
        if str(map_index) != map_index_text:
            raise ValueError(f"the map index segment {map_index_text!r} is not written as the task writes it")
        if any(is_shortened(segment) for segment in ids):
            return None
        decoded = [unquote(segment) for segment in ids]
        identity = cls(dag_id=decoded[0], run_id=decoded[1], task_id=decoded[2], map_index=map_index)
        if identity.segments() != list(segments):
            raise ValueError(f"{list(segments)!r} is not how a task instance's cache is named")
        return identity


_MAX_SEGMENT = 200
"""Bytes of one encoded path segment: local filesystems allow 255 per name (ids can be long, and
percent-encoding triples non-ASCII characters)."""


def id_segment(value: str) -> str:
    """The path segment an id (dag, run or task id) is stored under."""
    return _segment(value)


def is_shortened(segment: str) -> bool:
    """Whether a segment is a long id shortened to a readable start and a digest of the whole id."""
    return "%%" in segment


def _segment(value: str) -> str:
    encoded = quote(value, safe=_SAFE_CHARACTERS)
    if encoded in ("", ".", ".."):
        # Never a path traversal nor an empty segment.
        encoded = encoded.replace(".", "%2E") or "%00"
    if len(encoded) > _MAX_SEGMENT:
        # A readable start and a digest of the whole id. A literal "%" is always encoded as "%25",
        # so "%%" never occurs in a segment that was not shortened: no collision with any other id.
        head = encoded[: _MAX_SEGMENT - 66]
        escape = head.rfind("%", len(head) - 2)  # never cut a %XX escape in two
        if escape != -1:
            head = head[:escape]
        encoded = f"{head}%%{hashlib.sha256(value.encode()).hexdigest()}"
    return encoded


def make_private_folders(path: str) -> list[str]:
    """Create ``path`` and any missing parents readable by their owner only; return those created, outermost first.

    ``os.makedirs(mode=...)`` applies the mode to the last folder only; the dag and run folders above
    a task instance's would be world-readable, and their names (dag ids, run ids) tell a story too.
    """
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    created: list[str] = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another try created it meanwhile
            continue
        created.append(folder)
    return created


def _is_entry_name(name: str) -> bool:
    """Entries are ``{kind}-{key}.json``; temporary files and probes start with a dot."""
    return name.endswith(".json") and not name.startswith(".")


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


def _parse(data: bytes) -> dict[str, Any]:
    if not data:
        raise CorruptEntry("it is empty")
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptEntry(f"it is not valid JSON (truncated or garbled): {error}") from None
    if not isinstance(body, dict) or body.get("format") != ENTRY_FORMAT:
        raise CorruptEntry("it is not an airflow-pydantic-ai step entry")
    return body


def _checksum(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _json_bytes(body: dict[str, Any]) -> bytes:
    """UTF-8 JSON; text with lone surrogates (undecodable file names) is written as ASCII escapes,
    which JSON reads back as the same surrogates."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class StepEntry:
    """One recorded step: the request's fingerprint and what it produced."""

    kind: StepKind
    key: str
    step: int
    """For a model step, its number within the attempt that recorded it (1-based)."""
    attempt: int
    label: str
    """The model's identity or the tool's name, for logs."""
    payload: dict[str, Any]
    components: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    """The model's tool call id, for a tool or output function call (shown by the read side)."""
    role: StepRole | None = None
    """None: the kind's own role (entries written before 0.2.0 have no role)."""
    recorded_at: float | None = None
    """When the entry was written, in seconds since the epoch (None in entries written before 0.2.0)."""

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.key}.json"

    @property
    def step_role(self) -> StepRole:
        return self.role or self.kind

    def to_bytes(self, cipher: Cipher | None = None, *, owner: list[Any] | None = None) -> bytes:
        """The stored form; ``owner`` (the task instance's identity) binds the entry to its prefix."""
        body: dict[str, Any] = {
            "format": ENTRY_FORMAT,
            "version": SCHEMA_VERSION,
            "owner": owner,
            "kind": self.kind,
            "key": self.key,
            "step": self.step,
            "attempt": self.attempt,
            "label": self.label,
            "components": self.components,
            "usage": self.usage,
            "call_id": self.call_id,
            "role": self.role,
            "recorded_at": self.recorded_at,
            "payload": self.payload,
        }
        body["checksum"] = _checksum(body)
        data = _json_bytes(body)
        if cipher is None:
            return data
        envelope = {"format": ENTRY_FORMAT, "version": SCHEMA_VERSION, "encrypted": cipher.encrypt(data).decode()}
        return json.dumps(envelope, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(
        cls, data: bytes, *, name: str, cipher: Cipher | None = None, owner: list[Any] | None = None
    ) -> StepEntry:
        """Parse and verify a stored entry; raises :class:`CorruptEntry` with the reason.

        Whatever is wrong with one entry (including JSON nested too deep to parse, or numbers out
        of range) is a :class:`CorruptEntry`: one bad entry must never cost the rest of the cache.
        """
        try:
            return cls._verified(data, name=name, cipher=cipher, owner=owner)
        except CorruptEntry:
            raise
        except Exception as error:  # RecursionError, OverflowError, MemoryError's milder cousins...
            raise CorruptEntry(f"it cannot be parsed ({type(error).__name__}: {error})") from None

    @classmethod
    def _verified(cls, data: bytes, *, name: str, cipher: Cipher | None, owner: list[Any] | None) -> StepEntry:
        body = _parse(data)
        if "encrypted" in body:
            if cipher is None:
                raise SealedEntry("it is encrypted, but [pydantic_ai] durable_encrypt is off")
            try:
                body = _parse(cipher.decrypt(str(body["encrypted"]).encode()))
            except CorruptEntry:
                raise
            except Exception:
                raise CorruptEntry(
                    "it failed authentication (edited, injected, or written with another Fernet key)"
                ) from None
        elif cipher is not None:
            raise CorruptEntry("it is not encrypted, but [pydantic_ai] durable_encrypt is on (injected?)")
        version = body.get("version")
        if version != SCHEMA_VERSION:
            raise CorruptEntry(f"its schema version {version!r} is not {SCHEMA_VERSION} (written by another release)")
        stored_checksum = body.pop("checksum", None)
        if stored_checksum != _checksum(body):
            raise CorruptEntry("its checksum does not match its content")
        try:
            entry = cls(
                kind=body["kind"],
                key=body["key"],
                step=int(body["step"]),
                attempt=int(body["attempt"]),
                label=str(body["label"]),
                payload=dict(body["payload"]),
                components=dict(body.get("components") or {}),
                usage=dict(body.get("usage") or {}),
                call_id=None if body.get("call_id") is None else str(body["call_id"]),
                role=body.get("role"),
                recorded_at=None if body.get("recorded_at") is None else float(body["recorded_at"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptEntry(f"a field is missing or malformed: {error}") from None
        if entry.kind not in ENTRY_KINDS or entry.name != name:
            raise CorruptEntry("its kind or key does not match its name")
        if entry.role not in _ROLES:
            raise CorruptEntry(f"its role {entry.role!r} is unknown")
        if owner is not None and body.get("owner") != owner:
            # Keys are content digests, so the same prompt in another dag run gives the same names: an
            # entry copied from another task instance's prefix must not replay here.
            raise CorruptEntry(f"it was written for another task instance ({body.get('owner')!r})")
        return entry


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
        paths = [
            str(path)
            for path in listing
            if str(path).rsplit("/", 1)[-1].endswith(".json") and not str(path).rsplit("/", 1)[-1].startswith(".")
        ]
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
            if info.get("type") == "directory" or not _is_entry_name(name):
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
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:
            # Another try of this task instance removed the folder it had left empty just now: once more.
            self.created_folders.extend(make_private_folders(directory))
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
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
        ordered += sorted(
            name for name in listed if name.endswith(".json") and name not in known and name != RESULT_ENTRY
        )
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
