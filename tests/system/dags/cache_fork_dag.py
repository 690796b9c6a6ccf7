"""The DAG that tests/system/test_cache_fork_scheduler.py copies into a fresh dags folder.

Not a test module: the real dag-processor parses it and the LocalExecutor runs its task. No
retries: the first try fails for good (``notify_team`` fails on try 1), a person forks the cache
with ``airflow pydantic-ai cache rm --from-step N`` and clears the task instance, and the scheduler
runs try 2 of the same DAG run. ``DURABLE_E2E_MARKER`` names a file each tool appends
``<tool> <try number>`` to whenever it really runs.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, get_current_context
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "durable_cache_fork"
TASK_ID = "triage"


def _mark(tool: str) -> int:
    try_number = get_current_context()["ti"].try_number
    with open(os.environ["DURABLE_E2E_MARKER"], "a") as handle:
        handle.write(f"{tool} {try_number}\n")
    return try_number


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket."""
    _mark("fetch_ticket")
    return {"id": ticket_id, "title": "Login page times out"}


def lookup_owner(ticket_id: int) -> str:
    """Find who owns the ticket's component."""
    _mark("lookup_owner")
    return "team-auth"


def notify_team(ticket_id: int) -> str:
    """Notify the team; the chat API is down on the first try."""
    if _mark("notify_team") == 1:
        raise ConnectionError("chat API down (first try only)")
    return "posted"


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(
        task_id=TASK_ID,
        prompt="Triage ticket 42, find its owner and notify the team.",
        model_id="test",
        toolsets=[FunctionToolset([fetch_ticket, lookup_owner, notify_team])],
        durable=True,
        retries=0,
    )
