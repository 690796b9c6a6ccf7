"""Usage limits that count only live steps: replayed requests and tool calls are free.

pydantic-ai counts a replayed request like a live one (``usage.requests``), and a replayed function-tool
return like a live call (``usage.tool_calls``). A :class:`ReplayLedger` keeps what was replayed, and
what the batch of calls about to run will replay, so that :class:`ReplayAwareUsageLimits` can check the
limits against the live part only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pydantic_ai.usage import RunUsage, UsageLimits

__all__ = ["ReplayAwareUsageLimits", "ReplayLedger", "replay_aware"]


@dataclass
class ReplayLedger:
    """What pydantic-ai counted that did not really happen in this attempt."""

    replayed_requests: int = 0
    replayed_tool_returns: int = 0
    """Replayed successful function-tool calls: what pydantic-ai counts in ``usage.tool_calls``."""
    pending_tool_replays: int = 0
    """Calls of the current model answer that are cached: checked before the batch runs, they will not be live."""

    def live(self, usage: RunUsage) -> RunUsage:
        return replace(
            usage,
            requests=max(0, usage.requests - self.replayed_requests),
            tool_calls=max(0, usage.tool_calls - self.replayed_tool_returns),
        )


@dataclass(repr=False, kw_only=True)
class ReplayAwareUsageLimits(UsageLimits):
    """``UsageLimits`` checked against the live steps of a durable attempt."""

    ledger: ReplayLedger = field(default_factory=ReplayLedger)

    def check_before_request(self, usage: RunUsage) -> None:
        super().check_before_request(self.ledger.live(usage))

    def check_before_tool_call(self, projected_usage: RunUsage) -> None:
        # Checked before a batch of calls runs: the batch's calls that are cached will not be live.
        live = self.ledger.live(projected_usage)
        live = replace(live, tool_calls=max(0, live.tool_calls - self.ledger.pending_tool_replays))
        super().check_before_tool_call(live)


def replay_aware(limits: UsageLimits | None, ledger: ReplayLedger) -> UsageLimits | None:
    """``limits`` adjusted so that the steps ``ledger`` counts as replayed do not count against them."""
    if limits is None:
        return None
    fields = {name: getattr(limits, name) for name in limits.__dataclass_fields__ if not name.startswith("_")}
    fields.pop("ledger", None)
    return ReplayAwareUsageLimits(**fields, ledger=ledger)
