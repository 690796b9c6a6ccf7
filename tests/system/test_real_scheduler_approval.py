"""Asking a person under Airflow's real scheduler, dag-processor and api-server: the task waits without a worker.

With one executor slot (``parallelism=1``), the agent task takes the slot first (higher priority), parks
in ``awaiting_input`` (Airflow 3.3; the triggerer would be needed on 3.1/3.2), and another task runs in
the freed slot meanwhile. A logged-in user then answers over HTTP and the agent task finishes in a new
task process that replays the recorded model step.

The same cluster then runs a task whose first try is SIGKILLed right after an ``at_most_once()`` tool charged a
card: its retry asks whether the charge happened, a person answers "It happened" with the receipt over HTTP,
and the task succeeds without charging again.

Slow (about a minute): deselect with ``-m "not scheduler"`` or set ``AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from tests.helpers.compat import airflow_version
from tests.helpers.standalone import AirflowCluster, ClusterError, durable_cluster, user_env
from tests.helpers.task_logs import log_events, summaries

pytestmark = [
    pytest.mark.scheduler,
    pytest.mark.skipif(
        airflow_version() < Version("3.3"),
        reason=f"Airflow {airflow_version()} defers an approval to HITLTrigger, and this cluster runs no triggerer "
        "(tests/helpers/standalone.py COMPONENTS); parking in awaiting_input needs 3.3",
    ),
]

DAG_FILE = Path(__file__).parent / "dags" / "approval_scheduler_dag.py"
DAG_ID = "approval_real_scheduler"  # as in DAG_FILE
UNKNOWN_DAG_ID = "unknown_outcome_real_scheduler"  # as in DAG_FILE
RUN_TIMEOUT = 90
READY_TIMEOUT = 180  # migrating, or starting the api-server, can take over a minute on a loaded 2-core machine
USERS = {"admin": ("admin", "admin-password"), "alice": ("op", "alice-password")}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's folder (one cluster for the module's tests); ``marker.txt`` holds the tools' real runs."""
    return tmp_path_factory.mktemp("approval_cluster")


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[AirflowCluster]:
    (root / "auth").mkdir()
    extra_env = {
        "APPROVAL_E2E_MARKER": str(root / "marker.txt"),
        "AIRFLOW__CORE__PARALLELISM": "1",
        # On a loaded machine one execution-API call can take over 30 s (the default timeout).
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
        **user_env(root / "auth", USERS),
    }
    with durable_cluster(
        root, DAG_FILE, extra_env, login=("admin", USERS["admin"][1]), ready_timeout=READY_TIMEOUT
    ) as cluster:
        yield cluster


def _wait_for_state(
    cluster: AirflowCluster, run_id: str, task_id: str, states: set[str], timeout: float, dag_id: str = DAG_ID
) -> Any:
    deadline = time.monotonic() + timeout
    ti: Any = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        ti = cluster.task_instance(dag_id, run_id, task_id)
        if ti["state"] in states:
            return ti
        time.sleep(1)
    raise ClusterError(f"{task_id} still {ti and ti['state']!r} after {timeout} s:\n{cluster.tails()}")


def _marks(root: Path, *names: str) -> list[str]:
    """The tools' real runs recorded in the marker file (first word of each line), of the tools ``names``."""
    lines = (root / "marker.txt").read_text().splitlines() if (root / "marker.txt").exists() else []
    return [line.rsplit(" ", 2)[0] for line in lines if line.split()[0] in names]


def test_waiting_for_approval_frees_the_worker_slot(cluster: AirflowCluster, root: Path) -> None:
    cluster.wait_for_dag(DAG_ID, timeout=30)
    started = time.monotonic()
    run_id = cluster.trigger(DAG_ID)
    _wait_for_state(cluster, run_id, "mail", {"awaiting_input"}, timeout=RUN_TIMEOUT)
    # The only worker slot is free: the other task runs and finishes while the agent task waits.
    _wait_for_state(cluster, run_id, "other", {"success"}, timeout=RUN_TIMEOUT)
    assert cluster.task_instance(DAG_ID, run_id, "mail")["state"] == "awaiting_input"
    assert _marks(root, "send_email") == []

    cluster.login_as("alice", USERS["alice"][1])
    detail = cluster.hitl_detail(DAG_ID, run_id, "mail")
    assert detail["subject"] == f"{DAG_ID}.mail: approve 1 tool call?"
    assert "team@example.com" in detail["body"]
    answer = cluster.hitl_respond(DAG_ID, run_id, "mail", {"chosen_options": ["Approve all"]})
    assert answer["responded_by"]["name"] == "alice"

    state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    print(f"run {run_id} finished {state!r} {time.monotonic() - started:.1f} s after the trigger")
    log = cluster.task_log(DAG_ID, run_id, "mail", 1)
    assert state == "success", f"{log}\n{cluster.tails()}"
    ti = cluster.task_instance(DAG_ID, run_id, "mail")
    assert (ti["state"], ti["try_number"]) == ("success", 1)
    assert _marks(root, "other", "send_email") == ["other", "send_email"]
    events = log_events(log)
    assert any(e.startswith("Approval: waiting for 1 approval(s)") for e in events), events
    assert any("approved by alice" in e for e in events), events
    # Before the wait: one live model step. After: it replays, the tool and the final answer run live.
    assert summaries(events) == [(0, 0, 0, 1, 1, 0), (1, 1, 0, 2, 1, 1)], events


def test_a_person_says_a_call_cut_off_happened_and_the_retry_does_not_run_it_again(
    cluster: AirflowCluster, root: Path
) -> None:
    cluster.wait_for_dag(UNKNOWN_DAG_ID, timeout=30)
    run_id = cluster.trigger(UNKNOWN_DAG_ID)
    # Try 1 charges and is killed mid-call; try 2 finds the call started and never finished, and asks.
    ti = _wait_for_state(cluster, run_id, "charge", {"awaiting_input"}, timeout=RUN_TIMEOUT, dag_id=UNKNOWN_DAG_ID)
    assert ti["try_number"] == 2
    assert _marks(root, "charge_card") == ["charge_card try=1"]

    cluster.wait_until_park_seen(UNKNOWN_DAG_ID, run_id, "charge", try_number=2)

    cluster.login_as("alice", USERS["alice"][1])
    detail = cluster.hitl_detail(UNKNOWN_DAG_ID, run_id, "charge")
    assert detail["subject"] == f"{UNKNOWN_DAG_ID}.charge: did this tool call happen?"
    assert detail["options"] == ["It happened", "It happened, result unknown", "Run it again", "Fail the task"]
    assert (
        "charge_card" in detail["body"] and "in try 1 at " in detail["body"] and '"customer": "acme"' in detail["body"]
    )
    body = {"chosen_options": ["It happened"], "params_input": {"result": '{"receipt": "r-1042"}'}}
    assert cluster.hitl_respond(UNKNOWN_DAG_ID, run_id, "charge", body)["responded_by"]["name"] == "alice"

    state = cluster.wait_for_run(UNKNOWN_DAG_ID, run_id, timeout=RUN_TIMEOUT)
    log = cluster.task_log(UNKNOWN_DAG_ID, run_id, "charge", 2)
    assert state == "success", f"{log}\n{cluster.tails()}"
    assert (cluster.task_instance(UNKNOWN_DAG_ID, run_id, "charge")["try_number"]) == 2
    assert _marks(root, "charge_card") == ["charge_card try=1"]  # never charged again
    events = log_events(log)
    assert any("alice answered 'it happened' (the Required Actions page)" in e for e in events), events
    assert any("replayed as alice answered 'it happened'" in e for e in events), events
