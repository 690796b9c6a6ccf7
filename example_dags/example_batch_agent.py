"""
A nightly agent whose model requests go through OpenAI's Batch API: about half the price, results within 24 hours.

``summarize_day`` runs a durable agent with ``batch=True``, which adds pydantic-ai's own ``BatchModelRequests`` to
the run (put ``BatchModelRequests(...)`` on your agent instead and leave ``batch`` out: the same happens). Each model
request is submitted in a batch and the submission is recorded in the durable cache before the wait. The task then
**defers**: Airflow's triggerer checks the batch at pydantic-ai's poll interval and no worker slot is held, for
minutes or hours. When the batch has the result, the task resumes on a worker (same try), replays the recorded
steps and collects the answer. A worker lost at any point leaves a retry that picks up the same batch: nothing is
submitted twice.

It needs a ``pydantic_ai`` connection ``openai_batch`` (API key in its password; the host, if set, is the base URL),
and a triggerer (``airflow triggerer``, part of ``airflow standalone``). See docs/batch.rst.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_pydantic_ai.operators.agent import AgentOperator

# [START howto_batch_agent]
with DAG(
    dag_id="example_batch_agent",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai", "batch"],
):
    AgentOperator(
        task_id="summarize_day",
        llm_conn_id="openai_batch",
        model_id="openai-responses:gpt-5-mini",
        system_prompt="You write a short digest of the day's support tickets for the morning stand-up.",
        prompt=(
            "Summarize the tickets of {{ (dag_run.logical_date or dag_run.run_after) | ds }}: "
            "login failures after the release, two billing questions."
        ),
        durable=True,  # the submission is recorded: a lost worker never submits the batch again
        batch=True,  # pydantic-ai's BatchModelRequests: the provider's batch API, about half the price
        pending_timeout=timedelta(hours=24),  # the providers' completion window (the default)
        retries=2,
    )
# [END howto_batch_agent]
