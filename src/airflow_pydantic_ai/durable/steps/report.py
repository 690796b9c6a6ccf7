"""The durable report of one attempt: what it replayed and ran live, the tokens and money the replay saved.

Every attempt ends with one report, built from its one count
(:class:`~airflow_pydantic_ai.durable.accounting.Accounting`, nested agent runs included), logged at INFO
right after the summary line and pushed by the operator as the XCom ``durable_report`` (also on a failed
try). Its JSON shape is documented in ``docs/retry_savings.rst`` and versioned by
:data:`REPORT_SCHEMA_VERSION`: a key is only ever added within a version; a key removed or changed in
meaning bumps it.

Guarantees: the report holds counts, token figures, costs, the names of changed request components and
the cache's location, never a prompt, a payload or a model output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from airflow_pydantic_ai.durable.accounting import Accounting, Spend
from airflow_pydantic_ai.durable.kinds import COUNTED_KINDS, KINDS

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
    accounting: Accounting
    not_persisted: int
    changed: Sequence[str]
    cache_location: str
    cache_deleted: bool

    metric_kinds: ClassVar[dict[str, str]] = {
        role: str(KINDS[role].metric) for role in COUNTED_KINDS if KINDS[role].metric is not None
    }
    """The report's step kinds (keys of ``steps.replayed``) and each one's part in the metric names."""

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (the XCom value)."""
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "try_number": self.try_number,
            "outcome": self.outcome,
            "steps": {
                "replayed": _steps(self.accounting.saved),
                "executed": _steps(self.accounting.live),
                "not_persisted": self.not_persisted,
            },
            "tokens": {
                "live": {"input": self.accounting.live.input_tokens, "output": self.accounting.live.output_tokens},
                "saved": {"input": self.accounting.saved.input_tokens, "output": self.accounting.saved.output_tokens},
            },
            "cost_usd": {"live": self.accounting.live.cost_usd, "saved": self.accounting.saved.cost_usd},
            "unpriced_model_steps": {"live": self.accounting.live.unpriced, "saved": self.accounting.saved.unpriced},
            "changed": list(self.changed),
            "cache": {"location": self.cache_location, "deleted": self.cache_deleted},
        }

    def log_line(self) -> str:
        """The INFO line logged right after the summary line: the report as compact JSON."""
        return "Durable: report " + json.dumps(self.to_json(), separators=(",", ":"))


def _steps(spend: Spend) -> dict[str, int]:
    counts: dict[str, int] = {str(kind): count for kind, count in spend.by_kind().items()}
    return {**counts, "total": sum(counts.values())}
