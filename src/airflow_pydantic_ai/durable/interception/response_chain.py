"""A replayed OpenAI Responses answer continues the server-side chain, as the run without the failure would have.

With ``openai_previous_response_id="auto"`` (and the Responses WebSocket transport, where it is the default),
pydantic-ai sends ``previous_response_id`` and only the new input items when the latest response of the
history is *known unchanged*: its ``history_digest`` equals the digest of its parts after the messages before
it, as they are now. That digest covers every field of those messages (each request's ``timestamp`` and
``run_id`` included), so a response replayed on a retry, stamped with the digest of try 1's history, never
matched try 2's history, and the request after the replayed steps re-sent the whole conversation.

The fix: when a step is replayed, :meth:`ResponseChain.replayed` gives the response the digest the model
would have recorded had it answered *this* history just now, computed by pydantic-ai itself
(``durable/_pydantic_ai.py``: the model's key, whether instructions count, whether the settings ask for a
digest at all). This is sound because a replay happens only when the request is the one that produced
the recorded response (its fingerprint covers everything the provider sees; the per-try fields it leaves
out are the ones the provider never sees), so the server holds exactly that conversation under the
response's id. ``history_digest`` is no part of any fingerprint, so keys, and the caches already written,
are unchanged; the entry keeps try 1's digest, which is never read again.

A chain that is gone on OpenAI's side (a stored response expires after 30 days, was deleted, or the
retry uses another project's key) is rejected by the server: a 400 ``previous_response_not_found``,
which pydantic-ai raises as ``ModelHTTPError`` with no fallback of its own, and which would fail every
retry of the task (the replayed steps replay it again). :meth:`ResponseChain.after_rejection` turns that
into one WARNING and the same request once more with the chain broken at the replayed response (the
whole conversation, as a retry sent before this fix). A response the attempt got live is never second-
guessed: its rejection is the user's to see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel

from airflow_pydantic_ai.durable._pydantic_ai import continues_server_state, with_history_digest_after

__all__ = ["ResponseChain", "is_rejected_chain"]

_REJECTED_CODES = frozenset({"previous_response_not_found"})
_BROKEN_DIGEST = ""
"""A digest no history has: pydantic-ai does not continue from a response that carries it (2.62 trusts a
response *without* a digest, 2.68 does not; both refuse one that does not match)."""


def serving_model(model: Model, response: ModelResponse) -> Model | None:
    """The model under ``model`` that answers with server-side state and would have given ``response``;
    None when there is none (any other model: nothing to continue)."""
    while isinstance(model, WrapperModel):
        model = model.wrapped
    if continues_server_state(model):
        return model
    if isinstance(model, FallbackModel):
        members = [serving_model(member, response) for member in model.models]
        candidates = [m for m in members if m is not None and m.system == response.provider_name]
        named = [m for m in candidates if m.model_name == response.model_name]
        found = named or candidates
        return found[0] if found else None
    return None


def is_rejected_chain(error: BaseException) -> bool:
    """Whether ``error`` is the server refusing the ``previous_response_id`` it was sent (the response is gone)."""
    if not isinstance(error, ModelHTTPError) or error.status_code not in (400, 404):
        return False
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if not isinstance(body, dict):
        return False
    return body.get("code") in _REJECTED_CODES or (
        body.get("param") == "previous_response_id" and error.status_code == 404
    )


@dataclass
class ResponseChain:
    """The Responses chain of one caching model: the response ids it replayed in this attempt."""

    replayed_ids: set[str] = field(default_factory=set)

    def replayed(
        self,
        model: Model,
        messages: Sequence[ModelMessage],
        settings: Any,
        parameters: Any,
        response: ModelResponse,
    ) -> ModelResponse:
        """``response``, replayed after ``messages``, with the ``history_digest`` pydantic-ai gives it now."""
        rechained = self.digested(model, messages, settings, parameters, response)
        if rechained is not response and rechained.provider_response_id:
            self.replayed_ids.add(rechained.provider_response_id)
        return rechained

    @staticmethod
    def digested(
        model: Model,
        messages: Sequence[ModelMessage],
        settings: Any,
        parameters: Any,
        response: ModelResponse,
    ) -> ModelResponse:
        """``response`` with the ``history_digest`` the model serving it records after ``messages`` (as it is
        when no model under ``model`` keeps server-side state, or the digest cannot be computed: then the next
        request sends the whole conversation, which is never wrong)."""
        serving = serving_model(model, response)
        if serving is None:
            return response
        try:
            return with_history_digest_after(serving, messages, settings, parameters, response) or response
        except Exception:  # a pydantic-ai whose private computation changed shape: not continued, never a failure
            return response

    def after_rejection(self, error: BaseException, messages: Sequence[ModelMessage]) -> list[ModelMessage] | None:
        """The history to send again when ``error`` rejected the chain of a response this attempt replayed (the
        latest response of ``messages``): ``messages`` with it no longer continued from, so the whole conversation
        goes out; else None (not such a rejection, or the response was not replayed: the error stands).
        """
        if not is_rejected_chain(error):
            return None
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, ModelResponse) and message.provider_response_id:
                if message.provider_response_id not in self.replayed_ids:
                    return None
                broken = list(messages)
                broken[index] = replace(message, history_digest=_BROKEN_DIGEST)
                return broken
        return None
