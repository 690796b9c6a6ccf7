"""A batched durable agent under Airflow's real scheduler and **triggerer**, with the real ``openai`` SDK against the
local OpenAI batch server: while the batch runs the task is ``deferred`` in the metadata DB and its worker slot is free
(another task runs in it, ``parallelism=1``); the triggerer checks the batch with the model rebuilt from the
connection; the task then resumes in the same try and succeeds. One batch is submitted over all of it.

Slow (about two minutes): deselect with ``-m "not scheduler"`` or set ``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.batch_wire import API_KEY
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.standalone import AirflowCluster, ClusterError, durable_cluster
from tests.helpers.task_logs import log_events

pytestmark = [pytest.mark.scheduler, requires_pydantic_ai("2.78", "a durable run stopped at a pending request")]

DAG_FILE = Path(__file__).parent / "dags" / "batch_deferral_dag.py"
DAG_ID = "batch_real_scheduler"  # as in DAG_FILE
RUN_TIMEOUT = 180
BATCH_SECONDS = 25  # how long the server's batch runs (wall clock): long enough to see the task deferred


def _wait_for_state(cluster: AirflowCluster, run_id: str, task_id: str, states: set[str], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    ti: Any = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        ti = cluster.task_instance(DAG_ID, run_id, task_id)
        if ti["state"] in states:
            return ti
        time.sleep(0.5)
    raise ClusterError(f"{task_id} still {ti and ti['state']!r} after {timeout} s:\n{cluster.tails()}")


def test_a_batched_task_is_deferred_while_the_batch_runs_and_succeeds_with_one_batch(
    openai_batch_server: Any, tmp_path: Path
) -> None:
    openai_batch_server.knobs.delay = BATCH_SECONDS
    connection = {"conn_type": "pydantic_ai", "host": openai_batch_server.base_url, "password": API_KEY}
    extra_env = {
        "AIRFLOW_CONN_OPENAI_BATCH": json.dumps(connection),
        "AIRFLOW__CORE__PARALLELISM": "1",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
    }
    with durable_cluster(tmp_path, DAG_FILE, extra_env, triggerer=True) as cluster:
        cluster.wait_for_dag(DAG_ID, timeout=60)
        run_id = cluster.trigger(DAG_ID)

        deferred = _wait_for_state(cluster, run_id, "digest", {"deferred"}, timeout=RUN_TIMEOUT)
        assert deferred["try_number"] == 1
        assert openai_batch_server.counters.batches_created == 1
        # The one worker slot is free while the batch runs: the other task takes it and finishes.
        _wait_for_state(cluster, run_id, "other", {"success"}, timeout=RUN_TIMEOUT)
        assert cluster.task_instance(DAG_ID, run_id, "digest")["state"] == "deferred"

        state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
        log = cluster.task_log(DAG_ID, run_id, "digest", 1)
        assert state == "success", f"{log}\n{cluster.tails()}"
        ti = cluster.task_instance(DAG_ID, run_id, "digest")
        assert (ti["state"], ti["try_number"]) == ("success", 1)
        assert cluster.xcom_value(DAG_ID, run_id, "digest") == "answer to: Summarize the night's tickets."
        assert openai_batch_server.counters.batches_created == 1  # never submitted again
        assert openai_batch_server.counters.polls >= 1  # the triggerer checked it
        events = log_events(log)
        assert any("the task defers, the triggerer checks every 1 s" in event for event in events), events
        assert any("resumed after a pending model request: ready after" in event for event in events), events
