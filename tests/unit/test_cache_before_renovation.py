"""A cache written before the durable core was renovated (``tests/fixtures/cache_0_2_0``) replays, and reads, today."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.cache_fixture import replay_the_fixture
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable import CacheReader, StepStore

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cache_0_2_0"
IDENTITY = task_identity("fixture_dag", "triage", run_id="manual__2026-11-24T10:00:00+00:00")


def _store(base: Path, log: RecordingLog) -> StepStore:
    shutil.copytree(FIXTURE / "fixture_dag", base / "fixture_dag")
    return local_store(base, IDENTITY, warn=log.warning)


def test_a_cache_written_before_the_renovation_replays_every_step(tmp_path: Path) -> None:
    log = RecordingLog()
    replay_the_fixture(_store(tmp_path, log), log)


def test_the_read_side_lists_a_cache_written_before_the_renovation(tmp_path: Path) -> None:
    steps = CacheReader(_store(tmp_path, RecordingLog())).steps()

    assert [(step.number, step.kind, step.name, step.attempt) for step in steps] == [
        (1, "model", "test:test", 1),
        (2, "tool", "fetch_ticket", 1),
        (3, "tool", "flaky_lookup", 1),
        (4, "model", "test:test", 1),
        (5, "tool", "flaky_lookup", 1),
        (6, "model", "test:test", 1),
        (7, "output", "file_triage", 1),
    ]
    assert all(step.recorded_at is not None for step in steps)
    assert all(step.call_id for step in steps if step.kind != "model")
