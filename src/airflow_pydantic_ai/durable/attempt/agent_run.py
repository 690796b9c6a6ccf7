"""One agent run of a durable attempt: its key chain, the answer it is on, where it left the recorded path.

An :class:`AgentRun` is one pydantic-ai ``run``/``run_sync`` inside an :class:`~.attempt.Attempt`: the
attempt's first run at the top level (``Attempt.first``), or a run it bound later (a delegate awaited in a
tool call, a second agent after the first: ``Attempt.agent_run``). What lives for the whole try (the
entries, the writer, the count, the budget, the replay policy, the ends) is the attempt's, reached as
``run.attempt``; what is this run's own is here: the key chain (``keys/chain.py``), the last answer
(``last_answer.py``), the divergence (``keys/divergence.py``) and the run's place (``nesting.py``).

Steps (``steps/``) are made by the run (``lookup.py``) and report to it: the count (:meth:`AgentRun.count`),
the answer they belong to, a failure; they record through ``run.attempt``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits

from airflow_pydantic_ai.durable.attempt import ending as ends
from airflow_pydantic_ai.durable.attempt import lookup
from airflow_pydantic_ai.durable.attempt.last_answer import LastAnswer
from airflow_pydantic_ai.durable.attempt.nesting import RunScope, step_scope
from airflow_pydantic_ai.durable.attempt.opening import replayed_from
from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.keys.chain import KeyChain, ModelKey
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.reporting.accounting import StepCount
from airflow_pydantic_ai.durable.reporting.usage import replay_aware
from airflow_pydantic_ai.durable.steps.decision import DecisionStep
from airflow_pydantic_ai.durable.steps.model_step import ModelStep
from airflow_pydantic_ai.durable.steps.tool_step import ToolStep

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = ["AgentRun"]


@dataclass
class AgentRun:
    """One agent run of an attempt. Made by the attempt (``Attempt.first``, ``Attempt.agent_run``)."""

    attempt: Attempt = field(repr=False)
    """The attempt the run belongs to: what lives for the try."""
    keys: KeyChain = field(default_factory=KeyChain, repr=False)
    last_answer: LastAnswer = field(default_factory=LastAnswer, repr=False)
    divergence: Divergence = field(default_factory=Divergence, repr=False)
    scope: RunScope | None = None
    """Where this agent run sits in the attempt; None for the attempt's first run at the top level."""
    run_task: asyncio.Task[Any] | None = field(default=None, repr=False)
    """The asyncio task of the agent run (set when it starts): a cancelled run stops waiting for tool threads."""

    @property
    def who(self) -> str:
        """`` of agent 'name'`` in step log lines once the attempt has run more than one agent, else empty."""
        family = self.attempt.family
        if family.agent_runs <= 1:
            return ""
        agent = self.scope.agent if self.scope is not None else family.first_agent
        return (
            f" of agent {agent!r}" if agent else " of the first agent" if self.scope is None else " of a nested agent"
        )

    @property
    def entry_scope(self) -> dict[str, Any] | None:
        """What each entry of this run stores about its place (None at the top level: entries as before)."""
        return None if self.scope is None else self.scope.to_payload()

    @property
    def run_key(self) -> Any:
        """Which agent run of the attempt this is, for the counts kept by run (None: the first run)."""
        return None if self.scope is None else self.scope.id

    @property
    def answer_number(self) -> int:
        """The number of this agent run's model step whose answer the calls running now belong to."""
        return self.keys.model_steps

    def replayed_from(self, entry_name: str) -> str:
        """Where the replayed entry ``entry_name`` came from, for its log line (``opening.replayed_from``)."""
        return replayed_from(self.attempt.entries.get(entry_name), self.attempt.options.recording)

    def agent_for_replay(self) -> str | None:
        """Which nested agent a replay miss names (None: the attempt's first run, named by the policy)."""
        if self.scope is None:
            return None
        return f"agent {self.scope.agent!r}" if self.scope.agent else "a nested agent"

    def running(self, key: str | None) -> AbstractContextManager[None]:
        """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
        return step_scope(self, key, self.keys.model_steps)

    # --- what steps report: the count, the answer the run is on -----------------------------------

    def count(self, step: StepCount) -> None:
        """A step of this run ended, replayed or live: counted once (``AttemptStats.step_done``)."""
        self.attempt.stats.step_done(step, self.run_key)

    def answer_is(self, entry_names: list[str], shown: str) -> None:
        """The model answer the run is on is stored under ``entry_names``: what a run that gives up forgets."""
        self.last_answer.model_entries = list(entry_names)
        self.last_answer.shown = shown

    def retry_drawn(self, entry_name: str, shown: str, outcome: str) -> None:
        """A call of the current answer drew a retry: forgotten with the answer if the run gives up."""
        self.last_answer.drew_retry(entry_name, shown, outcome)

    def call_failed(self) -> None:
        """A call of the current answer raised an exception that is never recorded: the answer stays cached."""
        self.last_answer.failed_call = True

    def request_failed(self, place: ModelKey) -> None:
        """The model request at ``place`` was sent and raised: the key chain remembers it for a fallback."""
        self.keys.model_request_failed(place)

    def usage_limits(self, limits: UsageLimits | None) -> UsageLimits | None:
        """``limits`` adjusted so that this run's replayed steps do not count against them."""
        return replay_aware(limits, self.attempt.stats.accounting, self.run_key)

    def forget_what_failed(self) -> None:
        """The run ended in ``UnexpectedModelBehavior`` (retries exhausted): remove the answer it failed on."""
        ends.forget_what_failed(self)

    # --- finding a step (``lookup.py``) -------------------------------------------------------------

    def model_step(self, model: Model, messages: Sequence[ModelMessage], settings: Any, parameters: Any) -> ModelStep:
        """Fingerprint a model request and look it up."""
        return lookup.model_step(self, model, messages, settings, parameters)

    def tool_step(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
        *,
        live: bool = False,
        allowed: AllowedTypes = UNDECLARED,
    ) -> ToolStep:
        """Fingerprint a tool call and look it up (``live``: the tool opted out of replay; it runs, unrecorded;
        ``allowed``: the classes its result may name, from the tool's declaration)."""
        return lookup.tool_step(self, tool_name, tool_args, tool_call_id, messages, live=live, allowed=allowed)

    def output_step(
        self,
        function_name: str,
        raw_arguments: Any,
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
        allowed: AllowedTypes = UNDECLARED,
    ) -> ToolStep:
        """Fingerprint a call of an output function (what the model's final answer is handed to) and look it up."""
        return lookup.output_step(self, function_name, raw_arguments, tool_call_id, messages, allowed)

    def decision_step(self, call: ToolCallPart, messages: Sequence[ModelMessage]) -> DecisionStep:
        """The decision slot of a call that waits for approval, looked up in the cache."""
        return lookup.decision_step(self, call, messages)
