"""CachingModel: a pydantic-ai model wrapper that replays recorded responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import CompletedStreamedResponse, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

if TYPE_CHECKING:
    from pydantic_ai import RunContext

    from airflow_pydantic_ai.durable.steps.run import DurableRun

__all__ = ["CachingModel"]

_REPLAYABLE_STATES = ("complete", "suspended")


class CachingModel(WrapperModel):
    """Answers a request from the durable cache when its fingerprint was recorded; else asks the model.

    Streamed requests are cached too: live on the first attempt, replayed as a completed stream
    (with part events synthesised from the stored response) on a retry.
    """

    def __init__(self, wrapped: Any, run: DurableRun):
        super().__init__(wrapped)
        self.run = run

    def recording_run(self) -> DurableRun:
        """The run each request is a step of (``ctx.model`` in a tool binds its own on the first request)."""
        return self.run

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        step = self.recording_run().model_step(self.wrapped, messages, model_settings, model_request_parameters)
        return await step.replay_or_run(
            lambda: self.wrapped.request(messages, model_settings, model_request_parameters)
        )

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        step = self.recording_run().model_step(self.wrapped, messages, model_settings, model_request_parameters)
        # A stream is a context, not one awaitable: the two halves of ModelStep.replay_or_run, around it.
        replayed = step.take_replay()
        if replayed is not None:
            yield CompletedStreamedResponse(
                replayed, model_request_parameters=model_request_parameters, replay_events=True
            )
            return
        step.before_live()
        try:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
        except BaseException as error:
            step.record_failure(error)
            raise
        # A stream the consumer left before its end holds part of an answer: never replay that.
        step.record(stream.get(), complete=stream.get().state in _REPLAYABLE_STATES)
