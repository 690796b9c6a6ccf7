"""
Durable agents without an API key: a scripted model (pydantic-ai's ``FunctionModel``) plays the LLM.

The three tasks run one after the other, so their logs read in order:

``triage_ticket`` asks for two tools on ticket 42; ``notify_team`` fails on the first try, as a
flaky API would, and the task fails. On the retry the model's answer and ``fetch_ticket``'s result
replay from the durable cache; only ``notify_team`` and the model's final answer run live.

``prompt_changes_between_tries`` has a prompt templated on the try number, so the retry's request
differs from the recorded one: the task log warns that the user prompt changed, and the model and
its tools run live.

``summarize_ticket`` is an agent written with the ``@task.pydantic_ai`` decorator, on ``TestModel``
(whose canned answer is "success (no tool calls)").

``make demo`` runs this DAG with ``airflow dags test`` and prints each try's steps in order.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from airflow.sdk import DAG, get_current_context, task
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

# The tools run in a worker thread beside the durable layer's own log lines: log, don't print.
log = logging.getLogger("example_durable_agent.tools")


# [START howto_operator_agent_durable]
def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a support ticket (a stand-in for a slow, billed API)."""
    log.info("fetch_ticket(%s) called on try %s", ticket_id, get_current_context()["ti"].try_number)
    return {"id": ticket_id, "title": "Login page times out", "priority": "high"}


def notify_team(ticket_id: int) -> str:
    """Post the ticket to the team channel; the 'API' is down on the first try."""
    try_number = get_current_context()["ti"].try_number
    log.info("notify_team(%s) called on try %s", ticket_id, try_number)
    if try_number == 1:
        raise ConnectionError("team chat API unavailable (simulated, first try only)")
    return f"ticket {ticket_id} posted"


def scripted_llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the LLM: asks for both tools on the ticket named in the prompt, then answers from their results."""
    prompt = " ".join(
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if part.part_kind == "user-prompt"
    )
    match = re.search(r"ticket (\d+)", prompt)
    ticket_id = int(match.group(1)) if match else 0
    results = [part.content for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if not results:
        return ModelResponse(
            parts=[
                ToolCallPart("fetch_ticket", {"ticket_id": ticket_id}, tool_call_id=f"fetch-{ticket_id}"),
                ToolCallPart("notify_team", {"ticket_id": ticket_id}, tool_call_id=f"notify-{ticket_id}"),
            ]
        )
    return ModelResponse(parts=[TextPart(f"Ticket {ticket_id} triaged: {results}")])


# With a real model, pass model_id="openai:gpt-4o" (or llm_conn_id=...), system_prompt= and
# toolsets= to AgentOperator instead of a ready agent.
triage_agent = Agent(
    FunctionModel(scripted_llm, model_name="scripted-llm"),
    instructions="You are a support triage assistant.",
    toolsets=[FunctionToolset([fetch_ticket, notify_team])],
)
# [END howto_operator_agent_durable]

with DAG(
    dag_id="example_durable_agent",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    tags=["example", "pydantic-ai"],
):
    # [START howto_operator_agent_durable_task]
    triage_ticket = AgentOperator(
        task_id="triage_ticket",
        prompt="Triage ticket 42 and notify the team.",
        agent=triage_agent,
        durable=True,
    )
    # [END howto_operator_agent_durable_task]

    prompt_changes_between_tries = AgentOperator(
        task_id="prompt_changes_between_tries",
        prompt="Triage ticket 7 and notify the team (try {{ ti.try_number }}).",
        agent=triage_agent,
        durable=True,
    )

    # [START howto_decorator_agent]
    @task.pydantic_ai(model_id="test", system_prompt="Summarize support tickets in one line.", durable=True)
    def summarize_ticket(ticket_id: int) -> str:
        return f"Summarize ticket {ticket_id}."

    # [END howto_decorator_agent]

    triage_ticket >> prompt_changes_between_tries >> summarize_ticket(42)
