"""
A long model request run in OpenAI's background mode: the provider works on it, the task waits deferred.

``research_report`` asks a model for a long report with ``openai_background=True`` in the model settings (OpenAI's
Responses API runs the request on the provider's side and is polled for the result). With ``durable=True`` the
background response's id is recorded as soon as OpenAI accepted the request; the task **defers** while it runs
(Airflow's triggerer checks the response's status, no worker slot is held) and resumes on a worker to collect the
result. A retry after a lost worker picks up the same background response instead of starting it again.

It needs a ``pydantic_ai`` connection ``openai_background`` (API key in its password; the host, if set, is the base
URL) and a triggerer. See docs/batch.rst.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_pydantic_ai.operators.agent import AgentOperator

# [START howto_background_agent]
with DAG(
    dag_id="example_background_agent",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai", "background"],
):
    AgentOperator(
        task_id="research_report",
        llm_conn_id="openai_background",
        model_id="openai-responses:gpt-5",
        system_prompt="You write thorough, sourced research reports.",
        prompt="Write a report on the reliability of nightly data pipelines.",
        agent_params={"model_settings": {"openai_background": True}},
        durable=True,
        pending_timeout=timedelta(hours=6),
        retries=2,
    )
# [END howto_background_agent]
