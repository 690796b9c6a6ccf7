"""
A payment tool that must never run twice: ``at_most_once()``, ``idempotency_key()`` and a person in the loop.

No API key needed (a FunctionModel plays the LLM). ``settle_invoice`` runs a durable agent whose
``charge_card`` tool is marked ``at_most_once()``: before each call the task records that the call
started. If the worker dies while the card is being charged (kill it while the tool sleeps: set
``EXAMPLE_PAYMENT_SECONDS=30`` and ``kill -9`` the task's process), the retry finds the call started and never
finished and does not charge again: it asks on the task's **Required Actions** page ("It happened", with the
receipt to give the model; "Run it again"; "Fail the task"), as ``on_unknown_outcome="ask"`` says.

The tool also sends ``idempotency_key()`` to the payment ledger, which records one payment per key: the
same call gets the same key on every try, so even a person who answers "Run it again" cannot make the
customer pay twice. The ledger is a SQLite file beside the cache (``EXAMPLE_PAYMENTS_DB`` to move it).

``docs/side_effects.rst`` says what happens at each point a try can be cut off, for every kind of tool.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai import at_most_once, idempotency_key
from airflow_pydantic_ai.operators.agent import AgentOperator

log = logging.getLogger("example_at_most_once.tools")


def _cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for an LLM: charges the invoice, then reports the receipt."""
    receipts = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not receipts:
        call = ToolCallPart("charge_card", {"customer": "acme", "amount_cents": 4200}, tool_call_id="charge-1")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(f"Invoice settled: {receipts[-1]}")])


def _ledger() -> sqlite3.Connection:
    """The payment provider's side, here a SQLite file: one payment per idempotency key."""
    path = os.environ.get("EXAMPLE_PAYMENTS_DB") or os.path.join(tempfile.gettempdir(), "example_payments.db")
    connection = sqlite3.connect(path)
    connection.execute(
        "CREATE TABLE IF NOT EXISTS payments (idempotency_key TEXT PRIMARY KEY, customer TEXT, amount_cents INTEGER)"
    )
    return connection


# [START howto_at_most_once]
cashier = Agent(FunctionModel(_cashier), name="cashier")


@cashier.tool_plain(metadata=at_most_once())
def charge_card(customer: str, amount_cents: int) -> str:
    """Charge the customer's card (here: a row in the ledger, once per idempotency key)."""
    key = idempotency_key()
    time.sleep(float(os.environ.get("EXAMPLE_PAYMENT_SECONDS", "0")))  # the window a kill can land in
    with _ledger() as ledger:
        ledger.execute(
            "INSERT INTO payments VALUES (?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
            (key, customer, amount_cents),
        )
    log.info("charge_card: %s charged %d cents (idempotency key %s)", customer, amount_cents, key)
    return f"receipt {key[-8:]} for {amount_cents} cents"


with DAG(
    dag_id="example_at_most_once",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai"],
):
    AgentOperator(
        task_id="settle_invoice",
        prompt="Settle invoice 2026-118 for customer acme (42.00 EUR).",
        agent=cashier,
        durable=True,
        retries=2,
        retry_delay=timedelta(seconds=10),
        on_unknown_outcome="ask",  # the default; "fail" or "rerun" where nobody should be asked
        approval_timeout=timedelta(hours=4),  # how long the question waits; then the task fails
    )
# [END howto_at_most_once]
