"""Key schemes: how a model request is reduced to a key, the scheme a cache was recorded with, and which to use.

- ``model-request/v2`` (this release): the key covers what the provider receives (``wire.py``).
- ``model-request/v1`` (releases 0.1.0 to 0.3.0): every field of the request's dataclasses, so the key depends
  on the pydantic-ai release that recorded it. It is computed again as that release would have
  (``releases.py``); release 0.1.0 also kept response timestamps in the digest.

Each entry records ``recorded_with`` (:func:`recorded_with`): the pydantic-ai release and the key scheme. An
attempt keys every step with one scheme: the one its cache was recorded with. A cache written before entries
said so (0.1.0 to 0.3.0) was recorded under one of the releases of ``releases.py``, the one whose fields its
recorded responses have (:func:`release_of_fields`): the attempt's first model step tries that one first, then
the others (:func:`candidates`), and keeps the first whose key is in the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.keys.releases import (
    FIELDS_ADDED,
    KNOWN_RELEASES,
    as_release,
    installed_release,
    nearest_known,
)

__all__ = ["LEGACY", "WIRE", "KeyScheme", "candidates", "recorded_release", "recorded_with", "release_of_fields"]

WIRE = "model-request/v2"
LEGACY = "model-request/v1"


@dataclass(frozen=True)
class KeyScheme:
    """One way of keying a model request."""

    name: str = WIRE
    release: str | None = None
    """For ``model-request/v1``: the release (a row of ``releases.FIELDS_ADDED``) the key is computed as."""
    keep_response_timestamps: bool = False
    """``model-request/v1`` as release 0.1.0 computed it (response timestamps in the digest)."""

    @property
    def is_wire(self) -> bool:
        return self.name == WIRE

    def as_recorded(self, class_name: str, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (an object serialised by the installed release) as the recording release serialised it."""
        if self.release is None:
            return data
        return as_release(class_name, data, self.release)

    def __str__(self) -> str:
        if self.is_wire:
            return self.name
        return f"{self.name} (pydantic-ai {self.release}{', release 0.1.0' if self.keep_response_timestamps else ''})"


def recorded_with(scheme: KeyScheme) -> dict[str, str]:
    """What an entry recorded now says it was recorded with: the pydantic-ai release and the key scheme."""
    return {"pydantic_ai": installed_release(), "keys": scheme.name}


def recorded_release(entry_recorded_with: Mapping[str, Any] | None) -> str | None:
    """The pydantic-ai release an entry names (None: written before entries said so)."""
    if not isinstance(entry_recorded_with, Mapping):
        return None
    release = entry_recorded_with.get("pydantic_ai")
    return release if isinstance(release, str) else None


def release_of_fields(entry: Any) -> str | None:
    """The release (a row of ``releases.FIELDS_ADDED``) whose field set the recorded response of model entry
    ``entry`` has: the response was serialised by the release that recorded it, with every field it had. (The
    first model request alone cannot tell releases apart when they differ only in the fields of a response.)"""
    payload = getattr(entry, "payload", None)
    response = payload.get("response") if isinstance(payload, Mapping) else None
    if not isinstance(response, Mapping):
        return None
    for release in reversed(KNOWN_RELEASES):
        added = FIELDS_ADDED[release].get("ModelResponse")
        if added and all(name in response for name in added):
            return release
    return KNOWN_RELEASES[0]


def candidates(entries: Iterable[Any], *, release_0_1_0: bool = False) -> list[KeyScheme]:
    """The schemes the model steps of ``entries`` may have been keyed with, the likeliest first; the current
    scheme is always one (``release_0_1_0``: the cache was written by release 0.1.0).

    One scheme: no need to try. Several (a cache written before entries named their scheme): the first model
    step of the attempt tries them in this order; when none has its key, it is keyed with the current scheme.
    """
    steps = [entry for entry in entries if getattr(entry, "kind", None) == "model"]
    if not steps:
        return [KeyScheme()]
    schemes: list[KeyScheme] = []
    unnamed = False
    for entry in sorted(steps, key=lambda entry: -entry.attempt):  # the newest try's scheme first
        said = entry.recorded_with if isinstance(entry.recorded_with, Mapping) else None
        if said is None:
            unnamed = True
            continue
        name = said.get("keys")
        release = recorded_release(said)
        if name == WIRE:
            scheme = KeyScheme()
        elif name == LEGACY and release is not None:
            scheme = KeyScheme(LEGACY, nearest_known(release), release_0_1_0)
        else:
            continue
        if scheme not in schemes:
            schemes.append(scheme)
    if unnamed:
        seen = [release_of_fields(entry) for entry in steps if entry.recorded_with is None]
        here = nearest_known(installed_release())
        for release in (*[release for release in seen if release], here, *sorted(KNOWN_RELEASES, reverse=True)):
            scheme = KeyScheme(LEGACY, release, release_0_1_0)
            if scheme not in schemes:
                schemes.append(scheme)
    if KeyScheme() not in schemes:
        schemes.append(KeyScheme())
    return schemes
