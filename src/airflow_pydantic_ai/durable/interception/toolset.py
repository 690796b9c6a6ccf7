"""CachingToolset: a pydantic-ai toolset wrapper that replays recorded tool results.

A tool marked live in pydantic-ai's own tool metadata (``metadata={TOOL_CONFIG_KEY: False}``, what
:func:`live_tool` returns: the per-tool durable configuration pydantic-ai's engines read, where
``False`` means "not a durable unit"), or with pydantic-ai's own ``Tool(durable=False)`` (2.78), runs on
every try and is never recorded; the steps after it replay as long as its result does not change what the model is sent.
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
from airflow_pydantic_ai.durable.interception.unrecorded import unrecorded_requests
from airflow_pydantic_ai.durable.side_effects.in_flight import CallInFlight, running_call
from airflow_pydantic_ai.durable.steps.tool_step import CANCELLED_RUN_GRACE

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["CANCELLED_RUN_GRACE", "TOOL_CONFIG_KEY", "CachingToolset", "at_most_once", "live_tool"]

TOOL_CONFIG_KEY = "airflow_pydantic_ai"
"""The tool metadata key of this engine's per-tool durable configuration (pydantic-ai's ``tool_config_key``)."""


def live_tool() -> dict[str, Any]:
    """Tool metadata that makes a tool run live on every try (never recorded, never replayed).

    ``@agent.tool_plain(metadata=live_tool())``, ``Tool(fn, metadata=live_tool())``,
    ``FunctionToolset(..., metadata=live_tool())``: for a clock, a status check, a lock.
    """
    return {TOOL_CONFIG_KEY: False}


def at_most_once() -> dict[str, Any]:
    """Tool metadata that makes each call of a tool happen at most once, even when a try is cut off mid-call.

    ``@agent.tool_plain(metadata=at_most_once())``, ``Tool(fn, metadata=at_most_once())``,
    ``FunctionToolset(..., metadata=at_most_once())`` (every tool of the toolset, an MCP server's too through
    its toolset's metadata): before each live call the attempt records that the call started. A later try that
    finds a call started and never finished does not run it again: it asks a person, fails, or runs it again,
    as the task's ``on_unknown_outcome`` says (``docs/side_effects.rst``). Merge it with metadata of your own:
    ``metadata={**at_most_once(), "team": "billing"}``.
    """
    return {TOOL_CONFIG_KEY: {"at_most_once": True}}


def _config(tool: ToolsetTool[Any]) -> Any:
    return (tool.tool_def.metadata or {}).get(TOOL_CONFIG_KEY)


def is_live_tool(tool: ToolsetTool[Any]) -> bool:
    """Whether the tool opts out of replay: its metadata says so (``{TOOL_CONFIG_KEY: False}``, :func:`live_tool`),
    or pydantic-ai's own per-tool opt-out does (``Tool(durable=False)``, pydantic-ai 2.78; the field does not
    exist before). As pydantic-ai's engines do, this engine's metadata key wins when it is set on the tool."""
    config = _config(tool)
    if config is not None:
        return config is False
    return getattr(tool.tool_def, "durable", None) is False


def is_at_most_once(tool: ToolsetTool[Any]) -> bool:
    """Whether the tool's metadata asks for at-most-once calls (:func:`at_most_once`)."""
    config = _config(tool)
    return isinstance(config, dict) and config.get("at_most_once") is True


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

    run: AgentRun | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.run is None:
            # idempotency_key() and tool_checkpoint() work outside an attempt too (keyed by the agent run).
            with running_call(CallInFlight(name, ctx.tool_call_id, None, None, run_id=ctx.run_id)):
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        # What the tool declares it returns (never what an entry names) bounds the classes a replay may build.
        allowed = declared_by(_pydantic_ai.tool_function(tool))
        step = self.run.tool_step(
            name, tool_args, ctx.tool_call_id, ctx.messages, live=is_live_tool(tool), allowed=allowed
        )
        if step.is_replay:
            return step.replay()
        if is_at_most_once(tool):
            self.run.before_at_most_once(step)  # may replay a person's answer instead, or raise
            if step.is_replay:
                return step.replay()
        requests_before, recorded_before = ctx.usage.requests, self.run.attempt.stats.model_requests
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
            recorded = self.run.attempt.stats.model_requests - recorded_before - _direct_requests(tool_ctx)
            unrecorded = (ctx.usage.requests - requests_before) - recorded
            if unrecorded > 0:
                unrecorded_requests(self.run.attempt, step.label, unrecorded)


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
