"""The durable report of one attempt: what it replayed and ran live, the tokens and money the replay saved.

Every attempt ends with one report, built from its :class:`~airflow_pydantic_ai.durable.steps.tally.StepTally`
(nested agent runs included), logged at INFO right after the summary line and pushed by the operator as
the XCom ``durable_report`` (also on a failed try). Its JSON shape is documented in ``docs/retry_savings.rst``
and versioned by :data:`REPORT_SCHEMA_VERSION`: a key is only ever added within a version; a key removed
or changed in meaning bumps it.

Guarantees: the report holds counts, token figures, costs, the names of changed request components and
the cache's location, never a prompt, a payload or a model output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow_pydantic_ai.durable.steps.tally import STEP_KINDS, Spend, StepTally

__all__ = ["REPORT_SCHEMA_VERSION", "REPORT_XCOM_KEY", "AttemptOutcome", "DurableReport"]

REPORT_SCHEMA_VERSION = 1
REPORT_XCOM_KEY = "durable_report"
"""The XCom key the operator pushes the report under: ``ti.xcom_pull(task_ids=..., key="durable_report")``."""

AttemptOutcome = Literal["succeeded", "failed", "waiting", "running"]


@dataclass(frozen=True)
class DurableReport:
    """One attempt's report; :meth:`to_json` is its stable shape."""

    try_number: int
    outcome: AttemptOutcome
    tally: StepTally
    not_persisted: int
    changed: Sequence[str]
    cache_location: str
    cache_deleted: bool

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (the XCom value)."""
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "try_number": self.try_number,
            "outcome": self.outcome,
            "steps": {
                "replayed": _steps(self.tally.saved),
                "executed": _steps(self.tally.live),
                "not_persisted": self.not_persisted,
            },
            "tokens": {
                "live": {"input": self.tally.live.input_tokens, "output": self.tally.live.output_tokens},
                "saved": {"input": self.tally.saved.input_tokens, "output": self.tally.saved.output_tokens},
            },
            "cost_usd": {"live": self.tally.live.cost_usd, "saved": self.tally.saved.cost_usd},
            "unpriced_model_steps": {"live": self.tally.live.unpriced, "saved": self.tally.saved.unpriced},
            "changed": list(self.changed),
            "cache": {"location": self.cache_location, "deleted": self.cache_deleted},
        }

    def log_line(self) -> str:
        """The INFO line logged right after the summary line: the report as compact JSON."""
        return "Durable: report " + json.dumps(self.to_json(), separators=(",", ":"))


def _steps(spend: Spend) -> dict[str, int]:
    counts: dict[str, int] = {kind: spend.steps[kind] for kind in STEP_KINDS}
    return {**counts, "total": sum(counts.values())}
