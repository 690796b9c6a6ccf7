"""Resumable tools under ``dag.test()`` with real retries (issue 29): a tool that submitted a job and saved its
id with ``tool_checkpoint()`` reconnects on the retry instead of submitting again, and ``idempotency_key()`` is
the same on both tries. The worker dying cannot happen in this process: try 1's tool fails after its save, and
the checkpoint is there for try 2 all the same. The SIGKILL trials are in ``tests/system``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.helpers.airflow_run import current_try, run_dag, task_states, xcom_value
from tests.helpers.operator_runs import durable_operator, files_under, make_dag

from airflow_pydantic_ai import idempotency_key, tool_checkpoint

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

ROOT = Path(__file__).resolve().parents[2]
SUBMITTED: list[str] = []
KEYS: list[tuple[int, str]] = []
RESUMED: list[tuple[int, str | None]] = []


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    SUBMITTED.clear()
    KEYS.clear()
    RESUMED.clear()


def run_report(month: str) -> str:
    """Submit the month's report job once, save its id, then wait for it (try 1 loses the connection)."""
    checkpoint = tool_checkpoint()
    KEYS.append((current_try(), idempotency_key()))
    job_id = checkpoint.get("job_id")
    RESUMED.append((current_try(), job_id))
    if job_id is None:
        job_id = f"job-{len(SUBMITTED) + 1}"
        SUBMITTED.append(job_id)
        assert checkpoint.save("job_id", job_id)
    if current_try() == 1:
        raise ConnectionError(f"lost the connection while waiting for {job_id}")
    return f"report ready from {job_id}"


def test_the_retry_reconnects_to_the_job_try_1_submitted(cache_base: Path) -> None:
    with make_dag("resumable_tool") as dag:
        durable_operator(run_report, task_id="report", prompt="Run the monthly report.")
    dr = run_dag(dag)

    assert dr.state == "success"
    assert task_states(dr)[("report", -1)] == ("success", 2)
    assert SUBMITTED == ["job-1"], "submitted once"
    assert RESUMED == [(1, None), (2, "job-1")]
    [(first_try, first_key), (second_try, second_key)] = KEYS
    assert (first_try, second_try) == (1, 2) and first_key == second_key
    assert "report ready from job-1" in str(xcom_value(dr, "report"))
    assert files_under(cache_base) == [], "the checkpoint went with the cache after success"


def test_the_example_dag_submits_once_and_dedupes_its_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.compat import dagbag_api

    monkeypatch.setenv("EXAMPLE_RESUMABLE_STATE", str(tmp_path / "state"))
    DagBag, _ = dagbag_api()
    bag = DagBag(dag_folder=str(ROOT / "example_dags" / "example_resumable_tool.py"))
    assert not bag.import_errors
    dag = bag.dags["example_resumable_tool"]
    dr = run_dag(dag, logical_date=None)

    assert dr.state == "success"
    assert task_states(dr)[("build_forecast", -1)] == ("success", 3)
    state = tmp_path / "state"
    assert len((state / "jobs").read_text().splitlines()) == 1, "the job was submitted once"
    assert "forecast" in str(xcom_value(dr, "build_forecast"))
    with sqlite3.connect(state / "orders.db") as db:
        assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM requests").fetchone() == (1,), "the server saw one request per key"
