"""Issue 35 (8): deleting a cache (after success, ``cache rm``, ``gc``, the view) never follows a symbolic link.

A link planted inside the cache folder is removed as a link; a cache folder reached through a linked run folder
is refused with an error naming the link. Either way the files the link points to survive.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable.attempt.cleanup import delete_after_success
from airflow_pydantic_ai.durable.errors import OutsideCacheBase
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.storage.entry import StepEntry

IDENTITY = task_identity("dag", "task")


def _entry(step: int) -> StepEntry:
    return StepEntry(kind="tool", key=f"k{step}", step=step, attempt=1, label="lookup", payload={"n": step})


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """Files outside the cache base that a link may point to: they must survive every deletion."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    (folder / ".attempt-1").write_text("keep me too")
    return folder


def _survives(folder: Path) -> None:
    assert (folder / "precious.txt").read_text() == "keep me"
    assert (folder / ".attempt-1").read_text() == "keep me too"


def test_a_link_planted_inside_the_cache_is_removed_never_followed(tmp_path: Path, elsewhere: Path) -> None:
    store = local_store(tmp_path / "base", IDENTITY)
    store.put(_entry(1))
    store.put(_entry(2))
    root = Path(store.root)
    (root / "planted").symlink_to(elsewhere, target_is_directory=True)
    (root / ".attempt-9").symlink_to(elsewhere / ".attempt-1")

    CacheReader(store).delete_all()  # cache rm and the view's delete

    _survives(elsewhere)
    assert not list(root.glob("*.json")), "the cache's own entries are deleted"
    assert not (root / ".attempt-9").is_symlink(), "a link with a note's name is removed as a link"


def test_a_cache_reached_through_a_linked_run_folder_is_not_deleted(tmp_path: Path, elsewhere: Path) -> None:
    base = tmp_path / "base"
    store = local_store(base, IDENTITY)
    run_folder = Path(store.root).parent.parent
    real = elsewhere / "run"
    run_folder.parent.mkdir(parents=True)
    real.mkdir()
    run_folder.symlink_to(real, target_is_directory=True)  # the run folder points elsewhere
    store.put(_entry(1))
    (Path(store.root) / "precious.txt").write_text("keep me")
    (Path(store.root) / ".attempt-1").write_text("keep me too")
    recorded = sorted(path.name for path in Path(store.root).iterdir())

    with pytest.raises(OutsideCacheBase, match="is a symbolic link"):
        CacheReader(store).delete_all()
    log = RecordingLog()
    delete_after_success(store, {}, [], log)  # the success cleanup says so and deletes nothing

    assert any("could not be deleted" in line and "symbolic link" in line for line in log.at("error"))
    assert sorted(path.name for path in Path(store.root).iterdir()) == recorded
    _survives(Path(store.root))
