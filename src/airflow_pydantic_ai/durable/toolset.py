"""CachingToolset: a pydantic-ai toolset wrapper that replays recorded tool results."""

from __future__ import annotations

import asyncio
import time
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

__all__ = ["CANCELLED_RUN_GRACE", "CachingToolset", "recorded"]

_RECORDED_ERRORS = (ModelRetry, ToolFailed)

CANCELLED_RUN_GRACE = 2.0
"""Seconds a synchronous tool still has to finish once the whole run is cancelled (Airflow's
``execution_timeout``, a SIGTERM, Ctrl-C): its result is recorded if it comes within them; after
them the run ends and the tool's thread is left to finish on its own, unrecorded."""
_POLL = 0.1


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
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        step = self.run.tool_step(name, tool_args, ctx.tool_call_id, ctx.messages)
        if step.is_replay:
            return step.replay()
        call = self.wrapped.call_tool(name, tool_args, ctx, tool)
        if _runs_in_a_thread(tool):
            return await _recorded_even_if_cancelled(step, call, self.run.run_task)
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


async def _recorded_even_if_cancelled(step: ToolStep, call: Awaitable[Any], run_task: asyncio.Task[Any] | None) -> Any:
    task = asyncio.ensure_future(recorded(step, call))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _wait_for_thread(step, task, run_task)
        raise


async def _wait_for_thread(step: ToolStep, task: asyncio.Future[Any], run_task: asyncio.Task[Any] | None) -> None:
    """Wait for a cancelled call's thread so its result is recorded: while only this call is cancelled (a
    sibling failed), as long as it takes; once the whole run is cancelled, for the grace period only."""
    run_cancelled_at: float | None = None
    with anyio.CancelScope(shield=True):
        while not task.done():
            if run_cancelled_at is None and _is_cancelled(run_task):
                run_cancelled_at = time.monotonic()
            if run_cancelled_at is not None and time.monotonic() - run_cancelled_at >= CANCELLED_RUN_GRACE:
                step.abandon(CANCELLED_RUN_GRACE)
                return
            await asyncio.wait({task}, timeout=_POLL)
    if not task.cancelled():
        task.exception()  # retrieved: the cancellation is what propagates


def _is_cancelled(run_task: asyncio.Task[Any] | None) -> bool:
    """Whether the agent run as a whole is being cancelled (unknown counts as yes: never wait unbounded)."""
    return run_task is None or run_task.done() or run_task.cancelling() > 0
