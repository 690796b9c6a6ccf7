"""One durable AgentOperator run under Airflow's real scheduler, dag-processor and api-server.

Unlike ``dag.test()`` (tests/dags/test_operator_replay.py), each try runs in a fresh task
process started by the LocalExecutor, so nothing but the durable cache on disk carries the
first try's work over to the retry.

Slow (about half a minute): deselect with ``-m "not scheduler"`` or set
``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.standalone import AirflowCluster, durable_cluster
from tests.helpers.task_logs import log_events, summaries

pytestmark = pytest.mark.scheduler  # skipped when AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1 (conftest.py)

DAG_FILE = Path(__file__).parent / "dags" / "durable_scheduler_dag.py"
DAG_ID = "durable_real_scheduler"  # as in DAG_FILE
TASK_ID = "triage"

RUN_TIMEOUT = 90  # seconds from trigger to a finished run; it takes about 8-13 s


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AirflowCluster]:
    with durable_cluster(tmp_path, DAG_FILE, {"DURABLE_E2E_MARKER": str(tmp_path / "tool-calls.txt")}) as cluster:
        yield cluster


def test_retry_in_a_fresh_process_replays_the_recorded_steps(cluster: AirflowCluster, tmp_path: Path):
    cluster.wait_for_dag(DAG_ID, timeout=30)
    started = time.monotonic()
    run_id = cluster.trigger(DAG_ID)
    state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    print(f"run {run_id} finished {state!r} {time.monotonic() - started:.1f} s after the trigger")

    logs = {try_number: cluster.task_log(DAG_ID, run_id, TASK_ID, try_number) for try_number in (1, 2)}
    context = f"\ntask logs: {[str(path) for path in logs.values()]}\n{cluster.tails()}"
    assert state == "success", context
    ti = cluster.task_instance(DAG_ID, run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("success", 2), context
    assert all(path.exists() for path in logs.values()), context

    try1, try2 = log_events(logs[1]), log_events(logs[2])
    # fetch_ticket returns a class the DAG file defines: recorded in one task process, replayed in another.
    trouble = ("not cached", "cannot be rebuilt", "runs live")
    assert not [e for e in try1 + try2 if "fetch_ticket" in e and any(t in e for t in trouble)], (try1, try2)
    assert any("tool fetch_ticket" in e and "replayed from the cache" in e for e in try2), try2
    # try 1: the model asked for both tools; fetch_ticket was recorded, notify_team ran and failed.
    assert any(e.startswith("Durable: replayed 0 cached steps (0 model, 0 tool)") for e in try1), try1
    assert summaries(try1) == [(0, 0, 0, 3, 1, 2)], try1
    # try 2, in another process: the model's first answer and fetch_ticket replay from the cache.
    assert any(e.startswith("Durable: replayed 2 cached steps (1 model, 1 tool)") for e in try2), try2
    assert summaries(try2) == [(2, 1, 1, 2, 1, 1)], try2

    # Each line: "<tool> <try number> <pid>", written whenever the tool really runs.
    calls = [line.split() for line in (tmp_path / "tool-calls.txt").read_text().splitlines()]
    assert Counter(tool for tool, _, _ in calls) == {"fetch_ticket": 1, "notify_team": 2}, calls
    assert {(tool, try_number) for tool, try_number, _ in calls} == {
        ("fetch_ticket", "1"),
        ("notify_team", "1"),
        ("notify_team", "2"),
    }, calls
    pids = {try_number: {pid for _, number, pid in calls if number == try_number} for try_number in ("1", "2")}
    assert len(pids["1"]) == len(pids["2"]) == 1, calls
    assert pids["1"] != pids["2"], f"the two tries ran in one process: {calls}"

    cache = tmp_path / "cache"
    assert not (cache / DAG_ID / run_id / TASK_ID / "-1").exists(), "the cache is deleted after success"
    leftovers = sorted(path for path in cache.rglob("*") if path.is_file()) if cache.exists() else []
    assert leftovers == [], leftovers
