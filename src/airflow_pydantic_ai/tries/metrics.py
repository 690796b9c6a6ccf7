"""What durable attempts saved, counted in Airflow's ``Stats`` (statsd or OpenTelemetry, as the deployment set it).

One call per attempt, at its end, from its durable report (:func:`count_attempt`). Every name starts with
``METRIC_PREFIX``; Airflow adds its own prefix in front (``[metrics] statsd_prefix``, ``airflow`` by
default). The table of names is in ``docs/retry_savings.rst``; ``METRIC_NAMES`` is the same list, so a
test keeps the two equal.

Guarantees: counters only (monotonic, summed by the backend across workers); a zero is not sent; costs are
sent in millionths of a USD, since statsd counters are integers; a metrics backend that fails never fails
the task (a WARNING says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from airflow_pydantic_ai.durable import DurableReport

__all__ = ["METRIC_NAMES", "METRIC_PREFIX", "StatsClient", "airflow_stats", "count_attempt", "metric_tags"]

METRIC_PREFIX = "pydantic_ai.durable"

_KINDS = DurableReport.metric_kinds  # the report's step kinds -> their metric names (the kind table's)
METRIC_NAMES: tuple[str, ...] = (
    *(f"{METRIC_PREFIX}.steps.replayed.{metric}" for metric in _KINDS.values()),
    *(f"{METRIC_PREFIX}.steps.executed.{metric}" for metric in _KINDS.values()),
    f"{METRIC_PREFIX}.steps.not_persisted",
    f"{METRIC_PREFIX}.tokens.saved.input",
    f"{METRIC_PREFIX}.tokens.saved.output",
    f"{METRIC_PREFIX}.tokens.live.input",
    f"{METRIC_PREFIX}.tokens.live.output",
    f"{METRIC_PREFIX}.cost.saved_micro_usd",
    f"{METRIC_PREFIX}.cost.live_micro_usd",
    f"{METRIC_PREFIX}.attempts.succeeded",
    f"{METRIC_PREFIX}.attempts.failed",
    f"{METRIC_PREFIX}.attempts.waiting",
)


class StatsClient(Protocol):
    """The part of Airflow's ``Stats`` this module uses."""

    def incr(self, stat: str, count: int = 1, rate: int = 1, *, tags: dict[str, Any] | None = None) -> None: ...


def airflow_stats() -> StatsClient:
    """Airflow's ``Stats`` (common.compat's stable name for it: it moved into the task SDK in Airflow 3.3)."""
    from airflow.providers.common.compat.sdk import Stats

    return Stats  # type: ignore[no-any-return]


def metric_tags(ti: Any) -> dict[str, str]:
    """The tags every metric carries (backends with tags use them; plain statsd drops them)."""
    return {"dag_id": str(ti.dag_id), "task_id": str(ti.task_id)}


def count_attempt(
    report: Mapping[str, Any], *, tags: dict[str, str], stats: StatsClient | None = None, warn: Any = None
) -> None:
    """Count one attempt's durable report (its JSON shape, ``DurableReport.to_json()``) in ``stats``."""
    values: dict[str, int] = {}
    for side in ("replayed", "executed"):
        for kind, metric in _KINDS.items():
            values[f"{METRIC_PREFIX}.steps.{side}.{metric}"] = int(report["steps"][side][kind])
    values[f"{METRIC_PREFIX}.steps.not_persisted"] = int(report["steps"]["not_persisted"])
    for side in ("saved", "live"):
        for direction in ("input", "output"):
            values[f"{METRIC_PREFIX}.tokens.{side}.{direction}"] = int(report["tokens"][side][direction])
        cost = report["cost_usd"][side]
        if cost is not None:
            values[f"{METRIC_PREFIX}.cost.{side}_micro_usd"] = round(cost * 1_000_000)
    outcome = f"{METRIC_PREFIX}.attempts.{report['outcome']}"
    if outcome in METRIC_NAMES:
        values[outcome] = 1
    client = stats if stats is not None else airflow_stats()
    try:
        for name, count in values.items():
            if count:
                client.incr(name, count, tags=tags)
    except Exception as error:
        if warn is not None:
            warn("Durable: could not send the attempt's metrics to Airflow's Stats: %s", error)
