"""The entry format: how one recorded step is written as bytes, and read back only if it is whole and ours.

An entry is one JSON object: ``format`` and ``version`` (the schema), ``owner`` (the task instance it
belongs to), the step's metadata, its ``payload`` and a SHA-256 ``checksum`` over all of that. With
encryption on, the whole object is sealed in an envelope (``{"format", "version", "encrypted"}``) by
an authenticated cipher (Airflow's Fernet). Entry names are ``{kind}-{key}.json``: :func:`entry_name`
is the one place they are made.

Guarantees: reading never trusts an entry that is torn, garbled, edited, of another release's
schema, sealed with another key, or written for another task instance: each is a
:class:`CorruptEntry` with the reason, never a crash and never a replay. This module does no I/O
(``store.py`` does).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = [
    "DECISION_KIND",
    "ENTRY_FORMAT",
    "ENTRY_KINDS",
    "RESULT_ENTRY",
    "RESULT_KEY",
    "SCHEMA_VERSION",
    "TOP_PARENT",
    "Cipher",
    "CorruptEntry",
    "SealedEntry",
    "StepEntry",
    "StepKind",
    "StepRole",
    "entry_name",
    "is_entry_name",
]

ENTRY_FORMAT = "airflow-pydantic-ai/step"
SCHEMA_VERSION = 1


StepKind = Literal["model", "tool", "result", "decision"]
StepRole = Literal["model", "tool", "output", "result", "decision"]
"""What an entry is to a person: a model request, a tool call, a call of an output function
(stored with kind ``tool``, so that entry names stay as they were), the task's recorded output, or
a person's decision on a tool call that needed approval."""
DECISION_KIND: StepKind = "decision"
"""The kind (and entry name prefix) of a recorded approval decision: named here, used everywhere."""
ENTRY_KINDS: tuple[StepKind, ...] = ("model", "tool", "result", DECISION_KIND)
_ROLES: tuple[str | None, ...] = (None, "model", "tool", "output", "result", DECISION_KIND)


def entry_name(kind: StepKind, key: str) -> str:
    """The name an entry of ``kind`` with ``key`` is stored under (the one place entry names are made)."""
    return f"{kind}-{key}.json"


def is_entry_name(name: str) -> bool:
    """Entries are ``{kind}-{key}.json``; temporary files, probes and notes start with a dot."""
    return name.endswith(".json") and not name.startswith(".")


TOP_PARENT = "top"
"""The ``parent`` in the scope of an agent run started at the attempt's top level after its first run."""

RESULT_KEY = "output"
RESULT_ENTRY = entry_name("result", RESULT_KEY)
"""The name of the entry holding the output a try pushed to XCom (kind ``result``): one per task instance."""


class CorruptEntry(ValueError):
    """A stored entry that must not be replayed; the message says why."""


class SealedEntry(CorruptEntry):
    """An encrypted entry read without the key (``durable_encrypt`` is off here)."""


class Cipher(Protocol):
    """Authenticated encryption of whole entries (Airflow's Fernet object fits)."""

    def encrypt(self, data: bytes) -> bytes: ...

    def decrypt(self, token: bytes) -> bytes: ...


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
    scope: dict[str, Any] | None = None
    """The agent run the step belongs to when it is not the attempt's first top-level run: ``parent`` (the key of
    the step that started the run, or ``top``), ``index`` (among the runs that step started), ``at`` (the model
    step of the enclosing run that asked for that step), ``agent`` (its name) and ``depth``. Absent (None) in
    entries of the first run and in every entry written before 0.3.0, so those are stored as they always were."""

    @property
    def scope_id(self) -> tuple[str, int] | None:
        """Which agent run of the attempt wrote the entry (None: the first top-level run)."""
        if not self.scope:
            return None
        try:
            return (str(self.scope["parent"]), int(self.scope["index"]))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def name(self) -> str:
        return entry_name(self.kind, self.key)

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
        if self.scope is not None:
            body["scope"] = self.scope
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
                scope=None if body.get("scope") is None else dict(body["scope"]),
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
