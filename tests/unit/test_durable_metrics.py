"""The durable report counted in Airflow's Stats: names under one prefix, the docs table equal to the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.durable import DurableHarness
from tests.helpers.weather import flaky_agent

from airflow_pydantic_ai.tries.metrics import METRIC_NAMES, METRIC_PREFIX, airflow_stats, count_attempt

DOCS = Path(__file__).resolve().parents[2] / "docs" / "retry_savings.rst"


class RecordingStats:
    """A stand-in for Airflow's ``Stats`` that keeps what it was sent (the seam ``count_attempt`` offers)."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.tags: list[dict[str, Any] | None] = []

    def incr(self, stat: str, count: int = 1, rate: int = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.sent[stat] = self.sent.get(stat, 0) + count
        self.tags.append(tags)


def test_a_retry_counts_replayed_and_executed_steps_and_saved_tokens(tmp_path):
    harness = DurableHarness(base=str(tmp_path / "cache"))
    agent = flaky_agent([True])
    stats = RecordingStats()
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather")
    _result, run, _log = harness.run(agent, "weather")
    count_attempt(run.report().to_json(), tags={"dag_id": "d", "task_id": "t"}, stats=stats)
    assert stats.sent == {
        f"{METRIC_PREFIX}.steps.replayed.model": 1,
        f"{METRIC_PREFIX}.steps.executed.model": 1,
        f"{METRIC_PREFIX}.steps.executed.tool": 1,
        f"{METRIC_PREFIX}.tokens.saved.input": 100,
        f"{METRIC_PREFIX}.tokens.saved.output": 10,
        f"{METRIC_PREFIX}.tokens.live.input": 200,
        f"{METRIC_PREFIX}.tokens.live.output": 20,
        f"{METRIC_PREFIX}.attempts.succeeded": 1,
    }
    assert set(stats.sent) <= set(METRIC_NAMES)
    assert all(tags == {"dag_id": "d", "task_id": "t"} for tags in stats.tags)


def test_costs_are_sent_in_millionths_of_a_usd():
    report = {
        "outcome": "failed",
        "steps": {
            "replayed": dict.fromkeys(("model", "tool", "output", "decision"), 0),
            "executed": dict.fromkeys(("model", "tool", "output", "decision"), 0),
            "not_persisted": 0,
        },
        "tokens": {"live": {"input": 0, "output": 0}, "saved": {"input": 0, "output": 0}},
        "cost_usd": {"live": 0.0125, "saved": None},
    }
    stats = RecordingStats()
    count_attempt(report, tags={}, stats=stats)
    assert stats.sent == {f"{METRIC_PREFIX}.cost.live_micro_usd": 12_500, f"{METRIC_PREFIX}.attempts.failed": 1}


def test_a_failing_metrics_backend_never_fails_the_task():
    class Broken:
        def incr(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("statsd unreachable")

    warnings: list[str] = []
    report = {
        "outcome": "succeeded",
        "steps": {
            "replayed": dict.fromkeys(("model", "tool", "output", "decision"), 1),
            "executed": {},
            "not_persisted": 0,
        },
        "tokens": {"live": {"input": 0, "output": 0}, "saved": {"input": 0, "output": 0}},
        "cost_usd": {"live": None, "saved": None},
    }
    report["steps"]["executed"] = dict.fromkeys(("model", "tool", "output", "decision"), 0)
    count_attempt(report, tags={}, stats=Broken(), warn=lambda msg, *args: warnings.append(msg % args))
    assert warnings == ["Durable: could not send the attempt's metrics to Airflow's Stats: statsd unreachable"]


def test_the_default_client_is_airflows_stats():
    assert callable(airflow_stats().incr)


def test_the_docs_table_names_every_metric():
    documented = set(re.findall(r"``(pydantic_ai\.durable\.[a-z_.]+)``", DOCS.read_text()))
    assert documented == set(METRIC_NAMES)
