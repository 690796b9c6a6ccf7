"""The DAG that tests/system/test_calls_in_doubt_browser.py copies into a fresh dags folder.

``charge`` asks for two ``at_most_once()`` charges in one model answer. On its first try both charges start (each
writes a line to ``DOUBT_E2E_MARKER`` and waits until the other has), then the task process SIGKILLs itself: a
worker lost while both calls ran. Its retry finds both calls started and never finished, and asks a person.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, get_current_context
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "two_calls_in_doubt"
CUSTOMERS = ("acme", "globex")


def _cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = sorted(str(part.content) for part in returns if isinstance(part, ToolReturnPart))
    if results:
        return ModelResponse(parts=[TextPart("Settled: " + "; ".join(results))])
    return ModelResponse(
        parts=[
            ToolCallPart("charge_card", {"customer": customer, "amount_cents": 4200}, tool_call_id=f"charge-{customer}")
            for customer in CUSTOMERS
        ]
    )


cashier = Agent(FunctionModel(_cashier), name="cashier")


@cashier.tool_plain(metadata=at_most_once())
def charge_card(customer: str, amount_cents: int) -> str:
    """Charge the card (a line in the marker file); on try 1 the process dies once both charges happened."""
    try_number = get_current_context()["ti"].try_number
    marker = Path(os.environ["DOUBT_E2E_MARKER"])
    with marker.open("a") as handle:
        handle.write(f"charge_card {customer} try={try_number}\n")
    if try_number == 1:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and marker.read_text().count("try=1") < len(CUSTOMERS):
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"receipt for {customer} (charged again)"


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    AgentOperator(
        task_id="charge",
        prompt="Settle invoices 118 and 119",
        agent=cashier,
        durable=True,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
