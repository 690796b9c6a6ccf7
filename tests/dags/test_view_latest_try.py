"""The view says how the latest try ended, beside its summary: the exception's class and its message with
secrets masked, without opening the logs; and names the task instance as Airflow's UI does."""

from __future__ import annotations

import uuid

import pytest
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import make_dag, run_dag, task_states
from tests.helpers.view import view_client, view_query

from airflow_pydantic_ai.durable import TaskIdentity

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

SECRET = f"sk-registered-{uuid.uuid4().hex}"


def notify_team(ticket_id: int) -> str:
    """Notify the team."""
    raise ConnectionError(f"chat API down (token {SECRET})")


def test_the_view_says_how_the_latest_try_failed_with_secrets_masked() -> None:
    from airflow.sdk import task
    from airflow.sdk.log import mask_secret

    mask_secret(SECRET)
    with make_dag(f"latest_try_{uuid.uuid4().hex[:8]}", retries=0) as dag:

        @task.pydantic_ai(model_id="test", toolsets=[FunctionToolset([notify_team])], durable=True)
        def triage() -> str:
            return "Triage ticket 42."

        triage()

    dr = run_dag(dag)
    assert task_states(dr)[("triage", -1)] == ("failed", 1)

    page = view_client().get(f"/?{view_query(TaskIdentity(dag.dag_id, dr.run_id, 'triage', -1))}")

    assert page.status_code == 200, page.text
    assert "How it ended:</strong> Failed: ConnectionError: chat API down (token ***)" in page.text
    assert SECRET not in page.text
    assert ">Failed</span> try 1 &middot; @task.pydantic_ai<" in page.text
