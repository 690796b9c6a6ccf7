"""The DAGs that tests/system/test_celery_workers.py copies into the dags folder of its Celery deployment.

Not a test module: the real dag-processor parses it and a Celery worker runs its tasks. Two DAGs, one agent:
``celery_trial_s3`` keeps its durable cache on S3 (``CELERY_TRIAL_S3_CACHE``, an ``s3://conn_id@bucket/prefix``
URL in the components' environment), ``celery_trial_local`` on the default local folder of the worker that
runs the try (``durable_cache_path`` unset).

The model (``TestModel``) asks for both tools at once. ``charge_card`` is the side effect: every real call
appends ``charge_card <try> <AIRFLOW_HOME>`` to ``$CELERY_TRIAL_MARKERS/<dag_id>.calls``. ``notify_team`` on
try 1 appends ``notify_team 1 <AIRFLOW_HOME> waiting``, waits until the test creates
``$CELERY_TRIAL_MARKERS/<dag_id>.release`` (so the test can drain that worker first), then fails; on try 2
it posts. The AIRFLOW_HOME in each line names the worker that ran the call.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, get_current_context
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

TASK_ID = "charge_and_notify"
RELEASE_TIMEOUT = 600  # seconds try 1 waits for the test; bounded so a lost test never leaves a task hanging


def _calls_file(dag_id: str) -> Path:
    return Path(os.environ["CELERY_TRIAL_MARKERS"]) / f"{dag_id}.calls"


def _mark(tool: str, suffix: str = "") -> tuple[str, int]:
    """Append this call's line to the DAG's calls file; return (dag_id, try_number)."""
    ti = get_current_context()["ti"]
    with _calls_file(ti.dag_id).open("a") as handle:
        handle.write(f"{tool} {ti.try_number} {os.environ['AIRFLOW_HOME']}{suffix}\n")
    return ti.dag_id, ti.try_number


def charge_card(amount: int) -> str:
    """Charge the customer's card (the side effect that must happen once)."""
    _mark("charge_card")
    return f"charged {amount}"


def notify_team(ticket_id: int) -> str:
    """Tell the team; the chat API is down on the first try (after the test has drained this worker)."""
    dag_id, try_number = _mark("notify_team", " waiting" if get_current_context()["ti"].try_number == 1 else "")
    if try_number == 1:
        release = _calls_file(dag_id).with_suffix(".release")
        deadline = time.monotonic() + RELEASE_TIMEOUT
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        raise ConnectionError("chat API down (first try only)")
    return "posted"


def _agent_dag(dag_id: str, cache_path: str | None) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        AgentOperator(
            task_id=TASK_ID,
            prompt="Charge the card for order 42 and notify the team.",
            model_id="test",
            toolsets=[FunctionToolset([charge_card, notify_team])],
            durable=True,
            durable_cache_path=cache_path,
            retries=1,
            retry_delay=timedelta(seconds=0),
        )
    return dag


celery_trial_s3 = _agent_dag("celery_trial_s3", os.environ.get("CELERY_TRIAL_S3_CACHE"))
celery_trial_local = _agent_dag("celery_trial_local", None)
