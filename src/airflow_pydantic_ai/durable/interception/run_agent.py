"""The one way a durable attempt runs an agent: the operator, the tests and the benchmark all call it.

:func:`run_agent` wires the attempt into the run (the attempt made current for every
:class:`DurableCapability`, one passed to this run, usage limits that do not count replayed steps, a usage
that names a delegate sharing it without the capability: ``unrecorded.py``),
continues past approval stops whose decisions are recorded, and, when pydantic-ai gives up on the model's answers
(``UnexpectedModelBehavior``), forgets what the run failed on so that a retry asks again instead of
replaying it. Around it, :meth:`Attempt.ending` tidies up a failed try and logs the summary line.

The whole lifecycle, as the operator runs it::

    run = Attempt.open(store, attempt=try_number, log=log)          # load the cache
    with run.ending():                                               # summary whatever happens
        result = run_agent(run, agent, prompt, usage_limits=limits)  # replay, or run and record
        run.record_output(result.output)                             # before XCom
    run.finish()                                                     # once Airflow stored the success
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.exceptions import UnexpectedModelBehavior

from airflow_pydantic_ai.durable.attempt.nesting import attempt_scope
from airflow_pydantic_ai.durable.interception.approvals import WaitingForDecisions, run_until_decision_needed
from airflow_pydantic_ai.durable.interception.capability import DurableCapability
from airflow_pydantic_ai.durable.reporting.telemetry import telemetry_scope
from airflow_pydantic_ai.durable.steps.pending_step import RequestPending

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = ["run_agent"]


def run_agent(
    run: Attempt,
    agent: Agent[Any, Any],
    prompt: str,
    *,
    usage_limits: UsageLimits | None = None,
    capabilities: Sequence[Any] = (),
    **run_arguments: Any,
) -> AgentRunResult[Any] | WaitingForDecisions:
    """Run ``agent`` on ``prompt`` as attempt ``run``: its result, or the calls it stopped at for a decision.

    :param usage_limits: The run's limits; replayed steps do not count against them.
    :param capabilities: Further capabilities for the run (the durable one is innermost whatever their order).
    :param run_arguments: Further ``agent.run_sync`` arguments (``model``, ``deps``, ``event_stream_handler``).
    """
    run.policy.names_agent(agent.name)  # durable_mode: a replay miss names the agent
    try:
        # Every run started here at the top level is the attempt's first run (after an approval, the same
        # conversation goes on); runs started inside its tool calls are scoped under them. issue 22: replayed
        # steps stay out of exported telemetry (pydantic-ai >= 2.68).
        with attempt_scope(run, root_claims=True), telemetry_scope():
            return run_until_decision_needed(
                agent,
                prompt,
                run,
                output_type=agent.output_type,
                usage_limits=run.first.usage_limits(usage_limits),
                capabilities=[DurableCapability(), *capabilities],
                **run_arguments,
            )
    except RequestPending:
        run.end.waiting_for = "the provider"  # the report line says whom the try waits for (issue 38)
        raise
    except UnexpectedModelBehavior:
        # Retries ran out: what failed (the last answer, the retries it drew) would fail the same way on replay.
        run.first.forget_what_failed()
        raise
