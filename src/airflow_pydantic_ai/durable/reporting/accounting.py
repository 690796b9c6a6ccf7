"""The one count of an attempt's steps: by kind, replayed or live, with their requests, tokens and cost.

Every number the product shows about an attempt is read from one :class:`Accounting`: the summary line
(:meth:`Accounting.summary`, its wording fixed by :data:`SUMMARY_TEMPLATE`), the durable report and the
metrics built from it, the usage limits that do not count replayed steps (``reporting/usage.py``), and the
budget across tries (what the live side spent). pydantic-ai counts usage per agent run, so what it counted
of the replayed steps is kept by agent run too (:meth:`Accounting.replayed_for`). The read side totals
recorded steps with the same :class:`Spend` (``storage/step_costs.py``). What differs by kind (which
column of the summary, what pydantic-ai counts) is read from the kind table (``kinds.py``).

Guarantees: counting never raises and never does I/O; a step is counted once, on one side. No pydantic-ai
import: a response's usage is anything with ``input_tokens`` and ``output_tokens``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from airflow_pydantic_ai.durable.kinds import COUNTED_KINDS, KINDS, StepRole

__all__ = [
    "SUMMARY_TEMPLATE",
    "Accounting",
    "RunKey",
    "Spend",
    "StepCount",
    "SummaryCounts",
    "TokenUsage",
    "format_summary",
]

RunKey = Any
"""Which agent run of the attempt a step belongs to (its scope's id; None: the attempt's first run)."""

SUMMARY_TEMPLATE = (
    "Durable: replayed {replayed} cached steps ({replayed_model} model, {replayed_tool} tool), "
    "executed {executed} new steps ({executed_model} model, {executed_tool} tool)"
)
"""The summary every attempt logs at INFO. Dashboards grep for it: never change its wording."""


class TokenUsage(Protocol):
    """What a model response reports (pydantic-ai's ``RequestUsage`` fits)."""

    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


@dataclass(frozen=True)
class SummaryCounts:
    """One side of the summary line: model steps and tool steps (an output function's call counts as a tool's)."""

    model: int = 0
    tool: int = 0

    @property
    def total(self) -> int:
        return self.model + self.tool


@dataclass
class Spend:
    """Steps by kind, and the requests, tokens and cost among them, on one side: what ran live, or what the
    replay saved (or, on the read side, what a cache holds)."""

    steps: Counter[StepRole] = field(default_factory=Counter)
    counted_by_pydantic_ai: Counter[str] = field(default_factory=Counter)
    """Of these steps, those pydantic-ai's ``RunUsage`` counts, by its counter (``requests``, ``tool_calls``)."""
    requests: int = 0
    """Model requests with a response (a request that raised has no tokens to count)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    """The sum over the priced responses."""
    priced: int = 0
    unpriced: int = 0
    """Responses pydantic-ai has no price for: the cost is then a lower bound (or unknown, when none is priced)."""
    batched: int = 0
    """Of the requests, those a provider's batch API answered (issue 38: counted, and priced, as model requests)."""
    batch_saved: Decimal = Decimal(0)
    """What the batch price saved on them, against the standard price (genai-prices' batch rates)."""
    batch_unpriced: int = 0
    """Batched requests the price data has no batch price for: priced at the standard price, nothing saved."""

    def add(
        self,
        kind: StepRole,
        *,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        counted_by_pydantic_ai: bool = True,
    ) -> None:
        """One step of ``kind``; a model step that got a response gives its ``usage`` and ``cost`` (None: not
        priced). ``counted_by_pydantic_ai``: False for a step its kind's counter skips (a tool call that drew a
        retry is not in ``usage.tool_calls``)."""
        self.steps[kind] += 1
        counter = KINDS[kind].usage_counter
        if counter is not None and counted_by_pydantic_ai:
            self.counted_by_pydantic_ai[counter] += 1
        if usage is not None:
            self.add_request(int(usage.input_tokens or 0), int(usage.output_tokens or 0), cost)

    def add_request(self, input_tokens: int, output_tokens: int, cost: Decimal | None) -> None:
        self.requests += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if cost is None:
            self.unpriced += 1
        else:
            self.priced += 1
            self.cost += cost

    def add_batched(self, saved: Decimal | None) -> None:
        """One of the requests was batched; ``saved``: what its batch price saved (None: no batch price known)."""
        self.batched += 1
        if saved is None:
            self.batch_unpriced += 1
        else:
            self.batch_saved += saved

    @property
    def cost_usd(self) -> float | None:
        """The estimated cost in USD; None when there were responses and none of them is priced."""
        if self.unpriced and not self.priced:
            return None
        return float(round(self.cost, 8))

    @property
    def total_steps(self) -> int:
        return sum(self.steps[kind] for kind in COUNTED_KINDS)

    def by_kind(self) -> dict[StepRole, int]:
        """Every counted kind, in the table's order (zeros included)."""
        return {kind: self.steps[kind] for kind in COUNTED_KINDS}

    def summary_counts(self) -> SummaryCounts:
        """This side in the summary line's two columns (the kind table says which kind counts where)."""
        columns: Counter[str] = Counter()
        for kind, count in self.steps.items():
            column = KINDS[kind].summary_column
            if column is not None:
                columns[column] += count
        return SummaryCounts(model=columns["model"], tool=columns["tool"])


def format_summary(replayed: SummaryCounts, executed: SummaryCounts) -> str:
    """The summary line for these counts."""
    return SUMMARY_TEMPLATE.format(
        replayed=replayed.total,
        replayed_model=replayed.model,
        replayed_tool=replayed.tool,
        executed=executed.total,
        executed_model=executed.model,
        executed_tool=executed.tool,
    )


@dataclass(frozen=True)
class StepCount:
    """One step that ended, as it is counted: the one value a step hands to the count (``Accounting.step``)."""

    kind: StepRole
    replayed: bool = False
    """Answered from its entry (True) or run live (False)."""
    entry_name: str | None = None
    """The entry a replayed step came from."""
    usage: TokenUsage | None = None
    """What a model step spent (live, or when it was recorded)."""
    cost: Decimal | None = None
    counted_by_pydantic_ai: bool = True
    """pydantic-ai counts it in its usage although it did not happen (a replayed step)."""


@dataclass
class Accounting:
    """The steps of one attempt (every agent run in it), live and replayed; changed through :meth:`step` only."""

    live: Spend = field(default_factory=Spend)
    saved: Spend = field(default_factory=Spend)
    """What the replay saved: the replayed steps, with the tokens and cost they reported when they were recorded."""
    replayed_entries: list[str] = field(default_factory=list)
    """Names of the entries replayed, in order (fault drills compare them with what a crash left)."""
    _replayed_by_run: dict[RunKey, Spend] = field(default_factory=dict, repr=False)
    _pending_by_run: dict[RunKey, int] = field(default_factory=dict, repr=False)

    def step(self, count: StepCount, run: RunKey = None) -> None:
        """Count one step of agent run ``run`` that ended."""
        replayed = count.replayed
        side = self.saved if replayed else self.live
        side.add(count.kind, usage=count.usage, cost=count.cost, counted_by_pydantic_ai=count.counted_by_pydantic_ai)
        if replayed:
            spend = self._replayed_by_run.setdefault(run, Spend())
            spend.add(count.kind, counted_by_pydantic_ai=count.counted_by_pydantic_ai)
            if count.entry_name is not None:
                self.replayed_entries.append(count.entry_name)

    def replayed_for(self, run: RunKey) -> Counter[str]:
        """What pydantic-ai counted in agent run ``run``'s usage that did not happen (replayed), by its counter."""
        spend = self._replayed_by_run.get(run)
        return spend.counted_by_pydantic_ai if spend is not None else Counter()

    def expect_replays(self, run: RunKey, calls: int) -> None:
        """``calls`` calls of agent run ``run``'s current model answer are cached: they will not run live."""
        self._pending_by_run[run] = calls

    def pending_replays(self, run: RunKey) -> int:
        """Calls of agent run ``run``'s current answer that will replay (checked before the batch of calls runs)."""
        return self._pending_by_run.get(run, 0)

    @property
    def replayed(self) -> SummaryCounts:
        return self.saved.summary_counts()

    @property
    def executed(self) -> SummaryCounts:
        return self.live.summary_counts()

    @property
    def model_requests(self) -> int:
        """Model steps so far, replayed or live."""
        return self.saved.steps["model"] + self.live.steps["model"]

    def summary(self) -> str:
        return format_summary(self.replayed, self.executed)
