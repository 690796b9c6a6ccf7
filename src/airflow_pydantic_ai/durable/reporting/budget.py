"""A budget across retries: the run's usage limits count the live usage of every try of the task instance.

``usage_limits`` bound one try; a task that fails five times could spend five budgets. With a budget across
tries, each try records what it spent live (requests, function-tool calls, input and output tokens) in a note
beside the steps, ``{prefix}/.spent-{try:05d}``, rewritten after each live step: it survives a worker change
and a killed worker loses at most the step in flight. A try reads the notes once, when it opens the cache, and
checks the limits before each live model request and each live tool call against what the earlier tries spent
plus what it spent itself. Replayed steps are free: they were counted when they ran.

A try that would go past a limit fails before the request (or call), with :class:`RetryBudgetExceeded` (a
pydantic-ai ``UsageLimitExceeded``) naming the limit and what the earlier tries spent. Token limits are checked
before each request against the tokens already spent (the size of an answer is only known after it): a
response can take the total past a token limit, and the next request is then refused.

Deleting the cache deletes the notes with it, and so starts a new budget.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.reporting.accounting import Spend
from airflow_pydantic_ai.durable.reporting.stats import TaskLogger
from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["RetryBudget", "RetryBudgetExceeded", "Spent"]

_PREFIX = ".spent-"
_FORMAT = "airflow-pydantic-ai/spent"


class RetryBudgetExceeded(DurableError, UsageLimitExceeded):
    """The next live step would go past a usage limit counted across the tries of the task instance."""


@dataclass(frozen=True)
class Spent:
    """Live usage, as pydantic-ai's limits count it."""

    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Spent) -> Spent:
        return Spent(
            self.requests + other.requests,
            self.tool_calls + other.tool_calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )

    @classmethod
    def of(cls, live: Spend) -> Spent:
        """What a try's live side counts (a request that raised was sent: it counts, without tokens)."""
        counted = live.counted_by_pydantic_ai
        return cls(counted["requests"], counted["tool_calls"], live.input_tokens, live.output_tokens)

    def describe(self) -> str:
        return (
            f"{self.requests} requests, {self.tool_calls} tool calls, "
            f"{self.input_tokens} input and {self.output_tokens} output tokens"
        )


@dataclass
class RetryBudget:
    """The limits of one task instance across its tries, and what the tries spent; open it with :meth:`load`."""

    limits: UsageLimits
    store: StepStore
    attempt: int
    log: TaskLogger
    earlier: Spent = field(default_factory=Spent)
    """What the tries before this one spent."""
    resumed: Spent = field(default_factory=Spent)
    """What this try spent before it stopped to wait (a resume keeps the try number, and its note)."""
    live: Spent = field(default_factory=Spent)
    """What this try spent since the cache was opened."""

    @classmethod
    def load(cls, store: StepStore, *, attempt: int, limits: UsageLimits, log: TaskLogger) -> RetryBudget:
        """Read what earlier tries spent from their notes (an unreadable note counts as nothing, with a warning)."""
        budget = cls(limits=limits, store=store, attempt=attempt, log=log)
        try:
            notes = store.read_notes(_PREFIX)
        except Exception as error:
            log.warning("Durable: could not read what earlier tries spent (%s); the budget counts this try only", error)
            return budget
        for name, data in sorted(notes.items()):
            note = _read_note(data)
            if note is None:
                log.warning("Durable: ignoring the unreadable budget note %s%s", store.location, name)
            elif note[0] == attempt:
                budget.resumed = note[1]
            else:
                budget.earlier += note[1]
        if budget.earlier != Spent():
            log.info("Durable: usage limits count every try; earlier tries spent %s", budget.earlier.describe())
        return budget

    @property
    def this_try(self) -> Spent:
        return self.resumed + self.live

    @property
    def total(self) -> Spent:
        return self.earlier + self.this_try

    def before_request(self, what: str) -> None:
        """Refuse a live model request that would go past a limit."""
        limits, total = self.limits, self.total
        if limits.request_limit is not None and total.requests + 1 > limits.request_limit:
            self._refuse(what, "request_limit", limits.request_limit)
        for name, used in (
            ("input_tokens_limit", total.input_tokens),
            ("output_tokens_limit", total.output_tokens),
            ("total_tokens_limit", total.total_tokens),
        ):
            limit = getattr(limits, name, None)
            if limit is not None and used >= limit:
                self._refuse(what, name, limit)

    def before_tool_call(self, what: str) -> None:
        """Refuse a live function-tool call that would go past ``tool_calls_limit``."""
        limit = getattr(self.limits, "tool_calls_limit", None)
        if limit is not None and self.total.tool_calls + 1 > limit:
            self._refuse(what, "tool_calls_limit", limit)

    def spent_live(self, live: Spend) -> None:
        """This try's live usage changed (a live step ended): keep it beside the steps."""
        self.live = Spent.of(live)
        name = f"{_PREFIX}{self.attempt:05d}"
        body = {"format": _FORMAT, "attempt": self.attempt, **asdict(self.this_try)}
        try:
            self.store.write_note(name, json.dumps(body, separators=(",", ":")).encode())
        except Exception as error:
            self.log.warning("Durable: could not record what this try spent beside the cache: %s", error)

    def _refuse(self, what: str, limit_name: str, limit: int) -> None:
        raise RetryBudgetExceeded(
            f"{what} would exceed the {limit_name} of {limit} counted across the tries of this task instance "
            f"(budget_across_tries): earlier tries spent {self.earlier.describe()}; this try "
            f"{self.this_try.describe()}. Raise the limit, or delete the cache to start a new budget."
        )


def _read_note(data: bytes) -> tuple[int, Spent] | None:
    """The try number and what it spent, or None when ``data`` is not a readable note."""
    try:
        body: Any = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != _FORMAT:
            return None
        spent = Spent(
            int(body["requests"]), int(body["tool_calls"]), int(body["input_tokens"]), int(body["output_tokens"])
        )
        return int(body["attempt"]), spent
    except (ValueError, TypeError, KeyError, RecursionError):
        return None
