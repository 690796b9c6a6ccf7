"""One Airflow 'worker' in its own process: `python -m tests.helpers.worker` (run from the repo root).

The parent sets AIRFLOW_HOME (its own, per worker), the S3 connection and the cache path in the
environment. The DAG's logical date is fixed so that every worker computes the same run id, as two
tries of one task instance would. ``FAIL_NOTIFY=1`` makes the notify tool fail, as on a first try;
``TOOL_MARKER`` is a file each tool appends a line to whenever it really runs.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

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
    from airflow.sdk import DAG
    from airflow.utils.db import resetdb
    from pydantic_ai.toolsets import FunctionToolset
    from tests.helpers.airflow_run import run_dag

    from airflow_pydantic_ai.operators.agent import AgentOperator

    resetdb()
    with DAG(
        dag_id="cross_worker.dag-1",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        default_args={"retries": 0, "retry_delay": timedelta(0)},
    ) as dag:
        AgentOperator(
            task_id="triage.ticket-42",
            prompt="Triage ticket 42 and notify the team.",
            model_id="test",
            toolsets=[FunctionToolset([fetch_ticket, notify_team])],
            durable=True,
        )
    dr = run_dag(dag, logical_date=LOGICAL_DATE, run_after=LOGICAL_DATE)
    print(f"WORKER RESULT run_id={dr.run_id} state={dr.state}", flush=True)


if __name__ == "__main__":
    main()
