"""The pydantic-ai capability that makes agent runs durable: on any agent, inert outside a durable attempt.

``DurableCapability()`` (no arguments) can sit on an agent for good (``Agent(..., capabilities=[
DurableCapability()])``): when a run starts inside a durable attempt (the operator's ``durable=True``,
:func:`~airflow_pydantic_ai.durable_attempt` in a plain task), it finds the attempt through a context
variable and records into it, scoped under the step that started the run (see ``attempt/nesting.py``);
anywhere else (a test, a notebook, a task that is not durable) it does nothing at all.

Guarantees: one agent run records once, however many durable capabilities it carries; a run's place in
the attempt is decided once, in ``for_run``, before any hook fires.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import CapabilityOrdering
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.output import OutputContext
from pydantic_ai.toolsets import AbstractToolset

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
from airflow_pydantic_ai.durable.attempt.attempt import Attempt
from airflow_pydantic_ai.durable.attempt.nesting import current_place, draw_run_id
from airflow_pydantic_ai.durable.encoding.allowed_types import declared_output
from airflow_pydantic_ai.durable.interception.context_model import RunContextModel
from airflow_pydantic_ai.durable.interception.live_operations import name_live_operations
from airflow_pydantic_ai.durable.interception.model import CachingModel
from airflow_pydantic_ai.durable.interception.response_chain import ResponseChain
from airflow_pydantic_ai.durable.interception.toolset import CachingToolset
from airflow_pydantic_ai.durable.keys.run_ids import stable_conversation_id

__all__ = ["DurableCapability"]


@dataclass
class DurableCapability(AbstractCapability[Any]):
    """Records and replays the model requests and tool calls of every run of an agent inside a durable attempt.

    Put it on any agent (``capabilities=[DurableCapability()]``), or pass it to one run: inside a durable
    attempt the run is recorded and replayed like the operator's own run, outside one it records nothing (its
    tools' calls are only made known to ``idempotency_key()`` and ``tool_checkpoint()``). Every
    tool source (``toolsets=``, ``@agent.tool``, toolset capabilities, MCP servers, dynamic toolsets) is
    covered without toolset ids, and output functions (``output_type=`` a function, ``ToolOutput(fn)``,
    ``TextOutput(fn)``) are recorded and replayed like tools; an output validator that fails after the
    function returned leaves the function's result recorded, and it runs again on the replayed result.
    """

    run: AgentRun | None = None
    """The agent run this capability records into (given an :class:`Attempt`: its first run; None: found when a
    run starts, in ``for_run``)."""
    chain: ResponseChain = field(default_factory=ResponseChain, init=False, repr=False, compare=False)
    """The run's OpenAI Responses chain across its requests (a wrapper model is made for each request)."""

    def __post_init__(self) -> None:
        given: Any = self.run
        if isinstance(given, Attempt):  # DurableCapability(attempt): the attempt's first run records
            self.run = given.first

    def get_ordering(self) -> CapabilityOrdering:
        # Innermost: closest to the real model and tools, so other capabilities' wrappers see replays
        # exactly as they would see live answers.
        return CapabilityOrdering(position="innermost")

    def get_default_run_id(self) -> str | None:
        # The same run_id on every try of the task instance (pydantic-ai asks before for_run; an explicit
        # run_id= wins and this is not asked).
        place = current_place()
        return None if place is None else draw_run_id(place)

    def get_default_conversation_id(self, run_id: str) -> str | None:
        # Used only by a run that inherits none from its history (an approval's continuation inherits it).
        return None if current_place() is None else stable_conversation_id(run_id)

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        if self.run is not None:
            return self
        place = current_place()
        if place is None:
            return self  # not in a durable attempt: inert
        agent = getattr(ctx, "agent", None)
        bound = place.run.attempt.bind(place, getattr(ctx, "run_id", None), getattr(agent, "name", None))
        return DurableCapability(bound) if bound is not None else self

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        if self.run is not None:
            # The task the run lives in: cancelled as a whole (a timeout), it bounds the wait for tool threads.
            self.run.run_task = asyncio.current_task()
            self.run.attempt.stats.telemetry.run_started()  # issue 22: the task's identity on the agent run's span
            name_live_operations(self.run, ctx)  # capability operations run live: say so once per attempt
        return await handler()

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        if self.run is not None and isinstance(error, UnexpectedModelBehavior):
            # Retries ran out: what failed (the last answer, the retries it drew) would fail the same way on replay.
            self.run.forget_what_failed()
        raise error

    def get_wrapper_model(self, model: Model) -> Model | None:
        if isinstance(model, RunContextModel):
            # An agent run given ``model=ctx.model`` in a tool: its requests are its own run's steps.
            return None if self.run is None else CachingModel(model.wrapped, self.run, self.chain)
        if self.run is None or _records(model):
            return None
        return CachingModel(model, self.run, self.chain)

    if hasattr(AbstractCapability, "compact_history"):  # pydantic-ai 2.78: history compaction (not on 2.62/2.68)

        async def prepare_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
            # pydantic-ai hands the compact_history hooks the model as the prepare_model_request hooks leave it,
            # before the get_wrapper_model wrappers: wrapped here, the compaction's own request (a summary through
            # CompactionRequest.conversation_request.model) is a model step, recorded and replayed like the others,
            # as pydantic-ai's own durable engines make it a durable model operation. The request sent after it
            # goes through the same wrapper (get_wrapper_model does not wrap it twice).
            if self.run is not None:
                model = request_context.model
                if isinstance(model, RunContextModel):
                    request_context.model = CachingModel(model.wrapped, self.run, self.chain)
                elif not _records(model):
                    request_context.model = CachingModel(model, self.run, self.chain)
            return request_context

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        if isinstance(toolset, CachingToolset):
            return None
        if self.run is None:
            # Outside a durable attempt: a pass-through that only makes each call known to idempotency_key() and
            # tool_checkpoint(). Inside one, a capability left unbound (a second one on a bound run) stays inert.
            return CachingToolset(wrapped=toolset) if current_place() is None else None
        return CachingToolset(wrapped=toolset, run=self.run)

    async def wrap_output_process(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: Any, handler: Any
    ) -> Any:
        # Only an output *function* can have side effects; plain output types are pure validation, and a
        # partial output while streaming is looked at again when the stream ends.
        if self.run is None or not output_context.has_function or ctx.partial_output:
            return await handler(output)
        call = output_context.tool_call
        step = self.run.output_step(
            output_context.function_name or "output",
            call.args if call is not None else output,
            call.tool_call_id if call is not None else None,
            ctx.messages,
            declared_output(_pydantic_ai.agent_output_type(ctx)),
        )
        # pydantic-ai runs the output validators in the same step, after the function: a validator that
        # failed on the function's recorded result runs again on it (from that validator on).
        validators = _pydantic_ai.output_validators(ctx)
        if step.failed_validator is not None:
            index, name = step.failed_validator
            if index < len(validators) and _name_of(validators[index], index) == name:
                value = step.replay()
                for validator in validators[index:]:
                    value = await validator.validate(value, ctx)
                return value
            # Never hand back a result that skipped a validator.
            self.run.attempt.log.warning(
                "Durable: %s was recorded when output validator %s failed on its result, and this run's output "
                "validators differ; the function runs again",
                step.label,
                name,
            )
            step.forget()

        def validator_failure(error: BaseException) -> tuple[int, Any, str] | None:
            failed = _pydantic_ai.failed_output_validator(error, validators)
            if failed is None:
                return None
            index, value = failed
            return index, value, _name_of(validators[index], index)

        return await step.replay_or_run(lambda: handler(output), validator_failure=validator_failure)


def _records(model: Model) -> bool:
    """Whether ``model`` already records: a ``CachingModel``, or a wrapper around one (a wrapper another
    capability put around the model this capability wrapped in ``prepare_model_request``)."""
    current: Any = model
    while current is not None:
        if isinstance(current, CachingModel):
            return True
        current = current.wrapped if isinstance(current, WrapperModel) else None
    return False


def _name_of(validator: Any, index: int) -> str:
    """An output validator's function name (``number 2`` for a nameless one), for the log and the entry."""
    return str(getattr(validator.function, "__name__", None) or f"number {index + 1}")
