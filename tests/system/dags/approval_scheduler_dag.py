"""The DAG that tests/system/test_real_scheduler_approval.py copies into a fresh dags folder.

``mail`` (high priority, so the single worker slot goes to it first) asks for approval before
"sending" an e-mail and parks; ``other`` can only run once that slot is free. ``APPROVAL_E2E_MARKER``
names a file each real tool run and each ``other`` run appends a line to.

``unknown_outcome_real_scheduler``: ``charge`` charges a card in an ``at_most_once()`` tool and, on its first try,
SIGKILLs its own task process right after the charge (a worker lost mid-call); its retry finds the call started
and never finished, and asks a person (``on_unknown_outcome="ask"``, the default).
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, get_current_context, task
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "approval_real_scheduler"
UNKNOWN_DAG_ID = "unknown_outcome_real_scheduler"


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


def _cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = [str(part.content) for part in returns if isinstance(part, ToolReturnPart)]
    if not results:
        call = ToolCallPart("charge_card", {"customer": "acme", "amount_cents": 4200}, tool_call_id="charge-1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart("Settled: " + "; ".join(results))])


cashier = Agent(FunctionModel(_cashier), name="cashier")


@cashier.tool_plain(metadata=at_most_once())
def charge_card(customer: str, amount_cents: int) -> str:
    """Charge the card (here: a line in the marker file); the first try's process dies right after it."""
    try_number = get_current_context()["ti"].try_number
    _mark(f"charge_card try={try_number}")
    if try_number == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "receipt r-live"


with DAG(dag_id=UNKNOWN_DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(
        task_id="charge",
        prompt="Settle invoice 118",
        agent=cashier,
        durable=True,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
