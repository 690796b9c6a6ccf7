"""The pack format: the entries one try saw, in one object, so that the next try reads them in one request.

A pack is one JSON object. Its header comes first: ``format`` and ``version`` (the schema), ``owner``
(the task instance), ``attempt`` (the try that packed), ``replaces`` (the packs it supersedes: they held
nothing it does not hold, or only what was removed on purpose), ``names`` (the entries it holds),
a ``listing`` (below; older packs have none) and a SHA-256 ``checksum`` over those fields. Then ``entries``:
each entry's stored form exactly as it was stored singly (an encrypted entry stays sealed), by name. The
names of packs are made in ``pack_names.py`` (:func:`~airflow_pydantic_ai.durable.storage.pack_names.pack_name`), the
I/O is ``store.py``'s.

The ``listing`` holds, for each step the pack holds, what a cache's listing shows and numbers it by (its
``StepEntry.listing_fields``, its stored size and the SHA-256 of its stored form), never its payload: a
reader (``cache show``, the view) lists and numbers a cache from it and opens only the step it shows,
instead of decrypting and verifying every entry (a 15 MB tool result cost a reader 460 MiB). With
encryption on it is sealed as one token by the same cipher as the entries, with the pack's entry names and
try inside the seal; a listing that is missing, unreadable or names other entries is ignored, and the
reader opens every entry as before. A replay never reads it: a try verifies every entry it replays; a
reader takes a step from the listing only while its stored form still has the digest listed (else it
opens it: a damaged step is listed as damaged), and verifies the step it shows.

Guarantees: a pack that is torn (written half-way), garbled, edited in its header, of another schema or
written for another task instance is a :class:`~airflow_pydantic_ai.durable.storage.entry.CorruptEntry`
as a whole, and never supersedes anything; inside a readable pack, every entry is verified as if it were
stored singly (checksum, owner, schema version, its name), so one damaged entry costs that entry only.
This module does no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.storage.entry import Cipher, CorruptEntry

__all__ = ["PACK_FORMAT", "PACK_VERSION", "Pack", "decode_pack", "encode_pack"]

PACK_FORMAT = "airflow-pydantic-ai/pack"
PACK_VERSION = 1


@dataclass(frozen=True)
class Pack:
    """A readable pack: who wrote it, what it supersedes, and its entries' stored forms (parsed JSON)."""

    attempt: int
    replaces: tuple[str, ...]
    bodies: dict[str, Any]
    """Entry name -> the entry as stored (verify it with ``StepEntry.from_body``)."""
    names: tuple[str, ...] = ()
    sealed_listing: str | dict[str, Any] | None = None
    """The listing as stored (sealed: a token; plain: an object); read it with :meth:`listing`."""

    def listing(self, cipher: Cipher | None) -> dict[str, dict[str, Any]]:
        """Entry name -> its listing fields and ``size``; {} when the pack has no listing this reader can trust
        (none, sealed without the key here, plain while encryption is on, or naming other entries or another try)."""
        stored = self.sealed_listing
        try:
            if isinstance(stored, str) and cipher is not None:
                document = json.loads(cipher.decrypt(stored.encode()))
            elif isinstance(stored, dict) and cipher is None:
                document = stored
            else:
                return {}
        except Exception:  # edited, another key, not JSON: the entries are opened one by one instead
            return {}
        if not isinstance(document, dict) or document.get("names") != list(self.names):
            return {}
        if document.get("attempt") != self.attempt or not isinstance(document.get("steps"), dict):
            return {}
        return {name: fields for name, fields in document["steps"].items() if isinstance(fields, dict)}


def _checksum(header: dict[str, Any]) -> str:
    text = json.dumps(header, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def encode_pack(
    entries: Mapping[str, bytes],
    *,
    attempt: int,
    owner: list[Any] | None,
    replaces: list[str],
    listing: Mapping[str, dict[str, Any]] | None = None,
    cipher: Cipher | None = None,
) -> bytes:
    """One pack holding ``entries`` (name -> stored bytes, each a JSON object), superseding ``replaces``, with
    the ``listing`` of its steps (name -> listing fields and ``size``; sealed by ``cipher`` when given).

    The stored bytes are spliced in as they are (no decoding, no second encryption): packing costs a copy.
    """
    header: dict[str, Any] = {
        "format": PACK_FORMAT,
        "version": PACK_VERSION,
        "owner": owner,
        "attempt": attempt,
        "replaces": sorted(replaces),
        "names": sorted(entries),
    }
    if listing:
        document = {"names": header["names"], "attempt": attempt, "steps": dict(listing)}
        sealed = cipher is not None and cipher.encrypt(json.dumps(document, separators=(",", ":")).encode()).decode()
        header["listing"] = sealed or document
    head = json.dumps({**header, "checksum": _checksum(header)}, separators=(",", ":"))
    body = b",".join(json.dumps(name).encode() + b":" + entries[name] for name in header["names"])
    return head[:-1].encode() + b',"entries":{' + body + b"}}"


def decode_pack(data: bytes, *, owner: list[Any] | None) -> Pack:
    """Parse a pack and check its header; raises ``CorruptEntry`` with the reason (its entries are not verified)."""
    if not data:
        raise CorruptEntry("it is empty")
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptEntry(f"it is not valid JSON (written half-way, truncated or garbled): {error}") from None
    except RecursionError:
        raise CorruptEntry("it cannot be parsed (nested too deep)") from None
    if not isinstance(document, dict) or document.get("format") != PACK_FORMAT:
        raise CorruptEntry("it is not an airflow-pydantic-ai pack")
    if document.get("version") != PACK_VERSION:
        raise CorruptEntry(f"its pack version {document.get('version')!r} is not {PACK_VERSION} (another release)")
    entries = document.pop("entries", None)
    checksum = document.pop("checksum", None)
    if checksum != _checksum(document):
        raise CorruptEntry("its header checksum does not match its header")
    if owner is not None and document.get("owner") != owner:
        raise CorruptEntry(f"it was written for another task instance ({document.get('owner')!r})")
    if not isinstance(entries, dict) or sorted(entries) != document.get("names"):
        raise CorruptEntry("its entries are not the ones its header names")
    try:
        return Pack(
            attempt=int(document["attempt"]),
            replaces=tuple(str(name) for name in document["replaces"]),
            bodies=entries,
            names=tuple(document["names"]),
            sealed_listing=document.get("listing"),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptEntry(f"a header field is missing or malformed: {error}") from None
