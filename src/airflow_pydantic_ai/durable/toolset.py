"""CachingToolset: a pydantic-ai toolset wrapper that replays recorded tool results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.run import DurableRun

__all__ = ["CachingToolset"]


@dataclass
class CachingToolset(WrapperToolset[Any]):
    """Returns a tool's recorded result when the same call was recorded; else runs the tool and records it.

    A ``ModelRetry`` or ``ToolFailed`` raised by the tool is an outcome too, and replays as such.
    Any other exception propagates and records nothing: the retry runs the tool again.
    """

    run: DurableRun | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if self.run is None:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        step = self.run.tool_step(name, tool_args, ctx.tool_call_id, ctx.messages)
        if step.is_replay:
            return step.replay()
        try:
            result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except (ModelRetry, ToolFailed) as error:
            step.record_raise(error)
            raise
        step.record_return(result)
        return result
