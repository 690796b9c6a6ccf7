"""One benchmark cell: a plain run, a recording run and a full replay, repeated, on each backend."""

from __future__ import annotations

import gc
import logging
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic_ai.agent import AgentRunResult

from airflow_pydantic_ai.durable import Attempt, AttemptOptions, TaskIdentity, run_agent
from bench.probes import FingerprintProbe
from bench.storage import Backend, FloorResult
from bench.workload import NO_LIMITS, PROMPT, Workload, tool_results_digest

__all__ = ["CellResult", "Repetition", "quiet_logger", "run_cell"]


class _Collect(logging.Handler):
    """Keeps the warnings a run logs: a benchmark run should log none."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def quiet_logger() -> tuple[logging.Logger, _Collect]:
    """A logger at WARNING: the per-step INFO lines are not what is timed (their cost is reported apart)."""
    logger = logging.getLogger("bench.durable")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    collect = _Collect()
    logger.addHandler(collect)
    return logger, collect


@dataclass
class Repetition:
    """What one repetition measured on one backend."""

    plain_wall: float
    record_wall: float
    replay_wall: float
    load_wall: float
    bytes_written: int
    objects_written: int
    stored_bytes: int
    write_requests: int
    replay_bytes_read: int
    replay_read_requests: int
    fingerprint_record: list[float]
    fingerprint_replay: list[float]


@dataclass
class CellResult:
    backend: str
    workload: Workload
    repetitions: list[Repetition] = field(default_factory=list)
    floors: list[FloorResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def median(self, pick: Callable[[Repetition], float]) -> float:
        return statistics.median(pick(rep) for rep in self.repetitions)

    def floor_median(self, pick: Callable[[FloorResult], float]) -> float:
        return statistics.median(pick(floor) for floor in self.floors)

    def fingerprint(self, phase: str) -> dict[str, float]:
        """Medians over repetitions of CPU seconds per step (all, first 10 %, last 10 %) and in total."""
        probes = [FingerprintProbe(steps=getattr(rep, f"fingerprint_{phase}")) for rep in self.repetitions]
        return {
            "total": statistics.median(probe.total for probe in probes),
            "per_step": statistics.median(probe.total / len(probe.steps) for probe in probes),
            "first_10pct": statistics.median(probe.window(first=True) for probe in probes),
            "last_10pct": statistics.median(probe.window(first=False) for probe in probes),
        }

    def summary(self) -> dict[str, Any]:
        plain = self.median(lambda rep: rep.plain_wall)
        record = self.median(lambda rep: rep.record_wall)
        replay = self.median(lambda rep: rep.replay_wall)
        floor_bytes = self.floors[0].bytes_written if self.floors else 0
        written = self.median(lambda rep: rep.bytes_written)
        return {
            "backend": self.backend,
            "steps": self.workload.steps,
            "size": self.workload.size,
            "parallel": self.workload.parallel,
            "at_most_once": self.workload.at_most_once,
            "reps": len(self.repetitions),
            "plain_wall": plain,
            "record_wall": record,
            "replay_wall": replay,
            "load_wall": self.median(lambda rep: rep.load_wall),
            "record_ratio": record / plain,
            "replay_ratio": replay / plain,
            "bytes_written": written,
            "floor_bytes": floor_bytes,
            "bytes_ratio": written / floor_bytes if floor_bytes else None,
            "objects_written": self.median(lambda rep: rep.objects_written),
            "write_requests": self.median(lambda rep: rep.write_requests),
            "replay_bytes_read": self.median(lambda rep: rep.replay_bytes_read),
            "replay_read_requests": self.median(lambda rep: rep.replay_read_requests),
            "floor_write_wall": self.floor_median(lambda floor: floor.write_wall) if self.floors else None,
            "floor_read_wall": self.floor_median(lambda floor: floor.read_wall) if self.floors else None,
            "floor_write_requests": self.floors[0].write_requests if self.floors else None,
            "floor_read_requests": self.floors[0].read_requests if self.floors else None,
            "fingerprint_record": self.fingerprint("record"),
            "fingerprint_replay": self.fingerprint("replay"),
            "warnings": len(self.warnings),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "repetitions": [asdict(rep) for rep in self.repetitions],
            "floors": [asdict(floor) for floor in self.floors],
            "warnings": self.warnings[:20],
        }


def _timed_run(agent: Any) -> tuple[float, Any]:
    gc.collect()
    started = time.perf_counter()
    result = agent.run_sync(PROMPT, usage_limits=NO_LIMITS)
    return time.perf_counter() - started, result


# What a task does before storing each step: search every string of the entry for the values registered
# with Airflow's secrets masker (its ``replacer``: an alternation of the escaped secrets). Three here.
_REGISTERED_SECRETS = re.compile(
    "|".join(re.escape(secret) for secret in ("sk-live-4f1c9a", "hunter2-prod", "AKIA0EXAMPLE"))
)


def mask_registered_secrets(value: Any) -> Any:
    """Text, or every string of a structure (an at-most-once call's arguments), with the secrets masked."""
    if isinstance(value, str):
        return _REGISTERED_SECRETS.sub("***", value)
    if isinstance(value, dict):
        return {key: mask_registered_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_registered_secrets(item) for item in value)
    return value


def run_plain(workload: Workload) -> tuple[float, str, str]:
    agent = workload.build_agent()
    wall, result = _timed_run(agent)
    return wall, result.output, tool_results_digest(result.all_messages())


def run_durable(
    backend: Backend,
    workload: Workload,
    identity: TaskIdentity,
    *,
    plain_wall: float,
    expected: tuple[str, str] | None,
    probe: FingerprintProbe,
    log: logging.Logger,
) -> Repetition:
    """Record on an empty cache (attempt 1), then replay all of it (attempt 2), then delete it."""
    agent = workload.build_agent()
    store = backend.store_for(identity, warn=log.warning)
    assert not store.exists(), f"{store.location} is not empty"

    # Attempt 1: empty cache, every step runs live and is recorded.
    backend.reset_counters()
    probe.reset()
    gc.collect()
    started = time.perf_counter()
    run = Attempt.open(
        store,
        attempt=1,
        log=log,
        options=AttemptOptions(redact=mask_registered_secrets, fingerprinter=probe.fingerprinter()),
    )
    result = run_agent(run, agent, PROMPT, usage_limits=NO_LIMITS)
    record_wall = time.perf_counter() - started
    assert isinstance(result, AgentRunResult), result
    fingerprint_record = list(probe.steps)
    write_requests = backend.write_requests(store)
    # An at-most-once tool's call also writes its start mark.
    entries = workload.model_requests + workload.tool_calls * (2 if workload.at_most_once else 1)
    executed, replayed, not_persisted = run.stats.executed, run.stats.replayed, run.writer.not_persisted
    assert (executed.model, executed.tool) == (workload.model_requests, workload.tool_calls), executed
    assert replayed.total == 0 and not_persisted == 0, (replayed, not_persisted)
    assert store.objects_written == entries, (store.objects_written, entries)
    recorded = (result.output, tool_results_digest(result.all_messages()))
    assert expected is None or recorded == expected, (recorded, expected)
    expected = recorded
    assert len(fingerprint_record) == workload.model_requests, len(fingerprint_record)
    stored_bytes = backend.stored_bytes(store)
    assert stored_bytes == store.bytes_written, (stored_bytes, store.bytes_written)

    # Attempt 2: the same run on that cache replays every step, the final answer included, and runs nothing.
    agent = workload.build_agent()
    backend.reset_counters()
    probe.reset()
    gc.collect()
    started = time.perf_counter()
    replay = Attempt.open(
        store,
        attempt=2,
        log=log,
        options=AttemptOptions(redact=mask_registered_secrets, fingerprinter=probe.fingerprinter()),
    )
    load_wall = time.perf_counter() - started
    result = run_agent(replay, agent, PROMPT, usage_limits=NO_LIMITS)
    replay_wall = time.perf_counter() - started
    assert isinstance(result, AgentRunResult), result
    fingerprint_replay = list(probe.steps)
    read_requests = backend.read_requests()
    replayed = replay.stats.replayed
    assert (replayed.model, replayed.tool) == (workload.model_requests, workload.tool_calls), replayed
    assert replay.stats.executed.total == 0, replay.stats.executed
    assert (result.output, tool_results_digest(result.all_messages())) == expected
    assert run.stats.bytes_read == 0, run.stats.bytes_read
    assert replay.stats.bytes_read == store.bytes_written, (replay.stats.bytes_read, store.bytes_written)
    assert len(replay.entries) == entries and not replay.stats.entries_skipped, replay.stats.entries_skipped

    store.clear()
    return Repetition(
        plain_wall=plain_wall,
        record_wall=record_wall,
        replay_wall=replay_wall,
        load_wall=load_wall,
        bytes_written=store.bytes_written,
        objects_written=store.objects_written,
        stored_bytes=stored_bytes,
        write_requests=write_requests,
        replay_bytes_read=replay.stats.bytes_read,
        replay_read_requests=read_requests,
        fingerprint_record=fingerprint_record,
        fingerprint_replay=fingerprint_replay,
    )


def run_cell(
    backends: Sequence[Backend],
    workload: Workload,
    reps: dict[str, int],
    *,
    floor_reps: dict[str, int],
    probe: FingerprintProbe,
    tag: str,
    progress: Callable[[str], None],
) -> list[CellResult]:
    """Rounds of: one plain run, then record + replay on each backend that still has repetitions to do.

    ``reps`` and ``floor_reps`` are per backend name; a backend with 0 repetitions is skipped.
    """
    log, collected = quiet_logger()
    active = [backend for backend in backends if reps.get(backend.name, 0) > 0]
    cells = {backend.name: CellResult(backend=backend.name, workload=workload) for backend in active}
    for rep in range(max((reps[backend.name] for backend in active), default=0)):
        plain_wall, output, digest = run_plain(workload)
        for backend in active:
            if rep >= reps[backend.name]:
                continue
            identity = TaskIdentity("bench_durable", f"manual__{tag}-rep{rep}", "agent", -1)
            collected.messages.clear()
            repetition = run_durable(
                backend,
                workload,
                identity,
                plain_wall=plain_wall,
                expected=(output, digest),
                probe=probe,
                log=log,
            )
            cells[backend.name].repetitions.append(repetition)
            cells[backend.name].warnings.extend(collected.messages)
    for backend in active:
        cell = cells[backend.name]
        for rep in range(max(1, floor_reps.get(backend.name, 1))):
            root = f"{backend.base}/floor/{tag}-{rep}"
            cell.floors.append(backend.floor(root, workload.tool_calls, workload.size))
        summary = cell.summary()
        progress(
            f"  {backend.name:4} N={workload.steps:<3} S={workload.size // 1024:>2} KiB x{workload.parallel}: "
            f"plain {summary['plain_wall']:.3f} s, record x{summary['record_ratio']:.2f}, "
            f"replay x{summary['replay_ratio']:.2f}, bytes x{summary['bytes_ratio']:.3f} of the floor"
        )
    return list(cells.values())


class _TimedFileHandler(logging.FileHandler):
    """A log file handler that keeps the time it spends formatting and writing."""

    seconds = 0.0

    def handle(self, record: logging.LogRecord) -> bool:
        started = time.perf_counter()
        try:
            return bool(super().handle(record))
        finally:
            self.seconds += time.perf_counter() - started


def run_with_logging(
    backend: Backend, workload: Workload, identity: TaskIdentity, log_path: str, probe: FingerprintProbe
) -> dict[str, Any]:
    """Record + replay once with the per-step INFO lines on, written to a log file as a task log is.

    Its walls are compared with the cell's medians at WARNING; the handler's own time is the direct
    measure of what the lines cost (the difference of walls is within the machine's noise).
    """
    logger = logging.getLogger("bench.durable.info")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = _TimedFileHandler(log_path, mode="w")
    handler.setFormatter(logging.Formatter("[%(asctime)s] {%(filename)s:%(lineno)d} %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    try:
        repetition = run_durable(
            backend,
            workload,
            identity,
            plain_wall=float("nan"),
            expected=None,
            probe=probe,
            log=logger,  # type: ignore[arg-type]
        )
    finally:
        logger.removeHandler(handler)
        handler.close()
    with open(log_path, encoding="utf-8") as file:
        lines = sum(1 for _ in file)
    return {
        "backend": backend.name,
        "steps": workload.steps,
        "size": workload.size,
        "parallel": workload.parallel,
        "record_wall": repetition.record_wall,
        "replay_wall": repetition.replay_wall,
        "log_lines": lines,
        "handler_seconds": handler.seconds,
    }
