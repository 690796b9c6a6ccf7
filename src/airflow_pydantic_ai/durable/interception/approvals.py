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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from pydantic_ai.usage import RunUsage

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable.errors import ApprovalsUnsupported
from airflow_pydantic_ai.durable.steps.decision import DecisionStep
from airflow_pydantic_ai.durable.steps.run import DurableRun

__all__ = ["ApprovalsUnsupported", "WaitingForDecisions", "run_until_decision_needed", "with_deferred_output"]


@dataclass
class WaitingForDecisions:
    """The run stopped: these calls need a person's decision."""

    pending: list[DecisionStep]


def with_deferred_output(output_type: Any) -> Any:
    """``output_type`` plus ``DeferredToolRequests`` (the model sees no difference: nothing is added to the request)."""
    types = list(output_type) if isinstance(output_type, (list, tuple)) else [output_type]
    if DeferredToolRequests not in types:
        types.append(DeferredToolRequests)
    return types


def run_until_decision_needed(
    agent: Agent[Any, Any],
    prompt: str,
    run: DurableRun,
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
    types = list(output_type) if isinstance(output_type, (list, tuple)) else [output_type]
    if DeferredToolRequests not in types and _compat.agent_has_output_validators(agent):
        # pydantic-ai refuses a run output type beside output validators: run the agent as it is; a call that
        # then needs approval fails with the advice in _without_deferred_output.
        return _without_deferred_output(agent, prompt, run_kwargs)
    # The agent's own output types, untouched, when they already allow deferred calls.
    override: Any = None if DeferredToolRequests in types else with_deferred_output(output_type)
    history: list[ModelMessage] | None = None
    results: DeferredToolResults | None = None
    usage: RunUsage | None = None
    while True:
        if history is None:
            result = agent.run_sync(prompt, **_output(override), **run_kwargs)
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
        steps = [run.decision_step(call, messages) for call in requests.approvals]
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


def _without_deferred_output(agent: Agent[Any, Any], prompt: str, run_kwargs: dict[str, Any]) -> AgentRunResult[Any]:
    try:
        return agent.run_sync(prompt, **run_kwargs)
    except UserError as error:
        if "DeferredToolRequests" not in str(error):
            raise
        raise ApprovalsUnsupported(
            "a tool call needs approval, but the agent has output validators, so AgentOperator cannot add "
            "DeferredToolRequests to its output types for the run (pydantic-ai refuses a run output type beside "
            "output validators). Add DeferredToolRequests to the agent's own output_type, e.g. "
            "Agent(..., output_type=[MyOutput, DeferredToolRequests])."
        ) from error
