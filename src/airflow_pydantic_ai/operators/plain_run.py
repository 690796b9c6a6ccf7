"""A run without durability cannot wait for a person: a tool call that asks for approval or defers fails.

What ``AgentOperator(durable=False)`` installs on its agent run: a pydantic-ai capability whose toolset
wrapper turns a tool's ``ApprovalRequired`` or ``CallDeferred`` (recognised by type) into a
``ValueError`` that says to set ``durable=True``, at the call that raised it. Imported when a plain run
starts, never at DAG parsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

__all__ = ["NO_WAITING_MESSAGE", "NoWaiting", "run_plain"]

NO_WAITING_MESSAGE = (
    "a tool call asked for approval (ApprovalRequired) or deferred (CallDeferred); the run has to survive "
    "the wait for a person's answer, which only the durable cache provides. Set durable=True on the "
    "AgentOperator / @task.pydantic_ai."
)


@dataclass
class _RefusingToolset(WrapperToolset[Any]):
    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        try:
            return await super().call_tool(name, tool_args, ctx, tool)
        except (ApprovalRequired, CallDeferred) as error:
            raise ValueError(f"{name}: {NO_WAITING_MESSAGE}") from error


class NoWaiting(AbstractCapability[Any]):
    """Fails a plain run's tool call that would wait for a person (or for work done elsewhere)."""

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        if isinstance(toolset, _RefusingToolset):
            return None
        return _RefusingToolset(wrapped=toolset)


def run_plain(operator: Any, agent: Any, prompt: str, model: Any) -> Any:
    """``operator``'s run of ``agent`` without durability: a tool that asks for approval or defers fails the task
    (:class:`NoWaiting`); ``batch=`` adds its capability as on a durable run."""
    from airflow_pydantic_ai.pending import PendingSettings

    # read at the start of the try (execute); checked here when called on its own (tests call _run_plain)
    pending = operator.__dict__.get("_pending") or PendingSettings.checked(operator.pending_timeout, operator.batch)
    return agent.run_sync(
        prompt,
        model=model,
        usage_limits=operator.usage_limits,
        deps=operator.deps,
        event_stream_handler=operator.event_stream_handler,
        capabilities=[NoWaiting(), *pending.capabilities()],
    )
