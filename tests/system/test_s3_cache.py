"""The durable cache on a real S3 protocol server (moto), within one worker and across two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states
from tests.helpers.operator_runs import durable_operator

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.s3


def test_s3_cache_replays_and_is_deleted_after_success(airflow_db, s3_bucket, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", s3_bucket.url("agent-cache"))
    calls: dict[str, int] = {"fetch": 0, "notify": 0}
    keys_between_tries: list[str] = []

    def fetch_ticket(ticket_id: int) -> str:
        """Fetch."""
        calls["fetch"] += 1
        return "ticket"

    def notify_team(ticket_id: int) -> str:
        """Notify."""
        calls["notify"] += 1
        if current_try() == 1:
            raise ConnectionError("down")
        return "posted"

    def snapshot(context: Any) -> None:
        keys_between_tries.extend(s3_bucket.list_keys())

    with make_dag("s3.cache-dag") as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage 42.", on_retry_callback=snapshot)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    prefix = f"agent-cache/s3.cache-dag/{dr.run_id}/triage/-1/"
    steps = [key for key in keys_between_tries if not key[len(prefix) :].startswith(".")]
    # The failed try packed its two steps (one model answer, one tool call) into one object.
    [pack] = steps
    assert pack.startswith(prefix) and pack.endswith("-m1-t1-n2.pack"), steps
    # Beside the steps: try 1's record (its summary line and how it ended, for the UI view); it goes with the cache.
    assert sorted(set(keys_between_tries) - set(steps)) == [f"{prefix}.attempt-00001", f"{prefix}.attempt-00001.end"]
    assert "Durable: replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)" in out
    assert f"Durable: the cache of this task instance is s3://s3_test@{s3_bucket.name}/{prefix}" in out
    assert calls == {"fetch": 1, "notify": 2}
    assert s3_bucket.list_keys() == [], "nothing is left in the bucket after success"


def _worker(tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "airflow-home"  # one metadata DB, as workers of one deployment share it
    (home / "dags").mkdir(parents=True, exist_ok=True)
    child_env = {
        **os.environ,
        **env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "PYTHONPATH": str(REPO_ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.helpers.worker"],
        cwd=REPO_ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_retry_on_another_worker_replays_from_the_shared_bucket(s3_bucket, tmp_path):
    from tests.helpers.s3 import S3Bucket

    marker = tmp_path / "tool-calls.txt"
    shared = {
        "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": s3_bucket.url("agent-cache"),
        f"AIRFLOW_CONN_{S3Bucket.CONN_ID.upper()}": os.environ[f"AIRFLOW_CONN_{S3Bucket.CONN_ID.upper()}"],
        "TOOL_MARKER": str(marker),
    }

    first = _worker(tmp_path, "worker-a", {**shared, "FAIL_NOTIFY": "1", "WORKER_TRY": "1"})
    assert "WORKER RESULT" in first.stdout, first.stdout[-3000:] + first.stderr[-3000:]
    assert "state=failed" in first.stdout
    run_id = first.stdout.split("WORKER RESULT run_id=")[1].split()[0]
    prefix = f"agent-cache/cross_worker.dag-1/{run_id}/triage.ticket-42/-1/"
    after_first = [key for key in s3_bucket.list_keys() if not key.startswith(f"{prefix}.attempt-")]
    # The failed try packed its two steps into one object.
    assert len(after_first) == 1 and after_first[0].startswith(prefix) and after_first[0].endswith("-n2.pack")
    records = [f"{prefix}.attempt-00001", f"{prefix}.attempt-00001.end"]
    assert s3_bucket.list_keys() == sorted([*after_first, *records]), "and worker-a's record"
    stored = list(json.loads(s3_bucket.read(after_first[0]))["entries"].values())
    assert sorted(entry["kind"] for entry in stored) == ["model", "tool"]
    assert all(entry["attempt"] == 1 for entry in stored)

    second = _worker(tmp_path, "worker-b", {**shared, "WORKER_TRY": "2"})
    assert f"WORKER RESULT run_id={run_id} state=success try=2" in second.stdout, (
        second.stdout[-3000:] + second.stderr[-3000:]
    )
    assert "Durable: replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)" in second.stdout
    calls = marker.read_text().splitlines()
    # fetch_ticket ran once, on worker A; notify_team ran on both (it failed on A).
    assert [line.split()[0] for line in calls].count("fetch_ticket") == 1
    assert [line.split()[0] for line in calls].count("notify_team") == 2
    assert s3_bucket.list_keys() == []


class _CountingFS:
    """Delegates to an fsspec filesystem and counts the calls the store makes."""

    def __init__(self, fs: Any) -> None:
        self._fs = fs
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._fs, name)
        if not callable(attribute):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return attribute(*args, **kwargs)

        return counted


def test_loading_a_large_cache_lists_once_and_fetches_in_one_batch(s3_bucket):
    from airflow.sdk import ObjectStoragePath
    from tests.helpers.durable import task_identity

    from airflow_pydantic_ai.durable import StepStore
    from airflow_pydantic_ai.durable.storage.entry import StepEntry

    base = ObjectStoragePath(s3_bucket.url("agent-cache"))
    identity = task_identity("dag.x", "task-y", map_index=3)
    writer = StepStore.for_task(base.fs, base.path, str(base), identity)
    for index in range(60):
        writer.put(StepEntry(kind="tool", key=f"{index:064x}", step=1, attempt=1, label="t", payload={"i": index}))
    assert writer.objects_written == 60
    assert len(s3_bucket.list_keys("agent-cache/dag.x/manual__2026-11-22T04:00:00+00:00/task-y/3/")) == 60

    counting = _CountingFS(base.fs)
    reader = StepStore.for_task(counting, base.path, str(base), identity)
    loaded = reader.load()
    assert len(loaded.entries) == 60 and not loaded.skipped
    assert counting.calls.get("ls") == 1
    assert counting.calls.get("cat") == 1, "one batched (concurrent on s3fs) fetch, not one round trip per step"
    assert not counting.calls.get("cat_file") and not counting.calls.get("open")
