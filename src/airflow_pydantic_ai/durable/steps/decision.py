"""A person's decision on a tool call that needed approval, recorded in the cache like a step.

A decision is bound to the exact call it answered: its key is the tool key formula (tool name, the raw
arguments as the model sent them, the call id, the conversation up to the model answer that made the
call, and the chain of model steps before it) under a ``decision`` prefix. A retry whose conversation
led to the same call replays the decision and never asks again; a different call (other arguments,
another history) has another key and needs a new decision.

Guarantees: a decision is written once (one object, like every step); a stored decision that cannot
be read back is treated as missing (the call is asked again), never as an approval.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDenied

from airflow_pydantic_ai.durable.reporting.accounting import StepCount
from airflow_pydantic_ai.durable.storage.entry import DECISION_KIND, StepEntry, entry_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["Decision", "DecisionStep"]

DEFAULT_DENIAL = "A person rejected this tool call; it was not run."


@dataclass(frozen=True)
class Decision:
    """Approve or reject one call; a rejection's reason is what the model is told instead of a result."""

    approved: bool
    reason: str | None = None
    answered_by: str | None = None
    """Who answered (a user name), or None when nobody did (the approval timed out)."""
    timed_out: bool = False

    def as_result(self) -> bool | ToolDenied:
        """The value for ``DeferredToolResults.approvals``."""
        if self.approved:
            return True
        return ToolDenied(self.reason or DEFAULT_DENIAL)

    def to_payload(self) -> dict[str, Any]:
        return {
            "approved": self.approved,
            "reason": self.reason,
            "answered_by": self.answered_by,
            "timed_out": self.timed_out,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Decision:
        approved = payload["approved"]
        if not isinstance(approved, bool):
            raise ValueError(f"'approved' is {approved!r}, not a boolean")
        reason = payload.get("reason")
        answered_by = payload.get("answered_by")
        return cls(
            approved=approved,
            reason=None if reason is None else str(reason),
            answered_by=None if answered_by is None else str(answered_by),
            timed_out=bool(payload.get("timed_out", False)),
        )

    def describe(self) -> str:
        verdict = "approved" if self.approved else "rejected"
        who = self.answered_by or "nobody (no answer before the approval timeout)"
        return f"{verdict} by {who}"


@dataclass
class DecisionStep:
    """The decision slot of one pending call: what the cache holds for it, and recording a new one."""

    run: AgentRun
    call: ToolCallPart
    key: str | None
    """None when the conversation could not be fingerprinted: such a call cannot wait durably."""
    step_number: int
    recorded: Decision | None = None

    @property
    def entry_name(self) -> str:
        return entry_name(DECISION_KIND, self.key or "")

    @property
    def ref(self) -> str:
        """A short name for the call, for people and form fields (the start of its key)."""
        return (self.key or "unkeyed")[:10]

    @property
    def tool_name(self) -> str:
        return self.call.tool_name

    def load(self) -> None:
        """Look the decision up in what the cache holds (a damaged one is ignored with a warning)."""
        if self.key is None:
            return
        entry = self.run.attempt.entries.get(self.entry_name)
        if entry is None:
            return
        try:
            self.recorded = Decision.from_payload(entry.payload)
            self.run.count(StepCount("decision", replayed=True, entry_name=self.entry_name))  # issue 22: report
        except Exception as error:
            self.run.attempt.entry_unusable(
                entry, error, f"the call {self.tool_name} ({self.call.tool_call_id}) is asked again"
            )

    def record(self, decision: Decision) -> None:
        """Store the decision (and use it in this attempt even if storing it failed)."""
        if self.key is None:
            raise ValueError(f"the call {self.tool_name} ({self.call.tool_call_id}) has no key to record under")
        entry = StepEntry(
            kind=DECISION_KIND,
            key=self.key,
            step=self.step_number,
            attempt=self.run.attempt.try_number,
            label=self.tool_name,
            payload=decision.to_payload(),
            call_id=self.call.tool_call_id,
            role=DECISION_KIND,
            recorded_at=time.time(),
        )
        self.run.attempt.record_decision(entry, f"the decision on {self.tool_name} (call {self.call.tool_call_id})")
        self.recorded = decision
        self.run.count(StepCount("decision"))  # issue 22: report
