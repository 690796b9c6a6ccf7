"""
Durable agents on TestModel: no API key needed.

``triage_ticket`` calls two tools; ``notify_team`` fails on the first try only, as a flaky API
would. On the retry the model's answer and ``fetch_ticket``'s result replay from the durable cache;
only ``notify_team`` runs again.

``prompt_changes_between_tries`` has a prompt templated on the try number, so the retry's request
differs from the recorded one: the task log warns that the user prompt changed, and the model and
its tools run live.

``summarize_ticket`` is the same kind of agent written with the ``@task.agent`` decorator.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow.sdk import DAG, get_current_context, task
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

# The tools run in a worker thread beside the durable layer's own log lines: log, don't print.
log = logging.getLogger("example_durable_agent.tools")


# [START howto_durable_tools]
def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a support ticket (a stand-in for a slow, billed API)."""
    log.info("fetch_ticket(%s) called", ticket_id)
    return {"id": ticket_id, "title": "Login page times out", "priority": "high"}


def notify_team(ticket_id: int) -> str:
    """Post the ticket to the team channel; the 'API' is down on the first try."""
    try_number = get_current_context()["ti"].try_number
    log.info("notify_team(%s) called on try %s", ticket_id, try_number)
    if try_number == 1:
        raise ConnectionError("team chat API unavailable (simulated, first try only)")
    return f"ticket {ticket_id} posted"


# [END howto_durable_tools]


with DAG(
    dag_id="example_durable_agent",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    tags=["example", "pydantic-ai"],
):
    # [START howto_operator_agent_durable]
    triage_ticket = AgentOperator(
        task_id="triage_ticket",
        prompt="Triage ticket 42 and notify the team.",
        system_prompt="You are a support triage assistant.",
        model_id="test",
        toolsets=[FunctionToolset([fetch_ticket, notify_team])],
        durable=True,
    )
    # [END howto_operator_agent_durable]

    prompt_changes_between_tries = AgentOperator(
        task_id="prompt_changes_between_tries",
        prompt="Triage ticket 7 and notify the team (try {{ ti.try_number }}).",
        model_id="test",
        toolsets=[FunctionToolset([fetch_ticket, notify_team])],
        durable=True,
    )

    # [START howto_decorator_agent]
    @task.agent(model_id="test", system_prompt="Summarize support tickets in one line.", durable=True)
    def summarize_ticket(ticket_id: int) -> str:
        return f"Summarize ticket {ticket_id}."

    summarize_ticket(42)
    # [END howto_decorator_agent]
