"""What one attempt's steps did, by kind, with the tokens and the cost they spent live or saved by replay.

The :class:`StepTally` is the count behind the durable report (``report.py``): every step that ends
(replayed or run live) is counted once, by kind (``model``, ``tool``, ``output``, ``decision``), nested
agent runs included, because they end through the same steps. A model step also brings its response:
its tokens, and its cost from pydantic-ai's price data (``cost.py``), go to the live or the saved side.

Guarantees: counting never raises and never does I/O; a step counted as replayed never counts as live.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Literal

from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

from airflow_pydantic_ai.durable.steps.cost import response_cost

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

    def add_response(self, response: ModelResponse, usage: RequestUsage | None = None) -> None:
        if usage is not None:
            response = replace(response, usage=usage)
        self.requests += 1
        self.input_tokens += int(response.usage.input_tokens or 0)
        self.output_tokens += int(response.usage.output_tokens or 0)
        cost = response_cost(response)
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
        self,
        kind: StepKind,
        *,
        replayed: bool,
        response: ModelResponse | None = None,
        usage: RequestUsage | None = None,
    ) -> None:
        """Count one step that ended: ``response`` is a model step's answer (None when its request raised);
        ``usage``, what it reported when it was recorded (a replayed response carries zero usage)."""
        side = self.saved if replayed else self.live
        side.steps[kind] += 1
        if response is not None:
            side.add_response(response, usage)
