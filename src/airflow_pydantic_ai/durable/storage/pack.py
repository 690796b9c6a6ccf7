"""The pack format: the entries one try saw, in one object, so that the next try reads them in one request.

A pack is one JSON object. Its header comes first: ``format`` and ``version`` (the schema), ``owner``
(the task instance), ``attempt`` (the try that packed), ``replaces`` (the packs it supersedes: they held
nothing it does not hold, or only what was removed on purpose), ``names`` (the entries it holds) and a
SHA-256 ``checksum`` over those fields. Then ``entries``: each entry's stored form exactly as it was
stored singly (an encrypted entry stays sealed), by name. The names of packs are made in ``entry.py``
(:func:`~airflow_pydantic_ai.durable.storage.entry.pack_name`), the I/O is ``store.py``'s.

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

from airflow_pydantic_ai.durable.storage.entry import CorruptEntry

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


def _checksum(header: dict[str, Any]) -> str:
    text = json.dumps(header, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def encode_pack(entries: Mapping[str, bytes], *, attempt: int, owner: list[Any] | None, replaces: list[str]) -> bytes:
    """One pack holding ``entries`` (name -> stored bytes, each a JSON object), superseding ``replaces``.

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
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptEntry(f"a header field is missing or malformed: {error}") from None
