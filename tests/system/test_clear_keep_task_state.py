"""Airflow 3.4: a durable task cleared through the REST API follows the ``keep_task_state`` the person chose.

A real api-server, scheduler and dag-processor. Two runs of the same DAG fail on try 1 (the tool's API is
down) with their steps recorded; each is cleared through ``POST /api/v2/dags/{dag}/clearTaskInstances``,
one with ``keep_task_state=false`` (Airflow's default: start over), one with ``keep_task_state=true``.

Slow (about a minute): deselect with ``-m "not scheduler"`` or set ``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version
from tests.helpers.compat import airflow_version
from tests.helpers.standalone import AirflowCluster
from tests.helpers.task_logs import log_events, summaries

pytestmark = [
    pytest.mark.scheduler,
    pytest.mark.skipif(
        airflow_version() < Version("3.4"),
        reason=f"keep_task_state is new in Airflow 3.4 (installed: {airflow_version()}); "
        "tests/dags/test_clear_policy.py covers on_clear",
    ),
]

DAG_FILE = Path(__file__).parent / "dags" / "clear_policy_dag.py"
DAG_ID = "durable_clear_policy"  # as in DAG_FILE
TASK_ID = "triage"
RUN_TIMEOUT = 120


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AirflowCluster]:
    cluster = AirflowCluster.create(
        tmp_path,
        dag_files=[DAG_FILE],
        extra_env={
            "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{tmp_path / 'cache'}",
            "DURABLE_E2E_MARKER": str(tmp_path / "tool-calls.txt"),
        },
    )
    with cluster.running():
        yield cluster


def _calls(tmp_path: Path, run_id: str) -> Counter[tuple[str, str]]:
    lines = (tmp_path / "tool-calls.txt").read_text().splitlines()
    return Counter((tool, try_number) for tool, run, try_number in (line.split() for line in lines) if run == run_id)


def test_the_rest_clear_follows_keep_task_state(cluster: AirflowCluster, tmp_path: Path):
    cluster.wait_for_dag(DAG_ID, timeout=60)
    runs = {keep: cluster.trigger(DAG_ID) for keep in (False, True)}
    for run_id in runs.values():
        assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "failed", cluster.tails()
        (tmp_path / f"tool-calls.txt.{run_id}.ok").write_text("")

    for keep, run_id in runs.items():
        cluster.clear_task(DAG_ID, run_id, TASK_ID, keep_task_state=keep)
        assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "success", cluster.tails()

    discarded, resumed = (log_events(cluster.task_log(DAG_ID, runs[keep], TASK_ID, 2)) for keep in (False, True))
    context = f"\nkeep=false: {discarded}\nkeep=true: {resumed}"
    assert any(
        "Durable: cleared with keep_task_state=false: the cache was discarded; every step runs live" in event
        for event in discarded
    ), context
    assert summaries(discarded) == [(0, 0, 0, 4, 2, 2)], context
    assert _calls(tmp_path, runs[False]) == {
        ("fetch_ticket", "1"): 1,
        ("notify_team", "1"): 1,
        ("fetch_ticket", "2"): 1,
        ("notify_team", "2"): 1,
    }

    assert any(
        "Durable: resumed from the cache after a clear (cleared with keep_task_state=true): 2 recorded steps replay"
        in event
        for event in resumed
    ), context
    assert summaries(resumed) == [(2, 1, 1, 2, 1, 1)], context
    assert _calls(tmp_path, runs[True]) == {("fetch_ticket", "1"): 1, ("notify_team", "1"): 1, ("notify_team", "2"): 1}
