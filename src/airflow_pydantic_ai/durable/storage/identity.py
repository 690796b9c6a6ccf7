"""Which task instance a cache belongs to, and the readable, collision-free path it lives under.

Layout: ``{base}/{dag_id}/{run_id}/{task_id}/{map_index}/``. Each id is one path segment
(percent-encoded where needed, a long one shortened to a readable start and a digest), so
``etl`` + ``load_data`` never meets ``etl_load`` + ``data``, and no id can climb out of the base.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

__all__ = ["TaskIdentity", "id_segment", "is_shortened", "make_private_folders"]

_SAFE_CHARACTERS = "-_.:+~@=,"


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
