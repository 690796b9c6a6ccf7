"""The durable report of one attempt: what it replayed and ran live, the tokens and money the replay saved.

Every attempt ends with one report, built from its one count
(:class:`~airflow_pydantic_ai.durable.reporting.accounting.Accounting`, nested agent runs included), pushed by the
operator as the XCom ``durable_report`` (also on a failed try); the task log gets one readable line of it
(:meth:`DurableReport.log_line`) right after the summary line, never the JSON. Its JSON shape is documented
in ``docs/retry_savings.rst`` and versioned by :data:`REPORT_SCHEMA_VERSION`: a key is only ever added
within a version; a key removed or changed in meaning bumps it.

Guarantees: the report holds counts, token figures, costs, the names of changed request components and
the cache's location, never a prompt, a payload or a model output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from airflow_pydantic_ai.durable.kinds import COUNTED_KINDS, KINDS
from airflow_pydantic_ai.durable.reporting.accounting import Accounting, Spend
from airflow_pydantic_ai.durable.storage.step_costs import format_usd
from airflow_pydantic_ai.durable.wording import plural

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
    waiting_for: str = "a person"
    """Whom a ``waiting`` try waits for (the log line says it; not in the JSON, whose ``outcome`` stays ``waiting``)."""

    xcom_key: ClassVar[str] = REPORT_XCOM_KEY
    """The XCom key the Airflow side pushes the report under (``tries/report.py``)."""
    metric_kinds: ClassVar[dict[str, str]] = {
        role: str(KINDS[role].metric) for role in COUNTED_KINDS if KINDS[role].metric is not None
    }
    """The report's step kinds (keys of ``steps.replayed``) and each one's part in the metric names."""

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (the XCom value); ``batched`` only when a provider's batch API answered some of
        the live requests (issue 38)."""
        live = self.accounting.live
        batched = {
            "requests": live.batched,
            "saved_usd": float(round(live.batch_saved, 8)),
            "without_batch_price": live.batch_unpriced,
        }
        return {**self._json(), **({"batched": batched} if live.batched else {})}

    def _json(self) -> dict[str, Any]:
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
        """The INFO line logged right after the summary line, for a person: how the try ended, what its live model
        requests spent, what the replay saved in money (the savings line after it gives the saved tokens), and
        where the whole report is. ``Durable: try 2 succeeded; live: 1 model request, 113 tokens (103 input, 10
        output), ~$0.0004; the replay saved ~$0.0007; the full report is the XCom durable_report``."""
        ended = f"stopped to wait for {self.waiting_for}" if self.outcome == "waiting" else _OUTCOME_WORDS[self.outcome]
        line = f"Durable: try {self.try_number} {ended}; live: {_spent(self.accounting.live)}"
        if self.accounting.saved.requests and self.accounting.saved.cost_usd is not None:
            line += f"; the replay saved {_money(self.accounting.saved)}"
        return f"{line}; the full report is the XCom {REPORT_XCOM_KEY}"


_OUTCOME_WORDS: dict[AttemptOutcome, str] = {
    "succeeded": "succeeded",
    "failed": "failed",
    "waiting": "stopped to wait for a person",
    "running": "is running",
}


def _spent(spend: Spend) -> str:
    """``1 model request, 113 tokens (103 input, 10 output), ~$0.0004``, or ``no model request``."""
    if not spend.requests:
        return "no model request"
    tokens = spend.input_tokens + spend.output_tokens
    return (
        f"{plural(spend.requests, 'model request')}{_batched(spend)}, {tokens:,} tokens ({spend.input_tokens:,} "
        f"input, {spend.output_tokens:,} output), {_money(spend)}"
    )


def _batched(spend: Spend) -> str:
    """`` (2 batched, the batch price saved ~$0.0010)``; empty when no request was batched (issue 38)."""
    if not spend.batched:
        return ""
    text = f" ({spend.batched} batched"
    if spend.batch_unpriced < spend.batched:
        text += f", the batch price saved {format_usd(float(round(spend.batch_saved, 8)))}"
    if spend.batch_unpriced:
        text += f"; {spend.batch_unpriced} at the standard price: the price data has no batch price for the model"
    return text + ")"


def _money(spend: Spend) -> str:
    """The estimated cost of ``spend``'s requests: ``~$0.0004``, a lower bound, or unknown."""
    if spend.cost_usd is None:
        return "cost unknown (no price for the model)"
    if spend.unpriced:
        return f"{format_usd(spend.cost_usd)} (+ {plural(spend.unpriced, 'request')} without a price)"
    return format_usd(spend.cost_usd)


def _steps(spend: Spend) -> dict[str, int]:
    counts: dict[str, int] = {str(kind): count for kind, count in spend.by_kind().items()}
    return {**counts, "total": sum(counts.values())}
