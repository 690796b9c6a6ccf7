"""Tokens and cost of recorded model steps, as the read side shows them (``cache show`` and the UI view).

A model entry keeps, beside its response, what the request reported (``input_tokens``, ``output_tokens``)
and, since the release after 0.2.0, its estimated cost in USD where pydantic-ai has a price for the model (``cost_usd``,
computed when the step was recorded, so reading never prices anything). :func:`replay_total` is the one
line both the command and the view print under the steps: what a retry would replay, and what it saves.

No I/O and no pydantic-ai: this reads the numbers the entry holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from airflow_pydantic_ai.durable.kinds import KINDS
from airflow_pydantic_ai.durable.reporting.accounting import Spend
from airflow_pydantic_ai.durable.wording import plural

__all__ = ["StepCost", "format_usd", "replay_total"]

_REPLAYABLE = frozenset(role for role, spec in KINDS.items() if spec.is_step)


@dataclass(frozen=True)
class StepCost:
    """What one recorded model step reported; all None for other steps."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None

    @classmethod
    def of(cls, kind: str, usage: Mapping[str, Any]) -> StepCost:
        if kind != "model":
            return cls()
        return cls(_int(usage.get("input_tokens")), _int(usage.get("output_tokens")), _float(usage.get("cost_usd")))

    @property
    def tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    @property
    def price(self) -> str | None:
        """The cost as people read it (:func:`format_usd`), or None when the step reported none."""
        return None if self.cost_usd is None else format_usd(self.cost_usd)


def format_usd(amount: float) -> str:
    """``~$0.04``; small amounts keep four decimals (``~$0.0035``)."""
    return f"~${amount:,.2f}" if amount >= 1 or amount == 0 else f"~${amount:.4f}"


def replay_total(steps: Sequence[tuple[str, StepCost]]) -> str:
    """``A retry replays 7 steps (5 model): 12,400 tokens (11,000 input, 1,400 output), ~$0.0400`` for
    ``steps`` given as ``(kind, cost)`` pairs in the read side's order."""
    spend = Spend()  # the attempt's own count, on what the cache holds
    for kind, cost in steps:
        if kind not in _REPLAYABLE:
            continue
        spend.add(kind)  # type: ignore[arg-type]
        if kind == "model":
            price = None if cost.cost_usd is None else Decimal(str(cost.cost_usd))
            spend.add_request(cost.input_tokens or 0, cost.output_tokens or 0, price)
    models, input_tokens, output_tokens = spend.steps["model"], spend.input_tokens, spend.output_tokens
    line = (
        f"A retry replays {plural(spend.total_steps, 'step')} ({models} model): "
        f"{input_tokens + output_tokens:,} tokens ({input_tokens:,} input, {output_tokens:,} output)"
    )
    if spend.priced:
        line += f", {format_usd(float(spend.cost))}"
        if spend.unpriced:
            line += f" (+ {plural(spend.unpriced, 'model step')} without a price)"
    elif models:
        line += ", cost unknown (no price for the model)"
    return line


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
