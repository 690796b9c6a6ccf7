"""The entry format: how one recorded step is written as bytes, and read back only if it is whole and ours.

An entry is one JSON object: ``format`` and ``version`` (the schema), ``owner`` (the task instance it
belongs to), the step's metadata, its ``payload`` and a SHA-256 ``checksum`` over all of that. With
encryption on, the whole object is sealed in an envelope (``{"format", "version", "encrypted"}``) by
an authenticated cipher (Airflow's Fernet). Entry names are ``{kind}-{key}.json``: :func:`entry_name`
is the one place they are made. A try that ends packs the entries it saw into one object (``pack.py``);
the names of packs are made and recognised in ``pack_names.py``.

Guarantees: reading never trusts an entry that is torn, garbled, edited, of another release's
schema, sealed with another key, or written for another task instance: each is a
:class:`CorruptEntry` with the reason, never a crash and never a replay. This module does no I/O
(``store.py`` does).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.kinds import ENTRY_PREFIXES, KINDS, ROLES, EntryPrefix, StepRole

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
    "entry_kind",
    "entry_name",
    "is_entry_name",
]

ENTRY_FORMAT = "airflow-pydantic-ai/step"
SCHEMA_VERSION = 1


StepKind = EntryPrefix
"""The kind an entry is stored as (its name's prefix); what it is to a person is its :data:`StepRole`. Both
come from the one table of kinds (``durable/kinds.py``)."""
DECISION_KIND: StepKind = KINDS["decision"].prefix
ENTRY_KINDS: tuple[StepKind, ...] = ENTRY_PREFIXES
_ROLES: tuple[str | None, ...] = (None, *ROLES)


def entry_name(kind: StepKind, key: str) -> str:
    """The name an entry of ``kind`` with ``key`` is stored under (the one place entry names are made)."""
    return f"{kind}-{key}.json"


def entry_kind(name: str) -> StepKind | None:
    """The kind an entry's name says; None when ``name`` is not an entry's (the one rule for which names are
    entries: ``{kind}-{key}.json`` with a kind of :data:`ENTRY_KINDS`; temporary files, probes and per-try
    notes start with a dot, foreign files have no kind's prefix)."""
    if not name.endswith(".json") or name.startswith("."):
        return None
    prefix, dash, rest = name.partition("-")
    if not dash or rest == ".json":
        return None
    for kind in ENTRY_KINDS:
        if prefix == kind:
            return kind
    return None


def is_entry_name(name: str) -> bool:
    """Whether ``name`` is an entry's: what the store lists, the reader numbers and the catalog counts (packs,
    ``.pack``, hold entries but are not one)."""
    return entry_kind(name) is not None


TOP_PARENT = "top"
"""The ``parent`` in the scope of an agent run started at the attempt's top level after its first run."""


RESULT_KEY = "output"
RESULT_ENTRY = entry_name("result", RESULT_KEY)
"""The name of the entry holding the output a try pushed to XCom (kind ``result``): one per task instance."""


class CorruptEntry(DurableError, ValueError):
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
    return _checked_format(body)


def _checked_format(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or body.get("format") != ENTRY_FORMAT:
        raise CorruptEntry("it is not an airflow-pydantic-ai step entry")
    return body


_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_AS_IS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _checksum(body: dict[str, Any]) -> str:
    return _checksum_of(_SORTED.encode(body))


def _checksum_of(sorted_text: str) -> str:
    return hashlib.sha256(sorted_text.encode("utf-8", "surrogatepass")).hexdigest()


def _in_sorted_order(value: Any, budget: int = 2000) -> bool:
    """Whether every object in ``value`` has its keys in sorted order (then its JSON is the same sorted or not).

    False when unsure: keys that do not compare, or more than ``budget`` items to look at (a walk in Python
    costs more than serialising many small items in C): the caller then serialises the value sorted too."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            budget -= len(item) + 1
            keys = list(item)
            try:
                if budget < 0 or keys != sorted(keys):
                    return False
            except TypeError:
                return False
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            budget -= len(item) + 1
            if budget < 0:
                return False
            pending.extend(item)
    return True


def _sealed_text(body: dict[str, Any]) -> str | None:
    """The stored text of ``body`` (which holds a ``payload``) with its checksum last, serialising the payload once:
    None when its objects are not all in sorted order (then its sorted JSON, which the checksum is taken over,
    differs from the JSON stored, and the caller serialises it twice).

    The text is what ``json.dumps`` gives for ``body`` plus the checksum (compact separators, UTF-8 kept), the
    checksum the SHA-256 of ``json.dumps(body, sort_keys=True)``: both joined from the payload's text and the
    small fields around it, each serialised by the same encoder."""
    payload = body["payload"]
    if not _in_sorted_order(payload):
        return None
    payload_text = _AS_IS.encode(payload)
    before = {key: value for key, value in body.items() if key < "payload"}
    after = {key: value for key, value in body.items() if key > "payload"}
    checksum = _checksum_of(_joined(_SORTED.encode(before), payload_text, _SORTED.encode(after)))
    names = list(body)
    at = names.index("payload")
    stored_before = {key: body[key] for key in names[:at]}
    stored_after = {**{key: body[key] for key in names[at + 1 :]}, "checksum": checksum}
    return _joined(_AS_IS.encode(stored_before), payload_text, _AS_IS.encode(stored_after))


def _joined(before: str, payload_text: str, after: str) -> str:
    """The JSON object of the fields of ``before``, then ``payload``, then the fields of ``after`` (both objects'
    JSON texts)."""
    fields = [text[1:-1] for text in (before, f'{{"payload":{payload_text}}}', after) if text != "{}"]
    return "{" + ",".join(fields) + "}"


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
    entries of the first run and in every entry written by release 0.2.0 or earlier, so those are stored as they
    always were."""
    recorded_with: dict[str, Any] | None = None
    """What recorded the entry: ``pydantic_ai`` (the release) and ``keys`` (the key scheme, ``keys/schemes.py``).
    None in entries written by release 0.2.0 or earlier (their scheme is found by trying, ``KeyScheme`` candidates)."""

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
    def is_step(self) -> bool:
        """Whether the entry is a step a retry replays (the recorded output is not one): the kind table's word."""
        return KINDS[self.step_role].is_step

    @property
    def is_companion(self) -> bool:
        """Whether the entry belongs to a tool call (a started mark, a resolution, a checkpoint) and takes no step
        number of its own: the kind table's word."""
        spec = KINDS.get(self.step_role)
        return spec is not None and spec.companion

    @property
    def step_role(self) -> StepRole:
        return self.role or self.kind  # an entry's prefix is also the role of the kind it is stored as

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
        if self.recorded_with is not None:
            body["recorded_with"] = self.recorded_with
        # The checksum is taken over the keys in sorted order, but the stored form keeps the payload's own order
        # (a replayed dict, or a model rebuilt from it, must keep its key order): a payload whose objects are in
        # sorted order already is serialised once for both (_sealed_text).
        text = _sealed_text(body)
        try:
            data = b"" if text is None else text.encode()
        except UnicodeEncodeError:  # lone surrogates: _json_bytes writes them as ASCII escapes
            data = b""
        if not data:
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
            return cls._verified(_parse(data), name=name, cipher=cipher, owner=owner)
        except CorruptEntry:
            raise
        except Exception as error:  # RecursionError, OverflowError, MemoryError's milder cousins...
            raise CorruptEntry(f"it cannot be parsed ({type(error).__name__}: {error})") from None

    @classmethod
    def from_body(
        cls, body: Any, *, name: str, cipher: Cipher | None = None, owner: list[Any] | None = None
    ) -> StepEntry:
        """:meth:`from_bytes` for an entry already parsed from JSON (one entry of a pack): the same checks.

        ``body`` is consumed (its checksum field is removed while it is verified).
        """
        try:
            return cls._verified(_checked_format(body), name=name, cipher=cipher, owner=owner)
        except CorruptEntry:
            raise
        except Exception as error:
            raise CorruptEntry(f"it cannot be parsed ({type(error).__name__}: {error})") from None

    @classmethod
    def _verified(cls, body: dict[str, Any], *, name: str, cipher: Cipher | None, owner: list[Any] | None) -> StepEntry:
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
        entry = cls._of_fields(body, name=name, payload=body.get("payload"))
        if owner is not None and body.get("owner") != owner:
            # Keys are content digests, so the same prompt in another dag run gives the same names: an
            # entry copied from another task instance's prefix must not replay here.
            raise CorruptEntry(f"it was written for another task instance ({body.get('owner')!r})")
        return entry

    def listing_fields(self) -> dict[str, Any]:
        """What the listing of a cache shows and numbers the entry by, without its payload and components: a
        pack keeps these of each of its steps (``pack.py``), so that a reader lists a cache without opening them."""
        return {
            "kind": self.kind,
            "key": self.key,
            "step": self.step,
            "attempt": self.attempt,
            "label": self.label,
            "usage": self.usage,
            "call_id": self.call_id,
            "role": self.role,
            "recorded_at": self.recorded_at,
            "scope": self.scope,
        }

    @classmethod
    def listed(cls, fields: Any, *, name: str) -> StepEntry:
        """The entry ``name`` as a pack's listing describes it (:meth:`listing_fields`): its payload and components
        are not read (empty), so it is for listing and numbering only, never for a replay or for showing its content.
        Raises :class:`CorruptEntry` when the fields are malformed or name another entry."""
        if not isinstance(fields, dict):
            raise CorruptEntry("its listing is not an object")
        return cls._of_fields(fields, name=name, payload={})

    @classmethod
    def _of_fields(cls, body: dict[str, Any], *, name: str, payload: Any) -> StepEntry:
        try:
            entry = cls(
                kind=body["kind"],
                key=body["key"],
                step=int(body["step"]),
                attempt=int(body["attempt"]),
                label=str(body["label"]),
                payload=dict(payload),
                components=dict(body.get("components") or {}),
                usage=dict(body.get("usage") or {}),
                call_id=None if body.get("call_id") is None else str(body["call_id"]),
                role=body.get("role"),
                recorded_at=None if body.get("recorded_at") is None else float(body["recorded_at"]),
                scope=None if body.get("scope") is None else dict(body["scope"]),
                recorded_with=None if body.get("recorded_with") is None else dict(body["recorded_with"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptEntry(f"a field is missing or malformed: {error}") from None
        if entry.kind not in ENTRY_KINDS or entry.name != name:
            raise CorruptEntry("its kind or key does not match its name")
        if entry.role not in _ROLES:
            raise CorruptEntry(f"its role {entry.role!r} is unknown")
        return entry
