"""The DAG that tests/system/test_cache_view.py copies into a fresh dags folder.

Not a test module: the real dag-processor parses it and the LocalExecutor runs its task. A
``FunctionModel`` calls three tools one after the other, so a try records five steps (model,
fetch_ticket, model, lookup_owner, model); ``notify_team`` fails while the file named by
``CACHE_VIEW_FAIL`` exists. Every real tool call appends ``<tool> <try number>`` to the file named by
``CACHE_VIEW_CALLS``; ``fetch_ticket`` waits while the file named by ``CACHE_VIEW_HOLD`` exists (a
task instance that stays running).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from airflow.sdk import DAG, get_current_context
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "durable_cache_view"
TASK_ID = "triage"
TOOLS = ("fetch_ticket", "lookup_owner", "notify_team")


def _mark(tool: str) -> None:
    try_number = get_current_context()["ti"].try_number
    with open(os.environ["CACHE_VIEW_CALLS"], "a") as handle:
        handle.write(f"{tool} {try_number}\n")


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket (slowly while the file named by ``CACHE_VIEW_HOLD`` exists)."""
    _mark("fetch_ticket")
    deadline = time.monotonic() + 300
    while os.path.exists(os.environ["CACHE_VIEW_HOLD"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"id": ticket_id, "title": "Login page times out", "reporter": "ops@example.com"}


def lookup_owner(ticket_id: int) -> str:
    """Find who owns the component of a ticket."""
    _mark("lookup_owner")
    return "team-auth"


def notify_team(ticket_id: int) -> str:
    """Notify the owning team; the chat API is down while the failure marker exists."""
    _mark("notify_team")
    if os.path.exists(os.environ["CACHE_VIEW_FAIL"]):
        raise ConnectionError("chat API down")
    return "posted"


def one_tool_at_a_time(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = {part.tool_name for message in messages for part in message.parts if isinstance(part, ToolReturnPart)}
    for tool in TOOLS:
        if tool not in done:
            return ModelResponse(parts=[ToolCallPart(tool, {"ticket_id": 42}, tool_call_id=f"call_{tool}")])
    return ModelResponse(parts=[TextPart("Ticket 42: owned by team-auth, team notified.")])


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(
        task_id=TASK_ID,
        prompt="Triage ticket 42 and notify its owners.",
        agent=Agent(
            FunctionModel(one_tool_at_a_time, model_name="triage-model"),
            toolsets=[FunctionToolset([fetch_ticket, lookup_owner, notify_team])],
        ),
        durable=True,
        retries=0,
    )
