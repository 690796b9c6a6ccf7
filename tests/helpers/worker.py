"""One Airflow 'worker' in its own process: `python -m tests.helpers.worker` (run from the repo root).

The parent sets AIRFLOW_HOME (the metadata DB the workers share), the S3 connection and the cache path in
the environment. ``WORKER_TRY=1`` creates the DB and runs the DAG (try 1); ``WORKER_TRY=2`` runs the next
try of the same task instance in the same DAG run, as the scheduler does after a clear or on a retry
sent to another worker. ``FAIL_NOTIFY=1`` makes the notify tool fail, as on a first try;
``TOOL_MARKER`` is a file each tool appends a line to whenever it really runs.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

LOGICAL_DATE = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)


def _mark(name: str) -> None:
    with open(os.environ["TOOL_MARKER"], "a") as handle:
        handle.write(f"{name} {os.getpid()}\n")


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket."""
    _mark("fetch_ticket")
    return {"id": ticket_id, "title": "Login page times out"}


def notify_team(ticket_id: int) -> str:
    """Notify the team."""
    _mark("notify_team")
    if os.environ.get("FAIL_NOTIFY") == "1":
        raise ConnectionError("chat API down on this worker")
    return "posted"


def main() -> None:
    from airflow.utils.db import resetdb
    from tests.helpers.airflow_run import clear_and_rerun, make_dag, run_dag
    from tests.helpers.operator_runs import durable_operator

    first_try = os.environ.get("WORKER_TRY", "1") == "1"
    if first_try:
        resetdb()
    with make_dag("cross_worker.dag-1", retries=0) as dag:
        durable_operator(
            fetch_ticket, notify_team, task_id="triage.ticket-42", prompt="Triage ticket 42 and notify the team."
        )
    if first_try:
        dr = run_dag(dag, logical_date=LOGICAL_DATE, run_after=LOGICAL_DATE)
        print(f"WORKER RESULT run_id={dr.run_id} state={dr.state}", flush=True)
        return
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dr = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id).one()
    state, try_number = clear_and_rerun(dag, dr, "triage.ticket-42")
    print(f"WORKER RESULT run_id={dr.run_id} state={state} try={try_number}", flush=True)


if __name__ == "__main__":
    main()
