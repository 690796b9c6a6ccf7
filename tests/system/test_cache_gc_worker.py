"""``airflow pydantic-ai cache gc`` run on a worker whose cache is local: it cleans the worker's own disk.

Two workers, each with its own ``AIRFLOW_HOME`` and ``durable_cache_path`` unset (the default
``file://$AIRFLOW_HOME/pydantic_ai/durable_cache``), one metadata database. Try 1 of a task fails on worker A;
its retry runs on worker B and succeeds, so B's success callback deletes B's cache and A's stays. ``gc`` on
worker A (the real CLI in a subprocess, with A's ``AIRFLOW_HOME`` and the shared database) removes that
leftover and keeps the cache of a task instance up for retry, whose next try may still run on A.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.compat import airflow_reads_provider_cli
from tests.helpers.operator_runs import CALLS, files_under, make_dag, tools

pytestmark = pytest.mark.usefixtures("airflow_db")

CACHE_PATH = "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH"


def _default_base(airflow_home: Path) -> Path:
    """Where a worker with this ``AIRFLOW_HOME`` keeps its caches when ``durable_cache_path`` is unset."""
    return airflow_home / "pydantic_ai" / "durable_cache"


def _agent(task_id: str = "triage") -> Any:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    return AgentOperator(task_id=task_id, prompt="Triage ticket 42.", model_id="test", toolsets=[tools()], durable=True)


def _set_state(dag_id: str, run_id: str, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id).values(state=state)
        )


def _gc_on_worker(airflow_home: Path, *args: str, database: str | None = None) -> subprocess.CompletedProcess[str]:
    """``cache gc`` as a cron job on a worker runs it: the worker's AIRFLOW_HOME, the option unset, the shared DB
    (or ``database``)."""
    from airflow.configuration import conf

    env = {key: value for key, value in os.environ.items() if key != CACHE_PATH}
    env["AIRFLOW_HOME"] = str(airflow_home)
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = database or conf.get("database", "sql_alchemy_conn")
    bin_folder = Path(sys.executable).parent
    command = (
        [str(bin_folder / "airflow"), "pydantic-ai"]
        if airflow_reads_provider_cli()
        else [str(bin_folder / "airflow-pydantic-ai")]
    )
    return subprocess.run(
        [*command, "cache", "gc", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def test_gc_on_a_worker_removes_what_a_retry_elsewhere_left_on_its_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_a, worker_b = tmp_path / "worker-a", tmp_path / "worker-b"
    base_a, base_b = _default_base(worker_a), _default_base(worker_b)
    suffix = uuid.uuid4().hex[:8]

    def retry_lands_on_worker_b(context: Any) -> None:
        monkeypatch.setenv(CACHE_PATH, f"file://{base_b}")

    # Try 1 on worker A fails in a tool; the retry runs on worker B and succeeds.
    monkeypatch.setenv(CACHE_PATH, f"file://{base_a}")
    CALLS.clear()
    with make_dag(f"gc_moved_{suffix}", on_retry_callback=retry_lands_on_worker_b) as dag:
        _agent()
    moved = run_dag(dag)
    assert moved.state == "success" and task_states(moved)[("triage", -1)] == ("success", 2)
    assert CALLS == {"fetch_ticket": 2, "notify_team": 2}, "worker B found none of worker A's steps"
    assert files_under(base_b) == [], "worker B deleted its own cache after the success"
    leftover = base_a / moved.dag_id
    assert files_under(leftover), "try 1's cache stays on worker A"

    # A task instance whose try 1 failed on worker A and that is up for retry: its next try may run on A.
    monkeypatch.setenv(CACHE_PATH, f"file://{base_a}")
    with make_dag(f"gc_waiting_{suffix}", retries=0) as dag:
        _agent()
    waiting = run_dag(dag)
    assert waiting.state == "failed"
    _set_state(waiting.dag_id, waiting.run_id, "up_for_retry")
    kept = files_under(base_a / waiting.dag_id)
    assert kept

    result = _gc_on_worker(worker_a, "--yes")

    assert result.returncode == 0, result.stderr
    assert files_under(leftover) == []
    assert files_under(base_a / waiting.dag_id) == kept
    assert moved.dag_id in result.stdout and "success" in result.stdout
    assert waiting.dag_id not in result.stdout
    assert f"Deleted 1 cache under file://{base_a}, freed " in result.stdout
    assert "kept 1 that may still be read" in result.stdout

    again = _gc_on_worker(worker_a, "--yes")

    assert again.returncode == 0, again.stderr
    assert f"Nothing to delete: 1 cache may still be read by their task instance (looked under file://{base_a})" in (
        again.stdout
    )

    # A worker that cannot reach Airflow's database is told so in one line, and nothing is deleted.
    without_database = _gc_on_worker(worker_a, "--yes", database=f"sqlite:///{tmp_path / 'empty.db'}")

    assert without_database.returncode == 1
    assert (
        without_database.stderr.strip()
        .splitlines()[-1]
        .startswith("error: the task instance states cannot be read from Airflow's metadata database")
    )
    assert "sql_alchemy_conn" in without_database.stderr and "Traceback" not in without_database.stderr
    assert files_under(base_a / waiting.dag_id) == kept
