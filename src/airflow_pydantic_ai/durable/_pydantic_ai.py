"""This module fences the pydantic-ai private names the durable engine uses: each is read here only, with the
releases it was checked on, and each function degrades to "not known" (None) when a release no longer has it.

Nothing here changes pydantic-ai: it is read, never patched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse

__all__ = ["continues_server_state", "with_history_digest_after"]


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
