"""What one attempt replayed and executed, what the replay saved, and the summary line it logs.

Steps update an :class:`AttemptStats` as they end; nothing else counts. The summary line's wording is
fixed (:data:`SUMMARY_TEMPLATE`): dashboards and alerts grep for it, so it keeps "1 cached steps". Every
other count a person reads is put in words by :func:`plural` ("1 model request", "2 tool calls").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from pydantic_ai.usage import RequestUsage

from airflow_pydantic_ai.durable.steps.tally import Spend, StepKind, StepTally
from airflow_pydantic_ai.durable.steps.telemetry import StepTelemetry
from airflow_pydantic_ai.durable.wording import plural

__all__ = [
    "SUMMARY_TEMPLATE",
    "AttemptStats",
    "StepCounts",
    "TaskLogger",
    "empty_summary",
    "format_summary",
    "plural",
]

SUMMARY_TEMPLATE = (
    "Durable: replayed {replayed} cached steps ({replayed_model} model, {replayed_tool} tool), "
    "executed {executed} new steps ({executed_model} model, {executed_tool} tool)"
)
"""The summary every attempt logs at INFO. Dashboards grep for it: never change its wording."""


class TaskLogger(Protocol):
    """What the durable package logs through: Airflow's task logger, or any ``logging.Logger``."""

    def info(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def warning(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def error(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def debug(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class StepCounts:
    model: int = 0
    tool: int = 0

    @property
    def total(self) -> int:
        return self.model + self.tool


def format_summary(replayed: StepCounts, executed: StepCounts) -> str:
    """The summary line for these counts."""
    return SUMMARY_TEMPLATE.format(
        replayed=replayed.total,
        replayed_model=replayed.model,
        replayed_tool=replayed.tool,
        executed=executed.total,
        executed_model=executed.model,
        executed_tool=executed.tool,
    )


def empty_summary() -> str:
    """The summary of an attempt that failed before its durable run could start."""
    return format_summary(StepCounts(), StepCounts())


@dataclass
class AttemptStats:
    """Counts of one attempt, in the terms of the summary line."""

    replayed: StepCounts = field(default_factory=StepCounts)
    executed: StepCounts = field(default_factory=StepCounts)
    saved_input_tokens: int = 0
    saved_output_tokens: int = 0
    replayed_entries: list[str] = field(default_factory=list)
    """Names of the entries replayed, in order (fault drills compare them with what a crash left)."""
    bytes_read: int = 0
    """What loading the cache read at the start of the attempt."""
    entries_skipped: int = 0
    """Entries the load ignored (damaged, foreign, another release's), each with a warning."""
    # --- issue 22: the durable report's tally and the instrumentation, fed by step_done ---
    tally: StepTally = field(default_factory=StepTally)
    telemetry: StepTelemetry = field(default_factory=StepTelemetry)
    on_live_step: Callable[[Spend], None] | None = None
    """Told the attempt's live usage after each live step (the budget across retries keeps it beside the steps)."""

    def step_done(
        self,
        kind: StepKind,
        *,
        replayed: bool,
        usage: RequestUsage | None = None,
        cost: Decimal | None = None,
    ) -> None:
        """A step ended (in the context of the request or call that asked for it): report and telemetry count it."""
        self.tally.done(kind, replayed=replayed, usage=usage, cost=cost)
        if kind == "decision":  # not a unit pydantic-ai's instrumentation sees, and no usage
            return
        self.telemetry.unit_done(executed=not replayed)
        if not replayed and self.on_live_step is not None:
            self.on_live_step(self.tally.live)

    @property
    def model_requests(self) -> int:
        """Model steps so far, replayed or live (every agent run of the attempt)."""
        return self.replayed.model + self.executed.model

    def model_replayed(self, entry_name: str, usage: RequestUsage | None) -> None:
        self.replayed.model += 1
        if usage is not None:
            self.saved_input_tokens += usage.input_tokens
            self.saved_output_tokens += usage.output_tokens
        self.replayed_entries.append(entry_name)

    def tool_replayed(self, entry_name: str) -> None:
        self.replayed.tool += 1
        self.replayed_entries.append(entry_name)

    def summary(self) -> str:
        return format_summary(self.replayed, self.executed)

    def log(self, log: TaskLogger, *, not_persisted: int, what_next: str, report_line: str = "") -> None:
        """The summary line at INFO, the report line right after it, then what the replay saved and what was not
        persisted."""
        log.info(self.summary())
        if report_line:
            log.info("%s", report_line)
        if self.replayed.total:
            log.info(
                "Durable: the replay saved %s (%s, %s) and %s",
                plural(self.replayed.model, "model request"),
                plural(self.saved_input_tokens, "input token"),
                plural(self.saved_output_tokens, "output token"),
                plural(self.replayed.tool, "tool call"),
            )
        if not_persisted:
            verb = "was" if not_persisted == 1 else "were"
            log.warning(
                "Durable: %s of this attempt %s not persisted and %s", plural(not_persisted, "step"), verb, what_next
            )
