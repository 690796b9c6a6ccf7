"""What AgentOperator hands to the agent run besides the prompt: ``deps``, ``event_stream_handler``,
and the templated ``durable_cache_path``; under real Airflow runs (dag.test() with real retries)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states, xcom_value
from tests.helpers.operator_runs import durable_operator
from tests.helpers.task_logs import summaries

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

CALLS: Counter[str] = Counter()
EVENTS: dict[int, list[str]] = {}


@dataclass
class Desk:
    """Run dependencies: what a tool needs besides its arguments."""

    team: str
    seen: list[int] = field(default_factory=list)


LOOKED_UP = threading.Event()


def lookup(ctx: RunContext[Desk], ticket_id: int) -> str:
    """Look a ticket up for the team in the run's deps."""
    CALLS["lookup"] += 1
    ctx.deps.seen.append(ticket_id)
    LOOKED_UP.set()
    return f"ticket {ticket_id} belongs to {ctx.deps.team}"


def escalate(ctx: RunContext[Desk], ticket_id: int) -> str:
    """Escalate; fails on the first try, after the lookup beside it has returned.

    The two calls run in parallel threads. Had escalate raised first, pydantic-ai would cancel the run's
    other calls before reporting lookup's result, and whether an event stream sees that result would
    depend on which thread won (it did not, now and then, under pydantic-ai 2.62).
    """
    CALLS["escalate"] += 1
    if current_try() == 1:
        LOOKED_UP.wait(timeout=10)
        time.sleep(0.5)  # and the event loop has handed lookup's result on
        raise ConnectionError("pager down (first try only)")
    return f"escalated to {ctx.deps.team} (deps saw {len(ctx.deps.seen)} lookups in this process)"


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    """This module's counts start empty (the cache folder is the dags tier's ``cache_base``)."""
    CALLS.clear()
    EVENTS.clear()
    LOOKED_UP.clear()


def test_deps_reach_tools_and_a_replayed_tool_does_not_touch_them(capfd):
    desk = Desk(team="payments")
    with make_dag("e2e_deps") as dag:
        durable_operator(lookup, escalate, deps=desk)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success", out[-3000:]
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    # Try 2 replays the model's answer and lookup's result: lookup did not run again, so it did not
    # touch deps again, while escalate (live on both tries) read deps each time.
    assert CALLS == {"lookup": 1, "escalate": 2}
    assert summaries(out)[-1][:3] == (2, 1, 1)
    result = xcom_value(dr, "triage")
    assert "belongs to payments" in result
    assert "escalated to payments" in result


def test_deps_pass_through_the_decorator(capfd):
    from airflow.sdk import task

    with make_dag("e2e_deps_decorator") as dag:

        @task.pydantic_ai(model_id="test", toolsets=[FunctionToolset([lookup])], deps=Desk(team="infra"))
        def ask() -> str:
            return "Look up ticket 7."

        ask()
    dr = run_dag(dag)
    capfd.readouterr()
    assert dr.state == "success"
    assert "belongs to infra" in xcom_value(dr, "ask")


async def record_events(ctx: RunContext[Any], events: Any) -> None:
    kinds = EVENTS.setdefault(current_try(), [])
    async for event in events:
        kinds.append(type(event).__name__)


def test_event_stream_handler_sees_live_and_replayed_steps(capfd):
    with make_dag("e2e_event_stream") as dag:
        durable_operator(lookup, escalate, deps=Desk(team="payments"), event_stream_handler=record_events)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success", out[-3000:]
    assert CALLS == {"lookup": 1, "escalate": 2}
    assert summaries(out)[-1][:3] == (2, 1, 1)
    live, replayed = EVENTS[1], EVENTS[2]
    # Try 1 streams the live answer; try 2 gets the recorded answer as a completed stream whose part
    # events are rebuilt, and tool events for the replayed call as for a live one.
    for kinds in (live, replayed):
        assert "PartStartEvent" in kinds
        assert kinds.count("FunctionToolCallEvent") == 2
    assert live.count("FunctionToolResultEvent") == 1, "escalate raised on try 1: no result event"
    assert replayed.count("FunctionToolResultEvent") == 2, "the replayed lookup reports its result like a live one"


def test_durable_cache_path_is_templated(capfd, tmp_path):
    with make_dag("e2e_templated_cache_path") as dag:
        durable_operator(
            lookup,
            escalate,
            deps=Desk(team="payments"),
            durable_cache_path=f"file://{tmp_path}/per-dag/{{{{ dag.dag_id }}}}",
        )
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success", out[-3000:]
    location = f"file://{tmp_path}/per-dag/e2e_templated_cache_path/e2e_templated_cache_path/{dr.run_id}/triage/-1/"
    assert out.count(f"Durable: the cache of this task instance is {location}") == 2
    assert CALLS == {"lookup": 1, "escalate": 2}
