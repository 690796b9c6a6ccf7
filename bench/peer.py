"""Side by side with the peer, apache-airflow-providers-common-ai, on the same local S3 server, in one run.

``python -m bench --side-by-side`` (``make bench-peer``). The peer is never a dependency of this project:
it is installed with ``--no-deps`` into ``bench/.peer/`` (git-ignored; ``make bench-peer`` does it), and
this module adds that folder to ``sys.path`` only when asked to compare. Its own modules run unchanged:
``DurableJournal`` + ``AirflowDurability`` on its ``DurableStorage`` (the object-storage journal it uses
below Airflow 3.3), which reads ``[common.ai] durable_cache_path`` through Airflow's ``ObjectStoragePath``.

Each repetition of a cell (N sequential tool steps of S bytes, on S3):

- a plain run (no durability), shared by both;
- ours, as the operator runs a try that fails after its agent finished (the XCom push): probe, load,
  record every step, pack, note; then the retry: probe, load, replay every step, record the output,
  note; then the cleanup after success;
- the peer: a journal that records every step; a fresh journal that replays it; its cleanup.

Requests are counted on the server (every request moto answers, whoever sent it: the peer's
``ObjectStoragePath`` builds its own S3 client), by S3 operation.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airflow_pydantic_ai.durable import Attempt, AttemptOptions, TaskIdentity, run_agent
from bench.report import table
from bench.runner import quiet_logger, run_plain
from bench.storage import BUCKET, S3Backend
from bench.workload import NO_LIMITS, PROMPT, Workload

__all__ = ["PEER_PATH", "PeerCell", "peer_available", "render_side_by_side", "run_side_by_side"]

PEER_PATH = Path(__file__).resolve().parent / ".peer"
"""Where ``make bench-peer`` installs the peer (``uv pip install --no-deps --target bench/.peer ...``)."""
_CONNECTION = "durable_bench_s3"
_READS = ("ListObjectsV2", "ListObjects", "GetObject", "HeadObject")


def peer_available(path: Path = PEER_PATH) -> str | None:
    """The peer's version when it can be imported from ``path``; None otherwise."""
    if str(path) not in sys.path and path.is_dir():
        sys.path.append(str(path))
    try:
        from airflow.providers.common.ai.durable.journal import DurableJournal  # noqa: F401
    except ImportError:
        return None
    for info in path.glob("apache_airflow_providers_common_ai-*.dist-info"):
        return info.name.removesuffix(".dist-info").split("-")[1]
    return "unknown"


@dataclass
class Phase:
    """One phase of one repetition: its wall time and the requests the server answered meanwhile."""

    wall: float
    requests: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.requests.values())


@dataclass
class PeerRepetition:
    plain: float
    ours_record: Phase
    ours_pack: float
    ours_replay: Phase
    ours_cleanup: Phase
    peer_record: Phase
    peer_replay: Phase
    peer_cleanup: Phase


@dataclass
class PeerCell:
    workload: Workload
    repetitions: list[PeerRepetition] = field(default_factory=list)

    def median(self, pick: Callable[[PeerRepetition], float]) -> float:
        return statistics.median(pick(rep) for rep in self.repetitions)

    def summary(self) -> dict[str, Any]:
        plain = self.median(lambda rep: rep.plain)
        last = self.repetitions[-1]
        row: dict[str, Any] = {"steps": self.workload.steps, "size": self.workload.size, "reps": len(self.repetitions)}
        row["plain_wall"] = plain
        for who in ("ours", "peer"):
            for phase in ("record", "replay", "cleanup"):
                wall = self.median(lambda rep, name=f"{who}_{phase}": getattr(rep, name).wall)
                row[f"{who}_{phase}_wall"] = wall
                row[f"{who}_{phase}_requests"] = dict(getattr(last, f"{who}_{phase}").requests)
            row[f"{who}_record_ratio"] = row[f"{who}_record_wall"] / plain
            row[f"{who}_replay_ratio"] = row[f"{who}_replay_wall"] / plain
        row["ours_pack_wall"] = self.median(lambda rep: rep.ours_pack)
        return row

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(), "repetitions": [asdict(rep) for rep in self.repetitions]}


def _configure_peer(backend: S3Backend) -> None:
    """The peer's settings: its cache path on the bench bucket, through an Airflow connection in the environment."""
    os.environ[f"AIRFLOW_CONN_{_CONNECTION.upper()}"] = json.dumps(
        {
            "conn_type": "aws",
            "login": "bench",
            "password": "bench",
            "extra": {"endpoint_url": backend.endpoint, "region_name": "us-east-1"},
        }
    )
    # The amazon provider's filesystem here falls back to the environment for the credentials and the
    # endpoint (moto takes any credentials); both point at the same local server.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ["AWS_ENDPOINT_URL_S3"] = backend.endpoint
    os.environ["AIRFLOW__COMMON_AI__DURABLE_CACHE_PATH"] = f"s3://{_CONNECTION}@{BUCKET}/peer"


def _measure(backend: S3Backend, action: Callable[[], Any]) -> tuple[Phase, Any]:
    gc.collect()
    before = Counter(backend.served)
    started = time.perf_counter()
    result = action()
    wall = time.perf_counter() - started
    return Phase(wall=wall, requests=dict(Counter(backend.served) - before)), result


class _PushFailed(Exception):
    """The try failed after its agent finished (as when the XCom push fails): the run ends without success."""


def _ours(backend: S3Backend, workload: Workload, identity: TaskIdentity) -> tuple[Phase, float, Phase, Phase]:
    log, _ = quiet_logger()
    store = backend.store_for(identity, warn=log.warning)
    packed: list[float] = []

    real_pack = store.pack

    def timed_pack(attempt: int) -> str | None:
        started = time.perf_counter()
        try:
            return real_pack(attempt)
        finally:
            packed.append(time.perf_counter() - started)

    store.pack = timed_pack  # type: ignore[method-assign]  # the pack's own time, reported apart

    def failed_try() -> Attempt:
        run = Attempt.open(store, attempt=1, log=log, options=AttemptOptions(probe=True))
        try:
            with run.ending():
                run_agent(run, workload.build_agent(), PROMPT, usage_limits=NO_LIMITS)
                raise _PushFailed  # ending() packs what the try recorded, then writes its note
        except _PushFailed:
            pass
        return run

    def retry() -> Attempt:
        run = Attempt.open(store, attempt=2, log=log, options=AttemptOptions(probe=True))
        with run.ending():
            result = run_agent(run, workload.build_agent(), PROMPT, usage_limits=NO_LIMITS)
            run.record_output(result.output)
        return run

    record, first = _measure(backend, failed_try)
    assert first.stats.executed.total == workload.model_requests + workload.tool_calls, first.stats.summary()
    replay, second = _measure(backend, retry)
    assert second.stats.replayed.total == workload.model_requests + workload.tool_calls, second.stats.summary()
    assert second.stats.executed.total == 0, second.stats.summary()
    cleanup, _ = _measure(backend, second.finish)
    assert not store.exists(), "the cache is deleted"
    return record, packed[0], replay, cleanup


def _peer(workload: Workload, identity: TaskIdentity, backend: S3Backend) -> tuple[Phase, Phase, Phase]:
    from airflow.providers.common.ai.durable.capability import AirflowDurability
    from airflow.providers.common.ai.durable.journal import DurableJournal, journal_scope
    from airflow.providers.common.ai.durable.storage import DurableStorage

    def journal() -> Any:
        storage = DurableStorage(
            dag_id=identity.dag_id, task_id=identity.task_id, run_id=identity.run_id, map_index=identity.map_index
        )
        return DurableJournal(storage)

    def attempt(journal: Any) -> Any:
        with journal_scope(journal):
            return workload.build_agent().run_sync(
                PROMPT, usage_limits=NO_LIMITS, capabilities=[AirflowDurability(name="bench")]
            )

    first, second = journal(), journal()
    record, _ = _measure(backend, lambda: attempt(first))
    steps = workload.model_requests + workload.tool_calls
    assert first.stats.recorded.total() == steps, first.stats.recorded
    replay, _ = _measure(backend, lambda: attempt(second))
    assert second.stats.replayed.total() == steps and not second.stats.recorded.total(), second.stats.replayed
    cleanup, _ = _measure(backend, second.cleanup)
    return record, replay, cleanup


def run_side_by_side(
    steps: list[int], size: int, reps: dict[int, int], progress: Callable[[str], None]
) -> tuple[list[PeerCell], dict[str, Any]]:
    """Every cell, both sides in each repetition, on one moto server; returns the cells and the environment."""
    version = peer_available()
    if version is None:
        raise SystemExit(
            f"the peer is not installed in {PEER_PATH}: run `make bench-peer` (it installs "
            "apache-airflow-providers-common-ai there with --no-deps, never into the project's environment)"
        )
    backend = S3Backend()
    cells: list[PeerCell] = []
    try:
        _configure_peer(backend)
        warm = Workload(3, size)
        _ours(backend, warm, TaskIdentity("bench_peer", "warmup", "agent", -1))
        _peer(warm, TaskIdentity("bench_peer", "warmup", "agent", -1), backend)
        gc.collect()
        gc.freeze()
        for count in steps:
            workload = Workload(count, size)
            cell = PeerCell(workload)
            for rep in range(reps.get(count, 1)):
                identity = TaskIdentity("bench_peer", f"manual__n{count}-rep{rep}", "agent", -1)
                plain, _, _ = run_plain(workload)
                ours = _ours(backend, workload, identity)
                peer = _peer(workload, identity, backend)
                cell.repetitions.append(PeerRepetition(plain, *ours, *peer))
            summary = cell.summary()
            progress(
                f"  side by side N={count}: record x{summary['ours_record_ratio']:.2f} vs "
                f"x{summary['peer_record_ratio']:.2f}, replay x{summary['ours_replay_ratio']:.2f} vs "
                f"x{summary['peer_replay_ratio']:.2f}, cleanup {summary['ours_cleanup_wall'] * 1e3:.0f} ms vs "
                f"{summary['peer_cleanup_wall'] * 1e3:.0f} ms"
            )
            cells.append(cell)
    finally:
        backend.close()
    return cells, {"peer": "apache-airflow-providers-common-ai", "peer_version": version}


def _requests(requests: dict[str, int]) -> str:
    total = sum(requests.values())
    short = {"ListObjectsV2": "LIST", "GetObject": "GET", "PutObject": "PUT", "DeleteObject": "DELETE"}
    short |= {"DeleteObjects": "batch DELETE", "HeadObject": "HEAD"}
    parts = ", ".join(f"{count} {short.get(name, name)}" for name, count in sorted(requests.items()) if count)
    return f"{total} ({parts})" if parts else "0"


def render_side_by_side(cells: list[PeerCell], peer_version: str, style: str = "rst") -> str:
    """Two tables: the times (x the plain run) and the requests each phase sent, ours vs the peer's, per cell."""
    peer = f"common.ai {peer_version}"
    timing = []
    wire = []
    for cell in cells:
        s = cell.summary()
        for who, name in (("ours", "this project"), ("peer", peer)):
            timing.append(
                [
                    str(s["steps"]),
                    name,
                    str(s["reps"]),
                    f"{s['plain_wall']:.3f}",
                    f"{s[f'{who}_record_wall']:.3f} (x{s[f'{who}_record_ratio']:.1f})",
                    f"{s[f'{who}_replay_wall']:.3f} (x{s[f'{who}_replay_ratio']:.1f})",
                    f"{s[f'{who}_cleanup_wall'] * 1e3:.0f}",
                ]
            )
            reads = sum(s[f"{who}_replay_requests"].get(op, 0) for op in _READS)
            wire.append(
                [
                    str(s["steps"]),
                    name,
                    _requests(s[f"{who}_replay_requests"]),
                    str(reads),
                    _requests(s[f"{who}_cleanup_requests"]),
                ]
            )
    return "\n\n".join(
        [
            table(
                ["N", "who", "reps", "plain s", "record s (x plain)", "replay s (x plain)", "cleanup ms"],
                timing,
                style,
            ),
            table(["N", "who", "requests in the replay", "of which reads", "requests of the cleanup"], wire, style),
        ]
    )
