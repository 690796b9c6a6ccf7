"""Capabilities' ``@durable_operation`` methods in a durable run: not recorded, named once per attempt.

pydantic-ai hands a capability's durable operation (a method marked ``@durable_operation``, such as
``FileUnderstanding``'s description sub-agent) to a durable engine through a dispatch table it keeps
private on the run context, filled only by its own ``BaseDurabilityCapability``; anywhere else it calls
the method inline, and no public hook sees the call (checked on pydantic-ai 2.62 and 2.68). So such a
method is not recorded: what it does (a model request, a sub-agent) runs live, on a retry too.

Guarantee: when a run of the attempt starts, each of its capabilities that declares such a method is
named once per attempt at WARNING, with the operations' names; nothing is named for a run that has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable import _pydantic_ai

if TYPE_CHECKING:
    from pydantic_ai import RunContext

    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["name_live_operations"]


def name_live_operations(run: AgentRun, ctx: RunContext[Any]) -> None:
    """One WARNING per attempt for each capability of the run starting with ``ctx`` that has durable operations."""
    capabilities = getattr(ctx, "capabilities", None) or {}
    for capability in capabilities.values():
        operations = _pydantic_ai.durable_operation_names(capability)
        if not operations:
            continue
        identity = getattr(capability, "id", None)
        name = type(capability).__name__ + (f" (id {identity!r})" if identity else "")
        if not run.attempt.family.warn_once(f"durable operations of {type(capability).__qualname__} {identity}"):
            continue
        run.attempt.log.warning(
            "Durable: capability %s%s has @durable_operation method(s) %s; pydantic-ai hands those only to its "
            "own durable engines, so they are not recorded: the model requests they make run live, and again "
            "on a retry",
            name,
            run.who,
            ", ".join(repr(operation) for operation in operations),
        )
