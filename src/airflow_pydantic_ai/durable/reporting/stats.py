"""What one attempt reports about its steps: the one count (``accounting.py``), the summary line, the load.

Steps end through :meth:`AttemptStats.step_done` only: it counts the step once (by kind, replayed or live,
with its tokens and cost), tells pydantic-ai's instrumentation whether it ran, and tells the budget across
tries what the attempt has spent live. The summary line's wording is fixed (:data:`SUMMARY_TEMPLATE`):
dashboards and alerts grep for it, so it keeps "1 cached steps". Every other count a person reads is put in
words by :func:`plural` ("1 model request", "2 tool calls").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_pydantic_ai.durable.kinds import KINDS
from airflow_pydantic_ai.durable.reporting.accounting import (
    SUMMARY_TEMPLATE,
    Accounting,
    RunKey,
    Spend,
    StepCount,
    SummaryCounts,
    format_summary,
)
from airflow_pydantic_ai.durable.reporting.telemetry import StepTelemetry
from airflow_pydantic_ai.durable.wording import plural

__all__ = [
    "SUMMARY_TEMPLATE",
    "AttemptStats",
    "StepCount",
    "TaskLogger",
    "empty_summary",
    "format_summary",
    "plural",
]


class TaskLogger(Protocol):
    """What the durable package logs through: Airflow's task logger, or any ``logging.Logger``."""

    def info(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def warning(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def error(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def debug(self, msg: Any, /, *args: Any, **kwargs: Any) -> Any: ...


def empty_summary() -> str:
    """The summary of an attempt that failed before its durable run could start."""
    return format_summary(SummaryCounts(), SummaryCounts())


@dataclass
class AttemptStats:
    """What one attempt reports: its steps (one :class:`Accounting`), and what loading the cache read."""

    accounting: Accounting = field(default_factory=Accounting)
    bytes_read: int = 0
    """What loading the cache read at the start of the attempt."""
    entries_skipped: int = 0
    """Entries the load ignored (damaged, foreign, another release's), each with a warning."""
    telemetry: StepTelemetry = field(default_factory=StepTelemetry)
    on_live_step: Callable[[Spend], None] | None = None
    """Told the attempt's live side after each live step (the budget across retries keeps it beside the steps)."""

    def step_done(self, count: StepCount, run: RunKey = None) -> None:
        """A step of agent run ``run`` ended (in the context of the request or call that asked for it): the one
        place it is counted."""
        self.accounting.step(count, run)
        if not KINDS[count.kind].instrumented:  # not a unit pydantic-ai's instrumentation sees, and no usage
            return
        self.telemetry.unit_done(executed=not count.replayed)
        if not count.replayed and self.on_live_step is not None:
            self.on_live_step(self.accounting.live)

    @property
    def replayed(self) -> SummaryCounts:
        return self.accounting.replayed

    @property
    def executed(self) -> SummaryCounts:
        return self.accounting.executed

    @property
    def saved_input_tokens(self) -> int:
        return self.accounting.saved.input_tokens

    @property
    def saved_output_tokens(self) -> int:
        return self.accounting.saved.output_tokens

    @property
    def replayed_entries(self) -> list[str]:
        """Names of the entries replayed, in order (fault drills compare them with what a crash left)."""
        return self.accounting.replayed_entries

    @property
    def model_requests(self) -> int:
        """Model steps so far, replayed or live (every agent run of the attempt)."""
        return self.accounting.model_requests

    def summary(self) -> str:
        return self.accounting.summary()

    def log(self, log: TaskLogger, *, not_persisted: int, what_next: str, report_line: str = "") -> None:
        """The summary line at INFO, the report line right after it, then what the replay saved and what was not
        persisted."""
        log.info(self.summary())
        if report_line:
            log.info("%s", report_line)
        replayed = self.replayed
        if replayed.total:
            log.info(
                "Durable: the replay saved %s (%s, %s) and %s",
                plural(replayed.model, "model request"),
                plural(self.saved_input_tokens, "input token"),
                plural(self.saved_output_tokens, "output token"),
                plural(replayed.tool, "tool call"),
            )
        if not_persisted:
            verb = "was" if not_persisted == 1 else "were"
            log.warning(
                "Durable: %s of this attempt %s not persisted and %s", plural(not_persisted, "step"), verb, what_next
            )
