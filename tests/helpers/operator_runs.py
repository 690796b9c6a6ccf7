"""What the AgentOperator tests under dag.test() share (tests/dags/test_operator_*.py): the tools, the summary
lines and the files a run leaves. Their cache folder is the ``cache_base`` fixture of tests/dags/conftest.py;
``make_dag`` and ``current_try`` are tests/helpers/airflow_run.py's, named here too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import current_try, make_dag, task_states, xcom_value
from tests.helpers.task_logs import SUMMARY, summaries

__all__ = [
    "CALLS",
    "SUMMARY",
    "current_try",
    "durable_and_plain_output",
    "durable_operator",
    "entries_under",
    "fetch_ticket",
    "files_under",
    "make_dag",
    "notify_team",
    "summaries",
    "tools",
]

CALLS: Counter[str] = Counter()


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket."""
    CALLS["fetch_ticket"] += 1
    return {"id": ticket_id, "title": "Login page times out"}


def notify_team(ticket_id: int) -> str:
    """Notify the team; fails on the first try."""
    CALLS["notify_team"] += 1
    if current_try() == 1:
        raise ConnectionError("chat API down (first try only)")
    return "posted"


def tools() -> FunctionToolset[Any]:
    return FunctionToolset([fetch_ticket, notify_team])


def durable_operator(
    *tool_functions: Callable[..., Any], task_id: str = "triage", prompt: str = "Triage ticket 42.", **operator: Any
) -> Any:
    """A durable ``AgentOperator`` on pydantic-ai's ``TestModel`` (which calls each tool once, then answers) with
    these tool functions; ``operator`` adds to or overrides its other arguments. Call it inside a DAG."""
    from airflow_pydantic_ai.operators.agent import AgentOperator

    return AgentOperator(
        task_id=task_id,
        prompt=prompt,
        model_id="test",
        toolsets=[FunctionToolset(list(tool_functions))],
        **{"durable": True, **operator},
    )


def files_under(path: Path) -> list[Path]:
    return sorted(item for item in path.rglob("*") if item.is_file()) if path.exists() else []


def entries_under(path: Path) -> list[str]:
    """The names of the step entries, single or packed (not the per-try ``.attempt-N`` records beside them)."""
    from tests.helpers.durable import stored_entries

    return sorted(stored_entries(path)) if path.exists() else []


def durable_and_plain_output(dr: Any) -> Any:
    """Asserts that the run's tasks ``durable`` and ``plain`` (the same agent without durable) both succeeded
    on try 2 with the same output, and returns that output."""
    assert dr.state == "success"
    states = task_states(dr)
    assert states[("durable", -1)] == states[("plain", -1)] == ("success", 2)
    output = xcom_value(dr, "durable")
    assert output == xcom_value(dr, "plain")
    return output
