"""A nightly batched agent for the real scheduler + triggerer test (tests/system/test_real_scheduler_batch.py).

``digest`` sends its one model request through OpenAI's Batch API (the local batch server of the test, reached
through the ``openai_batch`` connection the test defines) and defers while the batch runs; ``other`` needs the only
worker slot meanwhile."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG
from airflow.sdk.bases.operator import BaseOperator
from pydantic_ai.capabilities import BatchModelRequests

from airflow_pydantic_ai.operators.agent import AgentOperator


class Other(BaseOperator):
    def execute(self, context):
        return "ran while the batch was pending"


with DAG(dag_id="batch_real_scheduler", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    digest = AgentOperator(
        task_id="digest",
        llm_conn_id="openai_batch",
        model_id="openai-responses:gpt-4o",
        prompt="Summarize the night's tickets.",
        durable=True,
        batch=BatchModelRequests(
            max_wait=timedelta(milliseconds=50),
            poll_interval=timedelta(seconds=1),
            max_poll_interval=timedelta(seconds=2),
        ),
        retries=1,
        priority_weight=10,
    )
    other = Other(task_id="other", priority_weight=1)
