"""Canonical JSON and digests: the ground every fingerprint stands on.

Canonical JSON has sorted keys, compact separators, UTF-8 kept as is, and sets sorted: the same text in
every process, whatever ``PYTHONHASHSEED`` is. Never ``repr()``. A value that cannot be reduced to it
raises :class:`FingerprintError`: such a step is neither replayed nor recorded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python

from airflow_pydantic_ai.durable.errors import DurableError

__all__ = ["FingerprintError", "canonical_json", "digest", "jsonable", "strip"]


class FingerprintError(DurableError, ValueError):
    """A request or call could not be reduced to canonical JSON; it must be neither replayed nor recorded."""


def jsonable(value: Any) -> Any:
    """Plain JSON data for ``value``, with sets sorted; raises FingerprintError when impossible."""
    if isinstance(value, (set, frozenset)):
        items = [jsonable(item) for item in value]
        return sorted(items, key=canonical_json)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        converted = to_jsonable_python(value)
    except Exception as error:  # pydantic raises several types here
        raise FingerprintError(f"cannot serialize a {type(value).__name__}: {error}") from error
    if converted is value:
        raise FingerprintError(f"cannot serialize a {type(value).__name__}")
    return jsonable(converted)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` builds on every call."""


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact separators, UTF-8 kept as is."""
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError) as error:
        raise FingerprintError(str(error)) from error


def digest(*chunks: str | bytes) -> str:
    """Hex sha256 of the chunks, each length-prefixed so that ("ab", "c") != ("a", "bc")."""
    hasher = hashlib.sha256()
    for chunk in chunks:
        data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()


def strip(data: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in fields}
