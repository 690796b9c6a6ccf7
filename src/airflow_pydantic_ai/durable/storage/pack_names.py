"""The names of packs (``pack-{try}-{nonce}-m{model}-t{tool}-n{entries}.pack``): what a listing alone says of a
packed cache. A pack itself is ``pack.py``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PackName", "is_pack_name", "pack_name", "parse_pack_name"]


_PACK_NAME = re.compile(r"pack-(\d{5,})-([0-9a-f]{12})-m(\d+)-t(\d+)-n(\d+)\.pack")


@dataclass(frozen=True)
class PackName:
    """What the name of a pack says: the try that wrote it and how many entries of each kind it holds.

    The counts are in the name so that a listing alone (``cache list``, ``cache gc``) can count the steps
    of a packed cache without reading it.
    """

    attempt: int
    nonce: str
    """Random: two tries packing at once (a zombie and its successor) never write the same object."""
    model: int
    tool: int
    entries: int
    """Every entry, the recorded output and decisions included."""

    def __str__(self) -> str:
        return f"pack-{self.attempt:05d}-{self.nonce}-m{self.model}-t{self.tool}-n{self.entries}.pack"


def pack_name(attempt: int, names: Iterable[str]) -> PackName:
    """A fresh name for a pack of the entries ``names`` written by try ``attempt``."""
    kinds = [name.split("-", 1)[0] for name in names]
    return PackName(
        attempt=attempt,
        nonce=uuid.uuid4().hex[:12],
        model=kinds.count("model"),
        tool=kinds.count("tool"),
        entries=len(kinds),
    )


def parse_pack_name(name: str) -> PackName | None:
    """The parts of a pack's name; None when ``name`` is not a pack's."""
    match = _PACK_NAME.fullmatch(name)
    if match is None:
        return None
    attempt, nonce, model, tool, entries = match.groups()
    return PackName(int(attempt), nonce, int(model), int(tool), int(entries))


def is_pack_name(name: str) -> bool:
    """Packs are ``pack-{try}-{nonce}-m{model}-t{tool}-n{entries}.pack`` (see :class:`PackName`)."""
    return parse_pack_name(name) is not None
