"""The agent that recorded ``tests/fixtures/cache_0_1_0`` (a cache written by release 0.1.0).

Its output type lives in this importable module so that the recorded output replays in any process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, ToolOutput
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import task_identity

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cache_0_1_0"
IDENTITY = task_identity("fixture_dag", "triage", run_id="manual__2026-11-23T10:00:00+00:00")


class Triage(BaseModel):
    priority: int
    summary: str


def fixture_agent(calls: list[str]) -> Agent[None, Triage]:
    """The agent that recorded the fixture (keep it exactly as it is)."""

    def file_triage(priority: int, summary: str) -> Triage:
        calls.append("file_triage")
        return Triage(priority=priority, summary=summary)

    agent = Agent(TestModel(), output_type=ToolOutput(file_triage), instructions="Triage ticket 42.")

    @agent.tool_plain
    def fetch_ticket(ticket_id: int) -> dict[str, Any]:
        calls.append("fetch_ticket")
        return {"id": ticket_id, "title": "Printer on fire", "tags": ("hw", "urgent")}

    @agent.tool_plain
    def flaky_lookup(q: str) -> str:
        calls.append("flaky_lookup")
        if calls.count("flaky_lookup") == 1:
            raise ModelRetry("rate limited, try again")
        return "found"

    return agent


def replay_the_fixture(store: Any, log: Any) -> None:
    """Run the fixture's agent as attempt 2 on ``store`` and check that all 7 recorded steps replayed, silently."""
    from airflow_pydantic_ai.durable import Attempt, run_agent

    run = Attempt.open(store, attempt=2, log=log)
    calls: list[str] = []
    with run.ending():
        result = run_agent(run, fixture_agent(calls), "triage")
    assert calls == [], log.lines  # no tool and no output function ran again
    assert result.output == Triage(priority=0, summary="a")
    assert "Durable: replayed 7 cached steps (3 model, 4 tool), executed 0 new steps (0 model, 0 tool)" in log.at(
        "info"
    )
    assert not log.at("warning") + log.at("error"), log.lines
