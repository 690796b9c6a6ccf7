"""A cache written before the durable core was renovated (``tests/fixtures/cache_0_2_0``) replays, and reads, today."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
from tests.helpers.cache_fixture import Triage, fixture_agent
from tests.helpers.compat import requires_pydantic_ai

from airflow_pydantic_ai.durable import CacheReader, DurableRun, StepStore, TaskIdentity, run_agent

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cache_0_2_0"
IDENTITY = TaskIdentity("fixture_dag", "manual__2026-11-24T10:00:00+00:00", "triage", -1)


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _add(self, level: str, msg: str, *args: object) -> None:
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg: str, *args: object, **_: object) -> None:
        self._add("info", msg, *args)

    def warning(self, msg: str, *args: object, **_: object) -> None:
        self._add("warning", msg, *args)

    def error(self, msg: str, *args: object, **_: object) -> None:
        self._add("error", msg, *args)

    def debug(self, msg: str, *args: object, **_: object) -> None:
        self._add("debug", msg, *args)


def _store(base: Path, log: _Log) -> StepStore:
    shutil.copytree(FIXTURE / "fixture_dag", base / "fixture_dag")
    return StepStore.for_task(fsspec.filesystem("file"), str(base), f"file://{base}", IDENTITY, warn=log.warning)


@requires_pydantic_ai("2.68.0", "replaying a cache recorded under pydantic-ai-slim 2.68.0 (its message fields)")
def test_a_cache_written_before_the_renovation_replays_every_step(tmp_path: Path) -> None:
    log = _Log()
    run = DurableRun.open(_store(tmp_path, log), attempt=2, log=log)
    calls: list[str] = []

    with run.ending():
        result = run_agent(run, fixture_agent(calls), "triage")

    assert calls == [], log.lines  # no tool and no output function ran again
    assert result.output == Triage(priority=0, summary="a")
    assert (
        "info",
        "Durable: replayed 7 cached steps (3 model, 4 tool), executed 0 new steps (0 model, 0 tool)",
    ) in log.lines
    assert not [line for level, line in log.lines if level in ("warning", "error")]


def test_the_read_side_lists_a_cache_written_before_the_renovation(tmp_path: Path) -> None:
    steps = CacheReader(_store(tmp_path, _Log())).steps()

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
