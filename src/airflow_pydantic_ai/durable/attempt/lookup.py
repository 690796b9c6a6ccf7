"""Finding a step: each model request, tool call, output function call and decision of an agent run is
fingerprinted by the run's key chain and looked up in the entries the attempt loaded, once, when it is made.

The step holds either the decoded entry (it will replay) or nothing (it runs live and records itself). The
replay policy (``durable_mode``) is asked here, before anything runs: in ``replay`` mode a step with no entry
raises before any live call. A miss where an earlier try recorded a step at the same point draws the WARNING
that names what changed (``keys/divergence.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import Model

from airflow_pydantic_ai.durable.attempt.last_answer import LastAnswer
from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.keys.fingerprint import FingerprintError
from airflow_pydantic_ai.durable.kinds import KINDS
from airflow_pydantic_ai.durable.steps.decision import DecisionStep
from airflow_pydantic_ai.durable.steps.model_step import ModelStep
from airflow_pydantic_ai.durable.steps.tool_step import ToolStep
from airflow_pydantic_ai.durable.storage.entry import entry_name
from airflow_pydantic_ai.durable.wording import call_label

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["compacted", "decision_step", "model_step", "output_step", "tool_step"]


def model_step(
    run: AgentRun, model: Model, messages: Sequence[ModelMessage], settings: Any, parameters: Any
) -> ModelStep:
    """Fingerprint a model request and look it up."""
    # Only the answer to *this* request, and the retries it draws, can make the run fail (see forget_what_failed).
    run.last_answer = LastAnswer(number=run.keys.model_steps + 1)
    run.attempt.stats.accounting.expect_replays(run.run_key, 0)
    place = run.keys.next_model_key(model, messages, settings, parameters)
    # durable_mode: keep the texts for a diff; in replay mode, fail here, before any live call.
    run.attempt.policy.note_request(place, messages)
    run.attempt.policy.check_model_step(
        place, run.attempt.entries, messages, run.divergence.recorded_at_step, agent=run.agent_for_replay()
    )
    step = ModelStep(run=run, place=place)
    if run.keys.compacted(messages) and run.attempt.family.warn_once("compaction"):
        run.attempt.log.warning(
            "Durable: the conversation before %s was compacted by a capability whose compaction request did not "
            "go through the run's model (a summarizer model of its own, or a hook before the capabilities' "
            "model wrappers), so it is not recorded and runs again on a retry (the steps after it replay when "
            "it summarizes the conversation the same way)",
            step.shown(),
        )
    if place.failure is not None:
        run.attempt.log.warning(
            "Durable: %s cannot be fingerprinted (%s); it runs live, is not recorded, and every later step "
            "runs live too",
            step.shown(),
            place.failure,
        )
        run.divergence.diverged = True
        return step
    if place.key is None:
        return step
    entry = run.attempt.entries.get(step.entry_name)
    if entry is None:
        warning = run.divergence.explain_miss(
            place.number, place.compared or place.components, step.shown, run.attempt.step_number
        )
        if warning is not None:
            run.attempt.log.warning("%s", warning)
    elif step.load(entry):
        cached = run.keys.predicted_tool_keys(messages, step.replayed)  # type: ignore[arg-type]
        run.attempt.stats.accounting.expect_replays(
            run.run_key, sum(entry_name("tool", key) in run.attempt.entries for key in cached)
        )
    return step


def tool_step(
    run: AgentRun,
    tool_name: str,
    tool_args: dict[str, Any],
    tool_call_id: str | None,
    messages: Sequence[ModelMessage],
    *,
    live: bool = False,
    allowed: AllowedTypes = UNDECLARED,
) -> ToolStep:
    """Fingerprint a tool call and look it up (``live``: the tool opted out of replay; it runs, unrecorded;
    ``allowed``: the classes its result may name)."""
    if live:
        label = call_label("tool", tool_name, tool_call_id)
        return ToolStep(run=run, label=label + run.who, tool_name=tool_name, key=None, live=True)
    raw_arguments = _raw_arguments(messages, tool_call_id, tool_args)
    return _call_step(run, "tool", tool_name, raw_arguments, tool_call_id, messages, allowed)


def output_step(
    run: AgentRun,
    function_name: str,
    raw_arguments: Any,
    tool_call_id: str | None,
    messages: Sequence[ModelMessage],
    allowed: AllowedTypes = UNDECLARED,
) -> ToolStep:
    """Fingerprint a call of an output function (what the model's final answer is handed to) and look it up."""
    return _call_step(run, "output", function_name, raw_arguments, tool_call_id, messages, allowed)


def _call_step(
    run: AgentRun,
    kind: Literal["tool", "output"],
    name: str,
    raw_arguments: Any,
    tool_call_id: str | None,
    messages: Sequence[ModelMessage],
    allowed: AllowedTypes,
) -> ToolStep:
    label = call_label(KINDS[kind].words, name, tool_call_id) + run.who
    step = ToolStep(
        run=run,
        label=label,
        tool_name=name,
        key=None,
        is_tool=kind == "tool",
        call_id=tool_call_id,
        arguments=raw_arguments,
        allowed=allowed,
    )
    if run.keys.failed_closed:
        return step
    try:
        # The key formula names an output function's call "output function:{name}": fixed, whatever the wording.
        keyed_name = name if step.is_tool else f"output function:{name}"
        step.key = run.keys.tool_key(keyed_name, raw_arguments, tool_call_id, messages)
    except FingerprintError as error:
        run.attempt.log.warning(
            "Durable: %s cannot be fingerprinted (%s); it runs live and is not recorded", label, error
        )
        return step
    # durable_mode: in replay mode, a call with no entry fails here; a tool named live ignores its entry.
    run.attempt.policy.check_call_step(
        label, name, step.key, run.attempt.entries, run.keys.model_steps, run.divergence.recorded_at_step
    )
    entry = run.attempt.entries.get(step.entry_name)
    if entry is not None and not run.attempt.policy.runs_live(name):
        step.load(entry)
    return step


def decision_step(run: AgentRun, call: ToolCallPart, messages: Sequence[ModelMessage]) -> DecisionStep:
    """The decision slot of a call that waits for approval, looked up in the cache.

    ``messages`` is the run's conversation; the key covers it up to the model answer that made the
    call (the tool key formula), and the chain of model steps so far.
    """
    step = DecisionStep(run=run, call=call, key=None, step_number=run.keys.model_steps)
    if run.keys.failed_closed:
        return step
    try:
        step.key = run.keys.decision_key(call, messages)
    except FingerprintError as error:
        run.attempt.log.warning(
            "Durable: the call %s (%s) cannot be fingerprinted (%s); its decision cannot be recorded",
            call.tool_name,
            call.tool_call_id,
            error,
        )
        return step
    step.load()
    # durable_mode: in replay mode, a decision nobody recorded fails here (no person is asked).
    run.attempt.policy.check_decision(f"{call.tool_name} (call {call.tool_call_id})", step.recorded is not None)
    return step


def compacted(message: ModelMessage) -> bool:
    """Whether a message holds a compaction (a summary or a provider's compaction item that replaced the history
    before it)."""
    return any(isinstance(part, CompactionPart) for part in message.parts)


def _raw_arguments(messages: Sequence[ModelMessage], tool_call_id: str | None, fallback: dict[str, Any]) -> Any:
    """The arguments exactly as the model sent them (validated ones can iterate in hash-seed order)."""
    if tool_call_id is not None:
        for message in reversed(messages):
            if not isinstance(message, ModelResponse):
                continue
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id:
                    return part.args
            break
    return fallback
