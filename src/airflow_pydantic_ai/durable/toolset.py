"""CachingToolset: a pydantic-ai toolset wrapper that replays recorded tool results."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed, ToolRetryError
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.wrapper import WrapperToolset

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.run import DurableRun, ToolStep

__all__ = ["CachingToolset", "recorded"]

_RECORDED_ERRORS = (ModelRetry, ToolFailed)


@dataclass
class CachingToolset(WrapperToolset[Any]):
    """Returns a tool's recorded result when the same call was recorded; else runs the tool and records it.

    A ``ModelRetry`` or ``ToolFailed`` raised by the tool is an outcome too, and replays as such.
    Any other exception propagates and records nothing: the retry runs the tool again.

    When a sibling tool call fails, pydantic-ai cancels the calls still running. A synchronous tool
    runs in a thread that cannot be interrupted, so its side effect happens anyway: its result is
    still recorded when the thread finishes, so that the retry does not repeat it.
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
        call = self.wrapped.call_tool(name, tool_args, ctx, tool)
        if _runs_in_a_thread(tool):
            return await _recorded_even_if_cancelled(step, call)
        return await recorded(step, call)


def _runs_in_a_thread(tool: ToolsetTool[Any]) -> bool:
    """Whether the tool is a plain (sync) function, which pydantic-ai runs in a worker thread."""
    current: Any = tool
    while current is not None:
        if hasattr(current, "is_async"):
            return not current.is_async
        current = getattr(current, "source_tool", None)  # combined toolsets wrap the source's tool
    return False


async def recorded(step: ToolStep, call: Awaitable[Any]) -> Any:
    """Await a live call and record its outcome in ``step``."""
    try:
        result = await call
    except _RECORDED_ERRORS as error:
        step.record_raise(error)
        raise
    except (ApprovalRequired, CallDeferred):
        # Not an outcome: the call waits for a decision (or for work done elsewhere) and is made again after it.
        step.record_deferral()
        raise
    except ToolRetryError as error:  # a retry pydantic-ai already wrapped (an output function's, for text output)
        step.record_retry_signal(error)
        raise
    except BaseException as error:  # it ran (its side effects may have happened) but has no outcome to keep
        step.record_failure(error)
        raise
    step.record_return(result)
    return result


async def _recorded_even_if_cancelled(step: ToolStep, call: Awaitable[Any]) -> Any:
    task = asyncio.ensure_future(recorded(step, call))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        # The thread runs to its end whatever happens here; wait for it so its result is recorded.
        with anyio.CancelScope(shield=True):
            await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation below is what propagates
        raise
