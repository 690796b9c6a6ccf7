"""
Tools that resume on a retry instead of starting over: ``tool_checkpoint()`` and ``idempotency_key()``.

No API key and no network needed: pydantic-ai's ``TestModel`` plays the LLM (it calls each tool once, then
answers), and the outside world is simulated in a folder (``EXAMPLE_RESUMABLE_STATE``, a temporary folder by
default).

``build_forecast`` gives its agent two tools:

- ``place_order`` sends an HTTP-style request with ``idempotency_key()`` as its ``Idempotency-Key`` header to
  an "order service" that answers a repeated key with its first answer, and upserts the order into a SQLite
  table keyed by the same key (``INSERT ... ON CONFLICT DO NOTHING``). Try 1 loses the response; try 2 sends
  the same request with the same key, and the order exists once.
- ``run_forecast_job`` submits a long job to a "cluster" (a line in a file) and saves the job's id with
  ``tool_checkpoint()`` the moment it has it. Try 2 loses its connection while it waits for the job; on try 3
  the same call gets the id back from ``tool_checkpoint().get("job_id")`` and reconnects to the running job
  instead of submitting a second one (``place_order``'s result replays from the durable cache).

``docs/side_effects.rst`` says what happens at each point a try can be cut off, for every kind of tool.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from airflow_pydantic_ai import idempotency_key, tool_checkpoint
from airflow_pydantic_ai.operators.agent import AgentOperator

log = logging.getLogger("example_resumable_tool.tools")


def _state() -> Path:
    """Where the simulated cluster and order service keep their state."""
    folder = Path(os.environ.get("EXAMPLE_RESUMABLE_STATE") or Path(tempfile.gettempdir()) / "example_resumable")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --- the outside world, simulated ----------------------------------------------------------------------


def _submit_job(region: str) -> str:
    """The cluster takes a job and gives back its id (one line per job submitted)."""
    jobs = _state() / "jobs"
    with jobs.open("a+") as file:
        file.seek(0)
        job_id = f"forecast-{len(file.readlines()) + 1}"
        file.write(f"{job_id} {region}\n")
    return job_id


def _poll_job(job_id: str) -> bool:
    """Whether the job is done: it takes two polls, however many workers ask."""
    polls = _state() / f"polls-{job_id}"
    count = int(polls.read_text()) + 1 if polls.exists() else 1
    polls.write_text(str(count))
    return count >= 2


def _database() -> sqlite3.Connection:
    connection = sqlite3.connect(_state() / "orders.db")
    connection.execute("CREATE TABLE IF NOT EXISTS requests (idempotency_key TEXT PRIMARY KEY, response TEXT)")
    connection.execute("CREATE TABLE IF NOT EXISTS orders (idempotency_key TEXT PRIMARY KEY, item TEXT)")
    return connection


def _order_service(headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The server side of an HTTP API that honours ``Idempotency-Key``: a repeated key gets the first answer."""
    key = headers["Idempotency-Key"]
    with _database() as db:
        seen = db.execute("SELECT response FROM requests WHERE idempotency_key = ?", (key,)).fetchone()
        if seen is not None:
            return {**json.loads(seen[0]), "replayed": True}
        response = {"order": f"order-{key[-6:]}", "item": body["item"]}
        db.execute("INSERT INTO requests VALUES (?, ?)", (key, json.dumps(response)))
    return response


# [START howto_resumable_tool]
forecaster = Agent(TestModel(), name="forecaster")


# sequential=True: one call at a time, in the model's order, so the story reads the same on every run.
@forecaster.tool_plain(sequential=True)
def place_order(item: str) -> str:
    """Order an item from the supplier (an HTTP API that deduplicates by Idempotency-Key)."""
    key = idempotency_key()  # the same on every try of this call
    answer = _order_service({"Idempotency-Key": key}, {"item": item})
    with _database() as db:  # the order, once per key however often this runs
        db.execute("INSERT INTO orders VALUES (?, ?) ON CONFLICT (idempotency_key) DO NOTHING", (key, item))
    if not answer.get("replayed"):  # the simulation: the first response to each request is lost
        raise ConnectionError("the order service's response was lost; a retry sends the same request again")
    log.info("place_order: %s (idempotency key %s, answered again by the service)", answer["order"], key)
    return f"ordered {item}: {answer['order']}"


@forecaster.tool_plain(sequential=True)
def run_forecast_job(region: str) -> str:
    """Run the demand forecast for a region on the cluster (a long job) and return where its result is."""
    checkpoint = tool_checkpoint()
    job_id = checkpoint.get("job_id")
    if job_id is None:
        job_id = _submit_job(region)
        checkpoint.save("job_id", job_id)  # stored at once: a retry of this call reads it back
        log.info("run_forecast_job: submitted %s", job_id)
    else:
        log.info("run_forecast_job: reconnected to %s", job_id)
    if not _poll_job(job_id):
        raise TimeoutError(f"lost the connection while {job_id} runs; a retry reconnects to it")
    return f"forecast for {region} ready: {job_id}"


# [END howto_resumable_tool]


with DAG(
    dag_id="example_resumable_tool",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai"],
    # Try 1 loses the order's response, try 2 the connection to the forecast job; try 3 finishes.
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0)},
):
    AgentOperator(
        task_id="build_forecast",
        prompt="Forecast demand for the north region and order what the forecast needs.",
        agent=forecaster,
        durable=True,
    )
