"""Fork at step N: ``airflow pydantic-ai cache rm --from-step N``, then a real retry of the same DAG run.

Airflow's real scheduler, dag-processor and api-server run the DAG (tests/system/dags/cache_fork_dag.py);
its task fails for good on try 1. The test forks the cache with the real CLI, clears the task instance
through the REST API (as the UI's Clear button does), and the scheduler runs try 2 of the same DAG run
in a fresh task process: it must replay exactly steps 1..N-1 and run the rest live.

Slow (about a minute): deselect with ``-m "not scheduler"`` or set ``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.compat import keep_task_state_to_resume
from tests.helpers.standalone import AirflowCluster, durable_cluster
from tests.helpers.task_logs import log_events, summaries

pytestmark = pytest.mark.scheduler  # skipped when AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1 (conftest.py)

DAG_FILE = Path(__file__).parent / "dags" / "cache_fork_dag.py"
DAG_ID = "durable_cache_fork"  # as in DAG_FILE
TASK_ID = "triage"
RUN_TIMEOUT = 240  # the machine may be loaded; it takes 10-20 s on a quiet one


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AirflowCluster]:
    with durable_cluster(tmp_path, DAG_FILE, {"DURABLE_E2E_MARKER": str(tmp_path / "tool-calls.txt")}) as cluster:
        yield cluster


def _json(stdout: str) -> list[dict[str, str]]:
    return json.loads(stdout[stdout.index("[") :])


def test_rm_from_step_then_a_real_retry_replays_the_steps_before_it(cluster: AirflowCluster, tmp_path: Path):
    cluster.wait_for_dag(DAG_ID, timeout=120)
    run_id = cluster.trigger(DAG_ID)
    assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "failed", cluster.tails()
    ids = (DAG_ID, run_id, TASK_ID)

    # Try 1 recorded the model's answer (calling the three tools) and the two tools that succeeded.
    try1_log = cluster.task_log(DAG_ID, run_id, TASK_ID, 1)
    try1 = log_events(try1_log) if try1_log.exists() else [f"no log at {try1_log}"]
    shown = cluster.provider_cli("cache", "show", *ids, "-o", "json")
    assert shown.returncode == 0, f"{shown.stderr}\ntry 1: {try1}\n{cluster.tails()}"
    steps = [(row["step"], row["kind"], row["name"]) for row in _json(shown.stdout)]
    assert [kind for _, kind, _ in steps] == ["model", "tool", "tool"], steps
    kept_tool, forked_tool = steps[1][2], steps[2][2]
    assert {kept_tool, forked_tool} == {"fetch_ticket", "lookup_owner"}

    forked = cluster.provider_cli("cache", "rm", *ids, "--from-step", "3", "--yes")
    assert forked.returncode == 0, forked.stderr
    assert "the next try replays steps 1..2" in forked.stdout

    # A clear that keeps the (forked) cache: Airflow 3.4 discards it unless keep_task_state is set.
    cluster.clear_task(DAG_ID, run_id, TASK_ID, keep_task_state=keep_task_state_to_resume())
    assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "success", cluster.tails()
    ti = cluster.task_instance(DAG_ID, run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("success", 2)

    try2 = log_events(cluster.task_log(DAG_ID, run_id, TASK_ID, 2))
    # Steps 1..2 replay (the model's first answer and the tool before the fork); the forked tool,
    # notify_team and the model's final answer run live.
    assert summaries(try2) == [(2, 1, 1, 3, 1, 2)], try2
    calls = Counter(tuple(line.split()) for line in (tmp_path / "tool-calls.txt").read_text().splitlines())
    assert calls == {
        (kept_tool, "1"): 1,
        (forked_tool, "1"): 1,
        (forked_tool, "2"): 1,
        ("notify_team", "1"): 1,
        ("notify_team", "2"): 1,
    }, calls
