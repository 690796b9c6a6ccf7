"""Which task instance a cache belongs to, and the readable, collision-free path it lives under.

Layout: ``{base}/{dag_id}/{run_id}/{task_id}/{place}/``. Each id is one path segment
(percent-encoded where needed, a long one shortened to a readable start and a digest), so
``etl`` + ``load_data`` never meets ``etl_load`` + ``data``, and no id can climb out of the base.

The place is the map index (``-1`` unmapped), as it always was, for a task instance outside any
region. Inside a region (Airflow 3.4 task-group loops) Airflow runs the same task id several times in
one DAG run, and tells the task instances apart by ``region_id`` and ``region_index``; the place then
also names the loop iteration and the region: ``{map_index}.loop{iteration}.{region_id}`` (plus
``.r{region_index}`` where the index is not the map index, or the iteration for an unmapped task).
So every iteration, and every map index inside one, has a cache of its own, and a cache written
without a region keeps its old prefix.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

__all__ = ["Region", "TaskIdentity", "id_segment", "is_shortened", "make_private_folders", "parse_place"]

_SAFE_CHARACTERS = "-_.:+~@=,"


_PLACE = re.compile(
    r"^(?P<map>-1|0|[1-9][0-9]*)(?:\.loop(?P<iteration>0|[1-9][0-9]*))?(?:\.r(?P<index>0|[1-9][0-9]*))?"
    r"\.(?P<region>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)


@dataclass(frozen=True)
class Region:
    """Where a task instance sits inside a region of its DAG run (Airflow 3.4: a task-group loop).

    Airflow's own identity of the task instance is (dag, run, task, ``region_id``, ``region_index``):
    an unmapped task in a loop shares the region id across iterations and its index is the iteration;
    a mapped one gets a region id per iteration and its index is the map index.
    """

    id: str
    """The region's UUID, lower-case with dashes."""
    index: int
    """Airflow's ``region_index``."""
    iteration: int | None = None
    """The loop iteration (``context["loop"].index``, 0-based); None when the region is not a loop's."""

    @classmethod
    def of(cls, region_id: Any, index: int, iteration: int | None = None) -> Region | None:
        """The region, or None for Airflow's "outside any region" (no id, or the all-zero UUID)."""
        if region_id is None:
            return None
        parsed = region_id if isinstance(region_id, uuid.UUID) else uuid.UUID(str(region_id))
        if parsed.int == 0:
            return None
        return cls(id=str(parsed), index=int(index), iteration=None if iteration is None else int(iteration))

    def describe(self) -> str:
        """For people: ``loop iteration 2`` (or the region index when the region is not a loop's)."""
        if self.iteration is not None:
            return f"loop iteration {self.iteration}"
        return f"region {self.id} index {self.index}"


@dataclass(frozen=True)
class TaskIdentity:
    """What a cache is keyed by: one task instance, across all of its tries."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    region: Region | None = None
    """Inside a loop (Airflow 3.4): which iteration's task instance; None outside any region."""

    @classmethod
    def of(
        cls, dag_id: str, run_id: str, task_id: str, map_index: int = -1, region: Sequence[Any] | None = None
    ) -> TaskIdentity:
        """The task instance, with its region as Airflow gives it (``(region_id, region_index, iteration)``, see
        :meth:`Region.of`; None outside any region)."""
        return cls(dag_id, run_id, task_id, map_index, None if region is None else Region.of(*region))

    @staticmethod
    def make_private_folders(path: str) -> list[str]:
        """:func:`make_private_folders`: a local cache's folders, readable by their owner only."""
        return make_private_folders(path)

    def owner(self) -> list[Any]:
        """The identity as stored inside each entry (authenticated with the entry when encrypted)."""
        owner: list[Any] = [self.dag_id, self.run_id, self.task_id, self.map_index]
        if self.region is not None:
            owner += [self.region.id, self.region.index]
        return owner

    def segments(self) -> list[str]:
        """The path segments of this task instance's cache, each safe and readable."""
        return [_segment(self.dag_id), _segment(self.run_id), _segment(self.task_id), self.place()]

    def place(self) -> str:
        """The last segment: the map index, and inside a region the iteration and the region (module doc)."""
        if self.region is None:
            return str(self.map_index)
        parts = [str(self.map_index)]
        iteration = self.region.iteration
        if iteration is not None:
            parts.append(f"loop{iteration}")
        if iteration is None or self.region.index != (self.map_index if self.map_index >= 0 else iteration):
            parts.append(f"r{self.region.index}")
        parts.append(self.region.id)
        return ".".join(parts)

    def describe(self) -> str:
        """The task instance for people: ``dag_id=... run_id=... task_id=... map_index=...[ loop iteration N]``."""
        text = f"dag_id={self.dag_id!r} run_id={self.run_id!r} task_id={self.task_id!r} map_index={self.map_index}"
        return text if self.region is None else f"{text} ({self.region.describe()})"

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
        *ids, place = segments
        map_index, region = parse_place(place)
        if any(is_shortened(segment) for segment in ids):
            return None
        decoded = [unquote(segment) for segment in ids]
        identity = cls(dag_id=decoded[0], run_id=decoded[1], task_id=decoded[2], map_index=map_index, region=region)
        if identity.segments() != list(segments):
            raise ValueError(f"{list(segments)!r} is not how a task instance's cache is named")
        return identity


def parse_place(place: str) -> tuple[int, Region | None]:
    """The map index and region a cache's last segment names (the inverse of ``TaskIdentity.place()``).

    Raises ``ValueError`` when no task instance would write that segment.
    """
    match = _PLACE.match(place)
    if match is None:
        try:
            map_index = int(place)
        except ValueError:
            raise ValueError(f"the map index segment {place!r} is not an integer") from None
        if str(map_index) != place or map_index < -1:
            raise ValueError(f"the map index segment {place!r} is not written as the task writes it")
        return map_index, None
    map_index = int(match["map"])
    iteration = None if match["iteration"] is None else int(match["iteration"])
    if match["index"] is not None:
        index = int(match["index"])
    elif iteration is not None:
        index = map_index if map_index >= 0 else iteration
    else:
        raise ValueError(f"the segment {place!r} names a region but neither its index nor a loop iteration")
    region = Region(id=match["region"], index=index, iteration=iteration)
    if TaskIdentity("d", "r", "t", map_index, region).place() != place:
        raise ValueError(f"the segment {place!r} is not written as the task writes it")
    return map_index, region


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
