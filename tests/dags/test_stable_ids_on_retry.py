"""Stable ids under dag.test() with a real retry: the tool that failed on try 1 runs again on try 2 under the same
``run_id`` and ``conversation_id`` (issue 29), and the task succeeds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import RunContext
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.operator_runs import current_try, durable_operator, make_dag

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

SEEN: list[tuple[str, int, str, str]] = []
"""(tool, try number, run_id, conversation_id) of every call that ran."""


@pytest.fixture(autouse=True)
def _fresh_calls():
    SEEN.clear()


def fetch_ticket(ctx: RunContext[Any], ticket_id: int) -> dict:
    """Fetch a ticket."""
    SEEN.append(("fetch_ticket", current_try(), ctx.run_id, ctx.conversation_id))
    return {"id": ticket_id, "title": "Login page times out"}


def page_oncall(ctx: RunContext[Any], ticket_id: int) -> str:
    """Page whoever is on call; fails on the first try, after the ticket was fetched."""
    SEEN.append(("page_oncall", current_try(), ctx.run_id, ctx.conversation_id))
    if current_try() == 1:
        raise ConnectionError("pager down (first try only)")
    return "paged"


def test_the_retry_runs_under_the_ids_of_the_first_try():
    with make_dag("stable_ids_retry") as dag:
        durable_operator(fetch_ticket, page_oncall)
    dr = run_dag(dag)

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    # fetch_ticket ran on try 1 only (replayed on try 2); page_oncall ran on both tries.
    assert [(tool, attempt) for tool, attempt, *_ in SEEN] == [
        ("fetch_ticket", 1),
        ("page_oncall", 1),
        ("page_oncall", 2),
    ]
    ids = {(run_id, conversation_id) for *_, run_id, conversation_id in SEEN}
    assert len(ids) == 1, SEEN
    ((run_id, conversation_id),) = ids
    assert run_id != conversation_id
