"""A durable agent run that stops when tool calls need a person's approval, and goes on once they are decided.

:func:`run_until_decision_needed` runs the agent with ``DeferredToolRequests`` among its output types.
Each time the run stops because calls need approval, every call's decision is looked up in the cache:
when all are there, the agent runs on from the conversation so far with them as ``DeferredToolResults``
(an approved call runs, a rejected one reaches the model as the tool's denial); when some are missing,
the function returns them as :class:`WaitingForDecisions` and the caller asks a person.

Started again after the answer (its decisions recorded), the same function replays every recorded step
(no model request, no repeated tool call), finds the decisions, and runs on live. A run may stop for
approval any number of times; each round works the same way.

Calls deferred for work done outside the agent (``CallDeferred``, external tools) are not supported:
the run fails with a message naming the tool.

Everything is recognised by type, never by text: whether the output types allow deferred calls is read from
the ``output_type`` as pydantic-ai reads it (a list, a tuple or a union, ``Annotated`` or not), and a call that
needs approval in a run that cannot stop for it is seen by pydantic-ai's own hook for deferred calls
(``AbstractCapability.handle_deferred_tool_calls``).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from pydantic_ai.usage import RunUsage
from typing_inspection import typing_objects
from typing_inspection.introspection import is_union_origin

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.attempt.attempt import Attempt
from airflow_pydantic_ai.durable.errors import ApprovalsUnsupported
from airflow_pydantic_ai.durable.interception.unrecorded import AttemptUsage
from airflow_pydantic_ai.durable.steps.decision import DecisionStep

__all__ = [
    "ApprovalsUnsupported",
    "WaitingForDecisions",
    "allows_deferred_calls",
    "output_types",
    "run_until_decision_needed",
    "with_deferred_output",
]


@dataclass
class WaitingForDecisions:
    """The run stopped: these calls need a person's decision."""

    pending: list[DecisionStep]


def output_types(output_type: Any) -> list[Any]:
    """The output types an ``output_type`` lists, flattened as pydantic-ai flattens them: the items of a list or
    tuple (nested ones too) and the members of a union (``X | Y``, ``Union[X, Y]``, ``Annotated`` around it, a
    ``type`` alias of it); anything else (a class, an output function, ``ToolOutput(...)``) is one item."""
    if isinstance(output_type, Sequence) and not isinstance(output_type, (str, bytes)):
        return [item for member in output_type for item in output_types(member)]
    members = _union_members(output_type)
    return list(members) if members else [output_type]


def _union_members(output_type: Any) -> tuple[Any, ...]:
    # typing-inspection (pydantic's, which pydantic-ai reads output types with) knows every spelling of these.
    if typing_objects.is_typealiastype(output_type):  # ``type X = A | B``
        output_type = output_type.__value__
    if typing_objects.is_annotated(typing.get_origin(output_type)):
        output_type = typing.get_args(output_type)[0]
    if is_union_origin(typing.get_origin(output_type)):
        return typing.get_args(output_type)
    return ()


def allows_deferred_calls(output_type: Any) -> bool:
    """Whether ``output_type`` lets a run stop for deferred calls: ``DeferredToolRequests`` itself is among its
    types (pydantic-ai's own rule: a subclass of it is an ordinary output type, which the model fills in)."""
    return any(item is DeferredToolRequests for item in output_types(output_type))


def with_deferred_output(output_type: Any) -> Any:
    """``output_type`` plus ``DeferredToolRequests`` (the model sees no difference: nothing is added to the request)."""
    types = output_types(output_type)
    if not allows_deferred_calls(types):
        types.append(DeferredToolRequests)
    return types


def run_until_decision_needed(
    agent: Agent[Any, Any],
    prompt: str,
    run: Attempt,
    *,
    output_type: Any,
    **run_kwargs: Any,
) -> AgentRunResult[Any] | WaitingForDecisions:
    """Run the agent, continuing past every stop whose decisions are recorded; stop at the first that lacks one.

    :param agent: The agent (run with the durable capability passed in ``run_kwargs``).
    :param prompt: The user prompt.
    :param run: The durable attempt (its cache holds the recorded steps and decisions).
    :param output_type: The output type the task wants; ``DeferredToolRequests`` is added to it.
    :param run_kwargs: Further ``agent.run_sync`` arguments (``model``, ``usage_limits``, ``capabilities``).
    """
    allowed = allows_deferred_calls(output_type)
    if not allowed and _pydantic_ai.agent_has_output_validators(agent):
        # pydantic-ai refuses a run output type beside output validators: run the agent as it is; a call that
        # then needs approval fails with the advice in _without_deferred_output.
        return _without_deferred_output(
            agent, prompt, {**run_kwargs, "usage": run_kwargs.get("usage") or AttemptUsage()}
        )
    # The agent's own output types, untouched, when they already allow deferred calls.
    override: Any = None if allowed else with_deferred_output(output_type)
    history: list[ModelMessage] | None = None
    results: DeferredToolResults | None = None
    # Sees which agent run each model response is counted for: a delegate without the capability is named.
    usage: RunUsage = run_kwargs.pop("usage", None) or AttemptUsage()
    while True:
        if history is None:
            result = agent.run_sync(prompt, usage=usage, **_output(override), **run_kwargs)
        else:
            # The usage goes on from the stop, so that usage limits count the whole run (as the durable
            # run's replay counters do), not each continuation from zero.
            result = agent.run_sync(
                message_history=history,
                deferred_tool_results=results,
                usage=usage,
                **_output(override),
                **run_kwargs,
            )
        usage = result.usage
        requests = result.output
        if not isinstance(requests, DeferredToolRequests):
            return result
        if requests.calls:
            names = ", ".join(sorted({call.tool_name for call in requests.calls}))
            raise ApprovalsUnsupported(
                f"the tool(s) {names} deferred their call for work done outside the agent (CallDeferred or an "
                "external tool); AgentOperator supports calls that need approval (requires_approval=True, "
                "ApprovalRequired) but not external results. Make the tool do its work, or raise "
                "ApprovalRequired instead."
            )
        messages = result.all_messages()
        steps = [run.first.decision_step(call, messages) for call in requests.approvals]
        pending = [step for step in steps if step.recorded is None]
        decided = [step for step in steps if step.recorded is not None]
        for step in decided:
            assert step.recorded is not None
            run.log.info(
                "Approval: %s (call %s) was %s (recorded decision)",
                step.tool_name,
                step.call.tool_call_id,
                step.recorded.describe(),
            )
        if pending:
            unkeyed = [step.tool_name for step in pending if step.key is None]
            if unkeyed:
                raise ApprovalsUnsupported(
                    f"the call(s) to {', '.join(unkeyed)} need approval, but the conversation before them could not "
                    "be fingerprinted (see the warning above), so a decision could not be recorded and the run could "
                    "not resume after the wait"
                )
            return WaitingForDecisions(pending=pending)
        history = messages
        results = DeferredToolResults(
            approvals={step.call.tool_call_id: step.recorded.as_result() for step in decided if step.recorded}
        )


def _output(override: Any) -> dict[str, Any]:
    return {} if override is None else {"output_type": override}


@dataclass
class _UnhandledDeferredCalls(AbstractCapability[Any]):
    """Notes that a run asked its capabilities to handle deferred calls none of them handled before this one.

    pydantic-ai asks the capabilities in order (the run's after the agent's) and stops at the first that
    handles every call; this one handles none. A run whose output types do not allow deferred calls then
    fails with pydantic-ai's ``UserError``: with this note, that error is known to be about those calls.
    """

    seen: bool = False

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        if requests.approvals or requests.calls:
            self.seen = True
        return None


def _without_deferred_output(agent: Agent[Any, Any], prompt: str, run_kwargs: dict[str, Any]) -> AgentRunResult[Any]:
    unhandled = _UnhandledDeferredCalls()
    arguments = {**run_kwargs, "capabilities": [*run_kwargs.get("capabilities", ()), unhandled]}
    try:
        return agent.run_sync(prompt, **arguments)
    except UserError as error:
        if not unhandled.seen:
            raise
        raise ApprovalsUnsupported(
            "a tool call needs approval, but the agent has output validators, so AgentOperator cannot add "
            "DeferredToolRequests to its output types for the run (pydantic-ai refuses a run output type beside "
            "output validators). Add DeferredToolRequests to the agent's own output_type, e.g. "
            "Agent(..., output_type=[MyOutput, DeferredToolRequests])."
        ) from error
