"""The pydantic-ai capability that makes one agent run durable."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import CapabilityOrdering
from pydantic_ai.models import Model
from pydantic_ai.output import OutputContext
from pydantic_ai.toolsets import AbstractToolset

from airflow_pydantic_ai.durable.interception.model import CachingModel
from airflow_pydantic_ai.durable.interception.toolset import CachingToolset
from airflow_pydantic_ai.durable.steps.run import DurableRun

__all__ = ["DurableCapability"]


@dataclass
class DurableCapability(AbstractCapability[Any]):
    """Wraps every model that serves a request and every toolset the run assembles in caching wrappers.

    Pass it per run (``agent.run(..., capabilities=[DurableCapability(run)])``): the user's agent
    is left unmodified, and every tool source (``toolsets=``, ``@agent.tool``, toolset capabilities,
    MCP servers, dynamic toolsets) is covered without toolset ids. Output functions (``output_type=``
    a function, ``ToolOutput(fn)``, ``TextOutput(fn)``) are recorded and replayed like tools.
    """

    run: DurableRun

    def get_ordering(self) -> CapabilityOrdering:
        # Innermost: closest to the real model and tools, so other capabilities' wrappers see replays
        # exactly as they would see live answers.
        return CapabilityOrdering(position="innermost")

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        # The task the run lives in: cancelled as a whole (a timeout), it bounds the wait for tool threads.
        self.run.run_task = asyncio.current_task()
        self.run.stats.telemetry.run_started()  # issue 22: the task's identity on the agent run's span
        return await handler()

    def get_wrapper_model(self, model: Model) -> Model | None:
        if isinstance(model, CachingModel):
            return None
        return CachingModel(model, self.run)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        if isinstance(toolset, CachingToolset):
            return None
        return CachingToolset(wrapped=toolset, run=self.run)

    async def wrap_output_process(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: Any, handler: Any
    ) -> Any:
        # Only an output *function* can have side effects; plain output types are pure validation, and a
        # partial output while streaming is looked at again when the stream ends.
        if not output_context.has_function or ctx.partial_output:
            return await handler(output)
        call = output_context.tool_call
        step = self.run.output_step(
            output_context.function_name or "output",
            call.args if call is not None else output,
            call.tool_call_id if call is not None else None,
            ctx.messages,
        )
        return await step.replay_or_run(lambda: handler(output))
