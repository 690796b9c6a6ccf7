"""A worker killed in the success window, under Airflow's real scheduler: the retry calls nothing again.

``tests/system/dags/success_window_dag.py`` has one task per kill point; each runs a durable agent (3
model answers, 2 tool calls) and, on its first try, SIGKILLs its own task process at that point.
The LocalExecutor's supervisor sees the process die; Airflow retries the same task instance (same
DAG run, try 2) in a fresh process, which only has the durable cache on disk to go on. Checked per
task: the final state and try number, how often the model and the tool really ran in each try (0 in
try 2), the XCom, and what is left of the cache.

Slow (about a minute): deselect with ``-m "not scheduler"`` or set ``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.standalone import AirflowCluster, durable_cluster
from tests.helpers.task_logs import log_events

pytestmark = pytest.mark.scheduler  # skipped when AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1 (conftest.py)

DAG_FILE = Path(__file__).parent / "dags" / "success_window_dag.py"
DAG_ID = "durable_success_window"  # as in DAG_FILE
BEFORE_SUCCESS = ("after_output_recorded", "after_xcom_push", "before_return")
AFTER_SUCCESS = ("mid_deletion", "after_deletion")
EXPECTED_OUTPUT = "final: done-0|done-1"
ENTRIES = 6  # 3 model answers, 2 tool calls, the result
RUN_TIMEOUT = 150


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AirflowCluster]:
    with durable_cluster(tmp_path, DAG_FILE, {"SUCCESS_WINDOW_MARKER": str(tmp_path / "calls.txt")}) as cluster:
        yield cluster


def test_a_worker_killed_in_the_success_window_never_repeats_a_step(cluster: AirflowCluster, tmp_path: Path):
    cluster.wait_for_dag(DAG_ID, timeout=30)
    started = time.monotonic()
    run_id = cluster.trigger(DAG_ID)
    state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    print(f"run {run_id} finished {state!r} {time.monotonic() - started:.1f} s after the trigger")
    context = f"\n{cluster.tails()}"
    assert state == "success", context

    # Each line: "<model|tool> <task> <try number> <pid>", written whenever the model or the tool really ran.
    calls = Counter(tuple(line.split()[:3]) for line in (tmp_path / "calls.txt").read_text().splitlines())
    cache = tmp_path / "cache" / DAG_ID / run_id
    for task_id in (*BEFORE_SUCCESS, *AFTER_SUCCESS):
        ti = cluster.task_instance(DAG_ID, run_id, task_id)
        retried = task_id in BEFORE_SUCCESS
        where = f"{task_id}: {ti['state']} try {ti['try_number']}; calls {sorted(calls.items())}{context}"
        assert (ti["state"], ti["try_number"]) == ("success", 2 if retried else 1), where
        assert calls[("model", task_id, "1")] == 3 and calls[("tool", task_id, "1")] == 2, where
        assert calls[("model", task_id, "2")] == 0 and calls[("tool", task_id, "2")] == 0, where
        assert cluster.xcom_value(DAG_ID, run_id, task_id) == EXPECTED_OUTPUT, where
        left = sorted(path.name for path in (cache / task_id / "-1").glob("*")) if (cache / task_id).exists() else []
        if retried:
            events = log_events(cluster.task_log(DAG_ID, run_id, task_id, 2))
            assert any("already produced this task's output" in event for event in events), events
            assert any(e.startswith("Durable: replayed 0 cached steps (0 model, 0 tool), executed 0") for e in events)
            assert left == [], f"{task_id}: the retry's success deleted the cache: {left}"
        elif task_id == "mid_deletion":
            # Killed after Airflow stored the success: the rest stays for `cache gc` (nothing will retry).
            entries = [name for name in left if not name.startswith(".")]  # not the per-try records
            assert len(entries) == ENTRIES - 3 and "result-output.json" in entries, left
        else:
            assert left == [], left
