"""CachingToolset: a pydantic-ai toolset wrapper that replays recorded tool results.

What a tool's policies say (``side_effects/policies.py``: a live tool runs on every try and is never recorded, an
at-most-once call records its start...) is asked of the table, never branched on here: whether calls are recorded,
and the guard of a live call, whose hooks the tool step calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.encoding.allowed_types import declared_by
from airflow_pydantic_ai.durable.interception.context_model import RunContextModel, with_recorded_model
from airflow_pydantic_ai.durable.side_effects.in_flight import CallInFlight, running_call
from airflow_pydantic_ai.durable.side_effects.policies import guard_of, policies_of
from airflow_pydantic_ai.durable.steps.tool_step import CANCELLED_RUN_GRACE

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.run import DurableRun

__all__ = ["CANCELLED_RUN_GRACE", "CachingToolset"]


@dataclass
class CachingToolset(WrapperToolset[Any]):
    """Returns a tool's recorded result when the same call was recorded; else runs the tool and records it.

    A ``ModelRetry`` or ``ToolFailed`` raised by the tool is an outcome too, and replays as such.
    Any other exception propagates and records nothing: the retry runs the tool again.

    When a sibling tool call fails, pydantic-ai cancels the calls still running. A synchronous tool
    runs in a thread that cannot be interrupted, so its side effect happens anyway: its result is
    still recorded when the thread finishes, so that the retry does not repeat it. When the whole run
    is cancelled (the task's ``execution_timeout``), the wait is bounded by :data:`CANCELLED_RUN_GRACE`:
    the task ends when Airflow says, and a result that did not come in time is not recorded.
    """

    run: DurableRun | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.run is None:
            # idempotency_key() and tool_checkpoint() work outside an attempt too (keyed by the agent run).
            with running_call(CallInFlight(name, ctx.tool_call_id, None, None, run_id=ctx.run_id)):
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        # What the tool declares it returns (never what an entry names) bounds the classes a replay may build.
        allowed = declared_by(_pydantic_ai.tool_function(tool))
        policies = policies_of(tool.tool_def)  # side_effects/policies.py: live, at most once...
        live = not all(policy.recorded for policy in policies)
        step = self.run.tool_step(name, tool_args, ctx.tool_call_id, ctx.messages, live=live, allowed=allowed)
        if step.is_replay:
            return step.replay()
        step.guard = guard_of(policies, self.run, step)
        step.guard.before()  # may replay what was given instead (a person's answer), or raise
        if step.is_replay:
            return step.replay()
        requests_before, recorded_before = ctx.usage.requests, self.run.stats.model_requests
        # The tool's own ``ctx.model`` requests are steps under this call (context_model.py).
        tool_ctx = with_recorded_model(ctx, self.run)
        in_flight = CallInFlight(
            name,
            ctx.tool_call_id,
            step.key,
            self.run,
            ctx.run_id,
            self.run.answer_number,
            live=step.live,
            allowed=allowed,
        )
        try:
            with running_call(in_flight):
                return await step.replay_or_run(
                    lambda: self.wrapped.call_tool(name, tool_args, tool_ctx, tool), in_thread=_runs_in_a_thread(tool)
                )
        finally:
            # The tool's own ctx.model requests are model steps that the run's usage does not count.
            recorded = self.run.stats.model_requests - recorded_before - _direct_requests(tool_ctx)
            unrecorded = (ctx.usage.requests - requests_before) - recorded
            if unrecorded > 0:
                self.run.unrecorded_requests(step.label, unrecorded)


def _direct_requests(ctx: RunContext[Any]) -> int:
    """How many requests the tool made through ``ctx.model`` (they are recorded, and not in the run's usage)."""
    return ctx.model.requests if isinstance(ctx.model, RunContextModel) else 0


def _runs_in_a_thread(tool: ToolsetTool[Any]) -> bool:
    """Whether the tool is a plain (sync) function, which pydantic-ai runs in a worker thread."""
    current: Any = tool
    while current is not None:
        if hasattr(current, "is_async"):
            return not current.is_async
        current = getattr(current, "source_tool", None)  # combined toolsets wrap the source's tool
    return False
