"""What one attempt's steps did, by kind, with the tokens and the cost they spent live or saved by replay.

The :class:`StepTally` is the count behind the durable report (``report.py``): every step that ends
(replayed or run live) is counted once, by kind (``model``, ``tool``, ``output``, ``decision``), nested
agent runs included, because they end through the same steps. A model step with a response also brings
its tokens and its cost (priced once by the step, from pydantic-ai's price data: ``cost.py``), for the
live or the saved side.

Guarantees: counting never raises and never does I/O; a step counted as replayed never counts as live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from pydantic_ai.usage import RequestUsage

__all__ = ["STEP_KINDS", "Spend", "StepKind", "StepTally"]

StepKind = Literal["model", "tool", "output", "decision"]
STEP_KINDS: tuple[StepKind, ...] = ("model", "tool", "output", "decision")


@dataclass
class Spend:
    """Steps, tokens and cost on one side of an attempt: what ran live, or what the replay saved."""

    steps: dict[StepKind, int] = field(default_factory=lambda: dict.fromkeys(STEP_KINDS, 0))
    requests: int = 0
    """Model requests with a response (a request that raised has no tokens to count)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    """The sum over the priced responses."""
    priced: int = 0
    unpriced: int = 0
    """Responses pydantic-ai has no price for: the cost is then a lower bound (or unknown, when none is priced)."""

    def add_request(self, usage: RequestUsage, cost: Decimal | None) -> None:
        self.requests += 1
        self.input_tokens += int(usage.input_tokens or 0)
        self.output_tokens += int(usage.output_tokens or 0)
        if cost is None:
            self.unpriced += 1
        else:
            self.priced += 1
            self.cost += cost

    @property
    def cost_usd(self) -> float | None:
        """The estimated cost in USD; None when there were responses and none of them is priced."""
        if self.unpriced and not self.priced:
            return None
        return float(round(self.cost, 8))


@dataclass
class StepTally:
    """The steps of one attempt, live and replayed; updated through :meth:`done` only."""

    live: Spend = field(default_factory=Spend)
    saved: Spend = field(default_factory=Spend)

    def done(
        self, kind: StepKind, *, replayed: bool, usage: RequestUsage | None = None, cost: Decimal | None = None
    ) -> None:
        """Count one step that ended; a model step that got a response gives its ``usage`` (as recorded, for a
        replay: a replayed response carries zero usage) and its ``cost`` (None: not priced)."""
        side = self.saved if replayed else self.live
        side.steps[kind] += 1
        if usage is not None:
            side.add_request(usage, cost)
