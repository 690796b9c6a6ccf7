"""Usage limits that count only live steps: replayed requests and tool calls are free.

pydantic-ai counts a replayed request like a live one (``usage.requests``), and a replayed function-tool
return like a live call (``usage.tool_calls``). The attempt's one count (``accounting.py``) keeps, by agent
run, what pydantic-ai counted of the replayed steps, and how many calls of the current answer will replay,
so that :class:`ReplayAwareUsageLimits` checks the limits against the live part only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pydantic_ai.usage import RunUsage, UsageLimits

from airflow_pydantic_ai.durable.reporting.accounting import Accounting, RunKey

__all__ = ["ReplayAwareUsageLimits", "replay_aware"]


@dataclass(repr=False, kw_only=True)
class ReplayAwareUsageLimits(UsageLimits):
    """``UsageLimits`` checked against the live steps of one agent run of a durable attempt."""

    accounting: Accounting = field(default_factory=Accounting)
    run: RunKey = None

    def _live(self, usage: RunUsage) -> RunUsage:
        replayed = self.accounting.replayed_for(self.run)
        return replace(
            usage,
            requests=max(0, usage.requests - replayed["requests"]),
            tool_calls=max(0, usage.tool_calls - replayed["tool_calls"]),
        )

    def check_before_request(self, usage: RunUsage) -> None:
        super().check_before_request(self._live(usage))

    def check_before_tool_call(self, projected_usage: RunUsage) -> None:
        # Checked before a batch of calls runs: the batch's calls that are cached will not be live.
        live = self._live(projected_usage)
        live = replace(live, tool_calls=max(0, live.tool_calls - self.accounting.pending_replays(self.run)))
        super().check_before_tool_call(live)


def replay_aware(limits: UsageLimits | None, accounting: Accounting, run: RunKey = None) -> UsageLimits | None:
    """``limits`` adjusted so that the steps of agent run ``run`` that replayed do not count against them."""
    if limits is None:
        return None
    fields = {name: getattr(limits, name) for name in limits.__dataclass_fields__ if not name.startswith("_")}
    fields.pop("reporting.accounting", None)
    fields.pop("run", None)
    return ReplayAwareUsageLimits(**fields, accounting=accounting, run=run)
