"""Every task instance cache under a base location, from one recursive listing.

What ``airflow pydantic-ai cache list`` and ``cache gc`` start from. A cache is a folder exactly four
segments below the base (``{dag_id}/{run_id}/{task_id}/{place}/``: the map index, with the loop
iteration and region inside an Airflow 3.4 loop, as
:meth:`~airflow_pydantic_ai.durable.storage.identity.TaskIdentity.segments` names it) holding at least one
entry, by the entry format's one rule (:func:`~airflow_pydantic_ai.durable.storage.entry.is_entry_name`), or
a pack of entries (whose name says how many of each kind it holds, so a packed cache is counted in steps
from the listing alone). A folder holding only the recorded output (``result-output.json``) is a cache
too, and every entry counts in ``entries`` and ``size``, whatever its kind.

Guarantees: one recursive listing of the base (on S3, one paginated ``ListObjectsV2`` without a
delimiter: a thousand keys per request), sizes and times taken from it, never a GET per entry;
nothing outside ``{base}/`` is ever reported (a neighbour ``{base}-old/`` sharing the base's string
prefix is not under it), nor a file at another depth, nor a temporary or probe file; listing
never changes anything.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from airflow_pydantic_ai.durable.storage.entry import entry_kind
from airflow_pydantic_ai.durable.storage.identity import Region, TaskIdentity, id_segment, is_shortened, parse_place
from airflow_pydantic_ai.durable.storage.pack_names import parse_pack_name
from airflow_pydantic_ai.durable.storage.store import StepStore, modified_time

__all__ = ["CacheSummary", "list_caches"]

_DEPTH = 4
"""Folders between the base and an entry: dag, run, task, place (map index, loop iteration)."""


@dataclass(frozen=True)
class CacheSummary:
    """One task instance's cache, as the listing shows it."""

    segments: tuple[str, str, str, str]
    """The path segments under the base (dag, run, task, place)."""
    identity: TaskIdentity | None
    """The task instance; None when an id was too long and is stored shortened (find it by :meth:`matches`)."""
    entries: int
    """Every entry: model and tool steps, approval decisions, the recorded output, tombstones, damaged ones."""
    model_steps: int
    tool_steps: int
    """Tool and output function calls (both are stored as ``tool-*`` entries)."""
    size: int
    """Bytes stored, all entries together."""
    last_written: dt.datetime | None
    root: str
    """The prefix on the filesystem (what deleting the cache removes)."""
    location: str
    """The prefix's URL, for people."""

    @property
    def dag_id(self) -> str:
        return self.identity.dag_id if self.identity else _readable(self.segments[0])

    @property
    def run_id(self) -> str:
        return self.identity.run_id if self.identity else _readable(self.segments[1])

    @property
    def task_id(self) -> str:
        return self.identity.task_id if self.identity else _readable(self.segments[2])

    @property
    def map_index(self) -> int:
        return parse_place(self.segments[3])[0]

    @property
    def region(self) -> Region | None:
        """Inside an Airflow 3.4 loop: the iteration's region; None otherwise."""
        return parse_place(self.segments[3])[1]

    @property
    def iteration(self) -> int | None:
        """The loop iteration (0-based) of a task instance inside a loop; None outside any loop."""
        region = self.region
        return None if region is None else region.iteration

    def matches(self, dag_id: str | None = None, run_id: str | None = None, task_id: str | None = None) -> bool:
        """Whether the cache belongs to these ids (None matches any); works for shortened ids too."""
        wanted = (dag_id, run_id, task_id)
        return all(
            value is None or id_segment(value) == segment for value, segment in zip(wanted, self.segments, strict=False)
        )

    def store(self, fs: Any, *, cipher: Any = None, timeout: float | None = None) -> StepStore:
        """The :class:`StepStore` of this cache (to read or delete it)."""
        owner = self.identity.owner() if self.identity else None
        return StepStore(fs=fs, root=self.root, location=self.location, owner=owner, cipher=cipher, timeout=timeout)


def _readable(segment: str) -> str:
    """A shortened id as people can read it: its decoded start, then an ellipsis."""
    if is_shortened(segment):
        head = segment.split("%%", 1)[0]
        return f"{unquote(head)}..."
    return unquote(segment)


@dataclass
class _Tally:
    entries: int = 0
    model_steps: int = 0
    tool_steps: int = 0
    size: int = 0
    last_written: dt.datetime | None = None


def list_caches(fs: Any, base: str, base_url: str, *, within: Sequence[str] = ()) -> list[CacheSummary]:
    """Every cache under ``base`` (a path on ``fs``, known to people as ``base_url``), sorted by path.

    ``within``: only the caches under these first segments (``TaskIdentity.segments()[:3]``: one task's
    caches, such as the iterations of a loop), listing only that prefix.
    """
    root = base.rstrip("/")
    listed = "/".join([root, *within])
    invalidate = getattr(fs, "invalidate_cache", None)
    if invalidate is not None:
        invalidate(listed)  # object-store filesystems cache listings per process
    try:
        listing = fs.find(listed, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    tallies: dict[tuple[str, ...], _Tally] = {}
    for path, info in listing.items():
        parts = _relative_parts(str(path), root)
        if parts is None or len(parts) != _DEPTH + 1 or info.get("type") == "directory":
            continue
        *folders, name = parts
        counts = _counts(name)
        if counts is None:
            continue
        tally = tallies.setdefault(tuple(folders), _Tally())
        tally.entries += counts[0]
        tally.model_steps += counts[1]
        tally.tool_steps += counts[2]
        tally.size += int(info.get("size") or 0)
        modified = modified_time(info)
        if modified is not None and (tally.last_written is None or modified > tally.last_written):
            tally.last_written = modified
    summaries = []
    base_location = base_url.rstrip("/")
    for key, tally in sorted(tallies.items()):
        segments = (key[0], key[1], key[2], key[3])
        try:
            identity = TaskIdentity.from_segments(segments)
        except ValueError:
            continue  # a folder of the right depth that no task instance would write (foreign files)
        suffix = "/".join(segments)
        summaries.append(
            CacheSummary(
                segments=segments,
                identity=identity,
                entries=tally.entries,
                model_steps=tally.model_steps,
                tool_steps=tally.tool_steps,
                size=tally.size,
                last_written=tally.last_written,
                root=f"{root}/{suffix}",
                location=f"{base_location}/{suffix}/",
            )
        )
    return summaries


def _relative_parts(path: str, root: str) -> list[str] | None:
    """The segments of ``path`` below ``root``; None when it is not under ``root/`` (a neighbour)."""
    path = path.rstrip("/")
    # fsspec filesystems return paths without a protocol; a local root may come with one.
    for candidate_root in (root, root.split("://", 1)[-1]):
        if path.startswith(candidate_root + "/"):
            return path[len(candidate_root) + 1 :].split("/")
    return None


def _counts(name: str) -> tuple[int, int, int] | None:
    """(entries, model steps, tool steps) an object holds, from its name: one entry of its kind, or what a
    pack's name says; None for temporary, probe, note or foreign files."""
    pack = parse_pack_name(name)
    if pack is not None:
        return (pack.entries, pack.model, pack.tool)
    kind = entry_kind(name)
    if kind is None:
        return None
    return (1, int(kind == "model"), int(kind == "tool"))
