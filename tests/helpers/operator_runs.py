"""What the AgentOperator tests under dag.test() share: the tools, the DAG factory, the summary lines and the
files a run leaves (tests/dags/test_operator_*.py; their cache folder is the ``cache_base`` fixture of
tests/dags/conftest.py)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.toolsets import FunctionToolset

__all__ = [
    "CALLS",
    "SUMMARY",
    "current_try",
    "entries_under",
    "fetch_ticket",
    "files_under",
    "make_dag",
    "notify_team",
    "summaries",
    "tools",
]

SUMMARY = re.compile(
    r"Durable: replayed (\d+) cached steps \((\d+) model, (\d+) tool\), "
    r"executed (\d+) new steps \((\d+) model, (\d+) tool\)"
)

CALLS: Counter[str] = Counter()


def current_try() -> int:
    from airflow.sdk import get_current_context

    return get_current_context()["ti"].try_number


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


def make_dag(dag_id: str, **default_args: Any):
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        default_args={"retries": 1, "retry_delay": timedelta(0), **default_args},
    )


def summaries(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(group) for group in match.groups()) for match in SUMMARY.finditer(text)]


def files_under(path: Path) -> list[Path]:
    return sorted(item for item in path.rglob("*") if item.is_file()) if path.exists() else []


def entries_under(path: Path) -> list[str]:
    """The names of the step entries, single or packed (not the per-try ``.attempt-N`` records beside them)."""
    from tests.helpers.durable import stored_entries

    return sorted(stored_entries(path)) if path.exists() else []
