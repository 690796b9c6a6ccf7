"""The catalog of every cache under a base: one recursive listing, the path segments read back into ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_pydantic_ai.durable import CacheReader, StepStore, TaskIdentity
from airflow_pydantic_ai.durable.storage.catalog import list_caches
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.identity import Region, is_shortened

REGION = "01a21234-a320-7fb4-b672-5e1321900fa6"

ODD_IDS = [
    TaskIdentity("etl", "manual__2026-11-22T04:00:00+00:00", "load", -1),
    TaskIdentity("my dag/ü", "scheduled__2026:x+y", "task.%25", 3),
    TaskIdentity(".", "..", "a%%b", 0),
    TaskIdentity("d", "r", "t", 10),
    # Airflow 3.4 loops: an unmapped task (index = iteration), a mapped one (index = map index), an odd index.
    TaskIdentity("d", "r", "group.t", -1, Region(REGION, 2, 2)),
    TaskIdentity("d", "r", "group.t", 1, Region(REGION, 1, 0)),
    TaskIdentity("d", "r", "group.t", -1, Region(REGION, 5, 1)),
    TaskIdentity("d", "r", "group.t", -1, Region(REGION, 4, None)),
]


@pytest.mark.parametrize("identity", ODD_IDS, ids=str)
def test_from_segments_inverts_segments(identity: TaskIdentity) -> None:
    assert TaskIdentity.from_segments(identity.segments()) == identity


def test_a_task_outside_any_region_keeps_the_layout_of_earlier_releases() -> None:
    """Caches written before Airflow 3.4 (or outside a loop) keep their prefix, so they keep replaying."""
    assert TaskIdentity("d", "r", "t", 3).segments() == ["d", "r", "t", "3"]
    assert TaskIdentity("d", "r", "t", 3).owner() == ["d", "r", "t", 3]
    assert Region.of("00000000-0000-0000-0000-000000000000", 3, None) is None
    assert Region.of(None, -1, None) is None


def test_each_iteration_and_map_index_of_a_loop_has_a_prefix_of_its_own() -> None:
    other = "01a21234-b46a-7219-a286-94d219bd7a5b"
    identities = [
        TaskIdentity("d", "r", "t", -1, Region(REGION, 0, 0)),
        TaskIdentity("d", "r", "t", -1, Region(REGION, 1, 1)),
        TaskIdentity("d", "r", "t", 0, Region(other, 0, 0)),
        TaskIdentity("d", "r", "t", 1, Region(other, 1, 0)),
        TaskIdentity("d", "r", "t", -1),
    ]
    assert len({tuple(identity.segments()) for identity in identities}) == len(identities)
    assert identities[1].place() == f"-1.loop1.{REGION}"
    assert identities[1].describe().endswith("(loop iteration 1)")


def test_a_shortened_id_cannot_be_read_back_but_still_matches() -> None:
    identity = TaskIdentity("d" * 300, "r", "t", -1)
    segments = identity.segments()

    assert is_shortened(segments[0]) and not is_shortened(segments[1])
    assert TaskIdentity.from_segments(segments) is None


@pytest.mark.parametrize(
    "segments",
    [
        ["d", "r", "t"],
        ["d", "r", "t", "x"],
        ["d", "r", "t", "01"],
        ["d", "r", "t", "-1", "extra"],
        ["a b", "r", "t", "-1"],
        ["d", "r", "t", "-2"],
        ["d", "r", "t", f"-1.{REGION}"],  # a region needs an iteration or an index
        ["d", "r", "t", f"-1.loop02.{REGION}"],
        ["d", "r", "t", f"-1.loop2.r2.{REGION}"],  # the index is the iteration: never written out
        ["d", "r", "t", f"-1.loop2.{REGION.upper()}"],
    ],
)
def test_from_segments_refuses_what_no_task_writes(segments: list[str]) -> None:
    with pytest.raises(ValueError):
        TaskIdentity.from_segments(segments)


def _entry(kind: str, number: int) -> StepEntry:
    return StepEntry(kind=kind, key=f"{number:064x}", step=1, attempt=1, label="x", payload={"value": "y" * number})  # type: ignore[arg-type]


def _write(base: Path, identity: TaskIdentity, kinds: list[str]) -> StepStore:
    store = StepStore.for_task(fsspec.filesystem("file"), str(base), f"file://{base}", identity)
    for number, kind in enumerate(kinds, start=1):
        store.put(_entry(kind, number))
    return store


def test_catalog_counts_entries_sizes_and_times_and_ignores_everything_else(tmp_path: Path) -> None:
    base = tmp_path / "cache"
    long_identity = TaskIdentity("d" * 300, "run", "task", -1)
    stores = {
        identity: _write(base, identity, kinds)
        for identity, kinds in [
            (ODD_IDS[0], ["model", "tool", "tool", "model"]),
            (ODD_IDS[1], ["model"]),
            (long_identity, ["model", "tool"]),
        ]
    }
    # Neighbours sharing the base's string prefix, files at the wrong depth, temporary and foreign files.
    for stray in [
        tmp_path / "cache-old" / "d" / "r" / "t" / "-1" / "model-x.json",
        tmp_path / "cachex" / "d" / "r" / "t" / "-1" / "tool-x.json",
        base / "README.txt",
        base / "d" / "r" / "t" / "model-x.json",
        base / "d" / "r" / "t" / "-1" / "deeper" / "model-x.json",
        base / "d" / "r" / "t" / "-1" / ".0123.tmp",
        base / "d" / "r" / "t" / "-1" / "notes.json",
        base / "d" / "r" / "t" / "x" / "model-x.json",
    ]:
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_text("{}")

    caches = {cache.segments: cache for cache in list_caches(fsspec.filesystem("file"), str(base), f"file://{base}")}

    assert set(caches) == {tuple(identity.segments()) for identity in stores}
    first = caches[tuple(ODD_IDS[0].segments())]
    assert (first.identity, first.entries, first.model_steps, first.tool_steps) == (ODD_IDS[0], 4, 2, 2)
    sizes = [path.stat().st_size for path in Path(stores[ODD_IDS[0]].root).iterdir()]
    assert first.size == sum(sizes)
    assert first.last_written is not None and first.last_written.tzinfo is not None
    assert first.location == stores[ODD_IDS[0]].location
    assert first.root == stores[ODD_IDS[0]].root
    odd = caches[tuple(ODD_IDS[1].segments())]
    assert (odd.dag_id, odd.run_id, odd.task_id, odd.map_index) == ("my dag/ü", "scheduled__2026:x+y", "task.%25", 3)
    long = caches[tuple(long_identity.segments())]
    assert long.identity is None and long.dag_id.endswith("...") and long.dag_id.startswith("ddd")
    assert long.matches(dag_id="d" * 300) and not long.matches(dag_id="d" * 299)
    assert long.matches(run_id="run", task_id="task") and not long.matches(task_id="tas")


def test_catalog_of_a_missing_base_is_empty(tmp_path: Path) -> None:
    assert list_caches(fsspec.filesystem("file"), str(tmp_path / "nothing"), "file:///x") == []


def test_catalog_store_deletes_only_its_own_prefix(tmp_path: Path) -> None:
    base = tmp_path / "cache"
    one = TaskIdentity("d", "r", "t", 1)
    ten = TaskIdentity("d", "r", "t", 10)
    _write(base, one, ["model"])
    _write(base, ten, ["model", "tool"])
    fs: Any = fsspec.filesystem("file")
    [cache_one] = [cache for cache in list_caches(fs, str(base), f"file://{base}") if cache.identity == one]

    cache_one.store(fs).clear()

    remaining = list_caches(fs, str(base), f"file://{base}")
    assert [(cache.identity, cache.entries) for cache in remaining] == [(ten, 2)]


@pytest.mark.parametrize(
    "kinds",
    [["model"], ["tool"], ["decision"], ["result"], ["model", "result"], ["model", "decision", "tool", "result"]],
    ids="+".join,
)
def test_catalog_counts_every_entry_kind_as_the_reader_numbers_them(tmp_path: Path, kinds: list[str]) -> None:
    # A folder holding only the recorded output is what a deletion cut short after success leaves: gc's
    # very subject. The catalog and the reader follow the entry format's one rule for entry names.
    base = tmp_path / "cache"
    identity = TaskIdentity("d", "r", "t", -1)
    store = StepStore.for_task(fsspec.filesystem("file"), str(base), f"file://{base}", identity)
    for number, kind in enumerate(kinds, start=1):
        key = "output" if kind == "result" else f"{number:064x}"
        store.put(StepEntry(kind=kind, key=key, step=1, attempt=1, label="x", payload={"value": "y" * number}))  # type: ignore[arg-type]
    store.write_note(".attempt-00001", b"{}")  # a per-try note is no entry

    [cache] = list_caches(fsspec.filesystem("file"), str(base), f"file://{base}")

    steps = CacheReader(store).steps()
    assert cache.entries == len(steps) == len(kinds)
    assert cache.size == sum(step.size for step in steps)
    assert (cache.model_steps, cache.tool_steps) == (kinds.count("model"), kinds.count("tool"))
