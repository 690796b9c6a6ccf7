"""The pydantic-ai internals the engine reads (and never changes), each in one function, with the releases
it was checked on.

pydantic-ai has no public way to ask these things; every private name the engine uses (a leading
underscore in a pydantic-ai module or attribute) is used here only, so a pydantic-ai release that moves
one breaks one function, and its fallback keeps the engine working. Checked on pydantic-ai 2.62 to 2.68.
Airflow's version differences live in the Airflow side's ``_compat.py``; this module imports nothing of
Airflow and nothing of the Airflow side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse

__all__ = [
    "agent_has_output_validators",
    "agent_output_type",
    "batch_of",
    "batched_model",
    "continues_server_state",
    "current_run_context",
    "durable_operation_names",
    "failed_output_validator",
    "job_gone",
    "mark_run_suspended",
    "output_validators",
    "pending_job",
    "tool_function",
    "with_history_digest_after",
]


def agent_has_output_validators(agent: Any) -> bool | None:
    """Whether a pydantic-ai agent has output validators (``@agent.output_validator``); None when unknown.

    pydantic-ai refuses a run ``output_type`` beside output validators and has no public way to ask
    whether an agent has any: ``Agent._output_validators`` (2.62 to 2.68) is read here, and nowhere else.
    """
    validators = getattr(agent, "_output_validators", None)
    return None if validators is None else bool(validators)


def output_validators(ctx: Any) -> tuple[Any, ...]:
    """The ``@agent.output_validator`` functions of the run ``ctx`` (a ``RunContext``) belongs to, in the order
    pydantic-ai runs them, as its ``OutputValidator`` objects (``await validator.validate(value, ctx)``).

    pydantic-ai keeps them in ``Agent._output_validators`` and reads them from there at each run's start;
    ``RunContext.agent`` names the agent. Empty when the context names no agent.
    """
    agent = getattr(ctx, "agent", None)
    return tuple(getattr(agent, "_output_validators", None) or ())


def failed_output_validator(error: BaseException, validators: Sequence[Any]) -> tuple[int, Any] | None:
    """Which of ``validators`` raised ``error`` after the output function returned, and the value it was given.

    pydantic-ai runs the output function and then the output validators in one step (``do_process``,
    inside ``wrap_output_process``), and no hook sits between them: the traceback tells them apart. The
    frame right below the outermost ``do_process`` is ``OutputValidator.validate`` when a validator
    raised; anything else (the output function raised, or a run it made inside) gives None, as does a
    pydantic-ai that no longer has these frames (the caller then treats the error as the function's).
    """
    from pydantic_ai._output import OutputValidator

    validate = getattr(OutputValidator.validate, "__code__", None)
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_frame.f_code.co_name != "do_process":
        traceback = traceback.tb_next
    below = traceback.tb_next if traceback is not None else None
    if below is None or below.tb_frame.f_code is not validate:
        return None
    frame_locals = below.tb_frame.f_locals
    for index, validator in enumerate(validators):
        if validator is frame_locals.get("self"):
            return index, frame_locals.get("result")
    return None


def durable_operation_names(capability: Any) -> tuple[str, ...]:
    """The names of a capability's ``@durable_operation`` methods (pydantic-ai's ``durable_exec``), sorted.

    The decorator marks each method with an object pydantic-ai reads through
    ``durable_exec._capability_operation.get_durable_operation_marker`` (checked on 2.62 and 2.68; the
    public ``durable_exec`` face has no reader for it). Overrides of base hooks pydantic-ai marks durable
    count too, as in its own collection. Empty when pydantic-ai has no such marker.
    """
    try:
        from pydantic_ai.durable_exec._capability_operation import get_durable_operation_marker
    except ImportError:  # pragma: no cover - a pydantic-ai without capability operations
        return ()
    names: set[str] = set()
    cls = type(capability)
    for base in cls.__mro__[1:]:
        for attribute, member in vars(base).items():
            marker = get_durable_operation_marker(member)
            if (
                marker is not None
                and getattr(marker, "base_hook", False)
                and getattr(cls, attribute, None) is not member
            ):
                names.add(marker.name)
    for klass in cls.__mro__:
        for member in vars(klass).values():
            marker = get_durable_operation_marker(member)
            if marker is not None and not (getattr(marker, "base_hook", False) and member is marker.function):
                names.add(marker.name)
    return tuple(sorted(names))


def tool_function(tool: Any) -> Callable[..., Any] | None:
    """The Python function behind a function tool (``FunctionToolsetTool.call_func`` is its ``FunctionSchema``'s
    bound ``call``; a combined toolset's tool holds it as ``source_tool``; checked on 2.62-2.68); None for any
    other tool (an MCP server's)."""
    for _ in range(8):  # tools wrapped in tools
        inner = getattr(tool, "source_tool", None)
        if inner is None:
            break
        tool = inner
    schema = getattr(getattr(tool, "call_func", None), "__self__", None)
    function = getattr(schema, "function", None)
    return function if callable(function) else None


def agent_output_type(ctx: Any) -> Any:
    """The ``output_type`` of the agent a run context belongs to (``RunContext.agent``, 2.62-2.68); None if unknown."""
    return getattr(getattr(ctx, "agent", None), "output_type", None)


def current_run_context() -> Any:
    """The ``RunContext`` of the agent run whose work is running in this context (None outside any run).

    pydantic-ai sets it around each run's model requests, and the usage it counts for them, with the getter
    in a private module (``pydantic_ai._run_context.get_current_run_context``, checked on pydantic-ai 2.62
    and 2.68; ``usage.incr`` runs inside it on both). None when a pydantic-ai no longer has it.
    """
    try:
        from pydantic_ai._run_context import get_current_run_context
    except ImportError:
        return None
    return get_current_run_context()


def continues_server_state(model: Any) -> bool:
    """Whether ``model`` records a ``history_digest`` on its responses, which decides whether a later request
    continues from them (``OpenAIResponsesModel`` with ``openai_previous_response_id`` or the WebSocket
    transport). Its private ``_history_to_record`` is the method that decides it (checked on pydantic-ai
    2.62 and 2.68).
    """
    return callable(getattr(model, "_history_to_record", None)) and _digest_function() is not None


def with_history_digest_after(
    model: Any,
    messages: Sequence[ModelMessage],
    settings: Any,
    parameters: Any,
    response: ModelResponse,
) -> ModelResponse | None:
    """``response`` with the ``history_digest`` ``model`` would give it, had it just answered ``messages`` with
    these request settings and parameters: pydantic-ai's own computation (its key, whether instructions count,
    whether the settings ask for one at all), or None when this pydantic-ai has no such computation.

    ``OpenAIResponsesModel.request`` prepares the request and then digests the history with
    ``self._history_to_record(messages, settings, parameters)`` (a hasher, or None when no later request may
    continue from the response) and ``with_history_digest(response, hasher)``: 2.68 keeps that function in
    ``pydantic_ai.models.openai._history_digest``, 2.62 as ``pydantic_ai.models.openai._with_history_digest``.
    A response that would have had none gets none (``with_history_digest`` leaves the field as it was).
    """
    history_to_record = getattr(model, "_history_to_record", None)
    with_history_digest = _digest_function()
    if not callable(history_to_record) or with_history_digest is None:
        return None
    prepared_settings, prepared_parameters = model.prepare_request(settings, parameters)
    hasher = history_to_record(list(messages), dict(prepared_settings or {}), prepared_parameters)
    if hasher is None:
        return response if response.history_digest is None else _without_digest(response)
    return with_history_digest(response, hasher)


def _without_digest(response: ModelResponse) -> ModelResponse:
    from dataclasses import replace

    return replace(response, history_digest=None)


def _digest_function() -> Callable[[ModelResponse, Any], ModelResponse] | None:
    """pydantic-ai's ``with_history_digest`` (2.68) or ``_with_history_digest`` (2.62); None without openai."""
    try:
        from pydantic_ai.models.openai._history_digest import with_history_digest

        return with_history_digest  # type: ignore[no-any-return]
    except ImportError:
        pass
    try:
        from pydantic_ai.models import openai
    except ImportError:
        return None
    found = getattr(openai, "_with_history_digest", None)
    return found if callable(found) else None


# --- batch and background requests (issue 38; pydantic-ai 2.78) ---------------------------------------------------


def pending_job(response: Any) -> tuple[str, str] | None:
    """``(kind, job id)`` when ``response`` is a suspended response the provider still works on: a request waiting
    for its batch (``kind="batch"``, the batch id) or an OpenAI background response (``"background"``, its id);
    None for anything else (a complete response, a generation paused to be continued, Anthropic's ``pause_turn``).

    pydantic-ai keeps a batch request's ticket under ``provider_details['batch']`` and says whether it is still
    live with ``pydantic_ai.models._batch_model._pending_ticket`` (a merged response can keep a stale ticket); an
    OpenAI background job is marked ``provider_details['background']``.
    """
    if not isinstance(response, ModelResponse) or response.state != "suspended":
        return None
    ticket = _batch_ticket(response)
    if ticket is not None:
        return "batch", str(ticket["batch"].id)
    if (response.provider_details or {}).get("background") and response.provider_response_id:
        return "background", response.provider_response_id
    return None


def _batch_ticket(response: ModelResponse) -> Any:
    try:
        from pydantic_ai.models._batch_model import _pending_ticket
    except ImportError:  # pydantic-ai before batch support (2.62)
        return None
    return _pending_ticket(response)


def batch_of(response: ModelResponse) -> tuple[Any, int] | None:
    """The ``Batch`` handle a pending batch response waits on and how many times pydantic-ai submitted its request
    again (its ticket's ``resubmissions``); None when it waits on no batch."""
    ticket = _batch_ticket(response)
    return None if ticket is None else (ticket["batch"], int(ticket.get("resubmissions", 0)))


def batched_model(model: Any) -> Any:
    """``model`` when it is pydantic-ai's ``BatchedModel`` (what ``BatchModelRequests`` wraps a model in), else None."""
    try:
        from pydantic_ai.models._batch_model import BatchedModel
    except ImportError:
        return None
    return model if isinstance(model, BatchedModel) else None


def mark_run_suspended(error: BaseException) -> None:
    """Tell pydantic-ai's continuation loop that ``error`` suspends a run that continues later, so it leaves the
    batch or background response running instead of cancelling it (``models._continuation.mark_run_suspended``)."""
    try:
        from pydantic_ai.models._continuation import mark_run_suspended as mark
    except ImportError:
        return
    mark(error)


def job_gone(error: BaseException) -> bool:
    """Whether ``error`` says the provider no longer has a batch or background response (past its retention, or
    never in this project): pydantic-ai's ``SuspendedResponseExpired`` (2.78)."""
    from pydantic_ai import exceptions

    gone = getattr(exceptions, "SuspendedResponseExpired", None)
    return gone is not None and isinstance(error, gone)
