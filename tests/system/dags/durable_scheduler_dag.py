"""The DAG that tests/system/test_real_scheduler.py copies into a fresh dags folder.

Not a test module: the real dag-processor parses it and the LocalExecutor runs its task.
``DURABLE_E2E_MARKER`` (set in the components' environment) names a file each tool appends
``<tool> <try number> <pid>`` to whenever it really runs, so the test can count real calls
across the two task processes. ``fetch_ticket`` returns a class defined here: the fresh task
process of the retry must rebuild it from the cache as the class its own import of this file defines.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, get_current_context
from pydantic import BaseModel
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "durable_real_scheduler"
TASK_ID = "triage"


def _mark(tool: str) -> int:
    try_number = get_current_context()["ti"].try_number
    with open(os.environ["DURABLE_E2E_MARKER"], "a") as handle:
        handle.write(f"{tool} {try_number} {os.getpid()}\n")
    return try_number


class Ticket(BaseModel):
    id: int
    title: str


def fetch_ticket(ticket_id: int) -> Ticket:
    """Fetch a ticket (always succeeds)."""
    _mark("fetch_ticket")
    return Ticket(id=ticket_id, title="Login page times out")


def notify_team(ticket_id: int) -> str:
    """Notify the team; the chat API is down on the first try."""
    if _mark("notify_team") == 1:
        raise ConnectionError("chat API down (first try only)")
    return "posted"


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
):
    AgentOperator(
        task_id=TASK_ID,
        prompt="Triage ticket 42 and notify the team.",
        model_id="test",
        toolsets=[FunctionToolset([fetch_ticket, notify_team])],
        durable=True,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
