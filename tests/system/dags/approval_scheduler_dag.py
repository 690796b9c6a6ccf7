"""The DAG that tests/system/test_real_scheduler_approval.py copies into a fresh dags folder.

``mail`` (high priority, so the single worker slot goes to it first) asks for approval before
"sending" an e-mail and parks; ``other`` can only run once that slot is free. ``APPROVAL_E2E_MARKER``
names a file each real tool run and each ``other`` run appends a line to.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from airflow.sdk import DAG, task
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "approval_real_scheduler"


def _mark(line: str) -> None:
    with open(os.environ["APPROVAL_E2E_MARKER"], "a") as handle:
        handle.write(f"{line} {time.time():.3f} {os.getpid()}\n")


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = [str(part.content) for part in returns if isinstance(part, ToolReturnPart)]
    if not results:
        call = ToolCallPart("send_email", {"to": "team@example.com", "body": "Release 1.2 is out"}, tool_call_id="m1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart("Done: " + "; ".join(results))])


mailer = Agent(FunctionModel(_model), name="mailer")


@mailer.tool_plain(requires_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an e-mail (here: write a line to the marker file)."""
    _mark("send_email")
    return f"sent to {to}"


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(task_id="mail", prompt="Announce release 1.2", agent=mailer, durable=True, priority_weight=100)

    @task(priority_weight=1)
    def other() -> None:
        _mark("other")

    other()
