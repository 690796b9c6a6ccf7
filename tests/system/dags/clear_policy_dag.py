"""The DAG that tests/system/test_clear_keep_task_state.py copies into a fresh dags folder.

Not a test module. ``DURABLE_E2E_MARKER`` names a file each tool appends ``<tool> <run_id> <try>`` to
whenever it really runs; notify_team fails until ``{marker}.{run_id}.ok`` exists (the test creates it
before it clears the task).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, get_current_context
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "durable_clear_policy"
TASK_ID = "triage"


def _mark(tool: str) -> str:
    context = get_current_context()
    run_id = context["ti"].run_id
    with open(os.environ["DURABLE_E2E_MARKER"], "a") as handle:
        handle.write(f"{tool} {run_id} {context['ti'].try_number}\n")
    return run_id


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket (always succeeds)."""
    _mark("fetch_ticket")
    return {"id": ticket_id, "title": "Login page times out"}


def notify_team(ticket_id: int) -> str:
    """Notify the team; the chat API is down until the test says otherwise."""
    run_id = _mark("notify_team")
    if not os.path.exists(f"{os.environ['DURABLE_E2E_MARKER']}.{run_id}.ok"):
        raise ConnectionError("chat API down")
    return "posted"


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(
        task_id=TASK_ID,
        prompt="Triage ticket 42 and notify the team.",
        model_id="test",
        toolsets=[FunctionToolset([fetch_ticket, notify_team])],
        durable=True,
        retries=0,
    )
