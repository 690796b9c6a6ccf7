"""CachingModel: a pydantic-ai model wrapper that replays recorded responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart
from pydantic_ai.models import CompletedStreamedResponse, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.attempt.lookup import compacted
from airflow_pydantic_ai.durable.interception.response_chain import ResponseChain
from airflow_pydantic_ai.durable.reporting.cost import batch_saving
from airflow_pydantic_ai.durable.steps.pending_step import PendingRequest, RequestPending, pending_job

if TYPE_CHECKING:
    from pydantic_ai import RunContext

    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
    from airflow_pydantic_ai.durable.steps.model_step import ModelStep

__all__ = ["CachingModel"]

_REPLAYABLE_STATES = ("complete", "suspended")
_COMPACTION_REQUEST = "[compact_messages]"
"""Stands for the compaction endpoint in a compaction step's key (with its instructions after it)."""


class CachingModel(WrapperModel):
    """Answers a request from the durable cache when its fingerprint was recorded; else asks the model.

    Streamed requests are cached too: live on the first attempt, replayed as a completed stream
    (with part events synthesised from the stored response) on a retry. A replayed response continues an
    OpenAI Responses chain as the live one would have (``response_chain.py``).
    """

    def __init__(self, wrapped: Any, run: AgentRun, chain: ResponseChain | None = None):
        super().__init__(wrapped)
        self.run = run
        self.chain = chain if chain is not None else ResponseChain()
        """The run's Responses chain (the capability keeps one per run: it makes a wrapper per request)."""
        self.served = 0
        """Requests this wrapper saw: one made for a step's request, a compaction's request comes before it."""
        self.pending: PendingRequest | None = None
        """The step whose request the provider works on (a batch, a background response): its checks are no steps."""

    def _with_serving_wrapper(self, wrap: Any) -> Any:
        # pydantic-ai 2.78 applies the capabilities' model wrappers here, around this model. BatchModelRequests'
        # wrapper sends requests through the batch API's methods, which pass through this model unseen: the
        # recording goes outside it instead, so the submission (a suspended response with the batch's ticket) and
        # the result are what this model sees (steps/pending_step.py).
        served = wrap(self)
        batched = _pydantic_ai.batched_model(served)
        if batched is None or batched.wrapped is not self:
            return served
        batched.wrapped = self.wrapped
        outside = CachingModel(batched, self.run, self.chain)
        outside.served = self.served
        return outside

    async def cancel_suspended_response(self, response: ModelResponse) -> None:
        # pydantic-ai cancels the job of a request it stops waiting for (the try was stopped: a timeout, a
        # SIGTERM). A job whose ticket is recorded is left running when a retry is coming: that try picks it up.
        pending = self.pending
        job = pending_job(response)
        if (
            pending is not None
            and job is not None
            and job[1] == pending.ticket.job_id
            and self.run.attempt.outlook.retry_coming
        ):
            self.run.attempt.log.info(
                "Durable: %s is left running for the next try (%s)", pending.step.shown(), pending.ticket.describe()
            )
            return
        await self.wrapped.cancel_suspended_response(response)

    def recording_run(self) -> AgentRun:
        """The run each request is a step of (``ctx.model`` in a tool binds its own on the first request)."""
        return self.run

    def _model_step(
        self, messages: list[ModelMessage], settings: ModelSettings | None, parameters: ModelRequestParameters
    ) -> ModelStep:
        run = self.recording_run()
        if self.served and any(compacted(message) for message in messages):
            # The compaction before this request was a request through this wrapper (a step): recorded, so the
            # warning about a compaction made outside the wrapper has nothing to say in this attempt.
            run.attempt.family.warn_once("compaction")
        self.served += 1
        return run.model_step(self.wrapped, messages, settings, parameters)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        waits_on = pending_job(messages[-1]) if messages else None
        if waits_on is not None and self.pending is not None:
            # pydantic-ai checks on the request this wrapper submitted (or picked up): a check, not a step.
            return await self._check(messages, model_settings, model_request_parameters)
        asked = messages[:-1] if waits_on is not None else messages
        step = self._model_step(asked, model_settings, model_request_parameters)
        if step.replayed is None:
            answer = await self._pending_answer(step, messages, waits_on, model_settings, model_request_parameters)
            if answer is not None:
                return answer

        async def live() -> ModelResponse:
            try:
                return await self.wrapped.request(messages, model_settings, model_request_parameters)
            except ModelHTTPError as error:
                resend = self._resend_after(error, step, messages)
                if resend is None:
                    raise
            response = await self.wrapped.request(resend, model_settings, model_request_parameters)
            return self.chain.digested(self.wrapped, messages, model_settings, model_request_parameters, response)

        response = await step.replay_or_run(live, pending=lambda answer: pending_job(answer) is not None)
        if response is step.replayed:
            return self.chain.replayed(self.wrapped, messages, model_settings, model_request_parameters, response)
        if pending_job(response) is not None:
            # Submitted: the ticket is recorded before pydantic-ai waits (a later try picks up the same job).
            self.pending = PendingRequest.submitted(
                step, response, self.wrapped.model_name, defer=self.run.attempt.options.defer_pending
            )
            self.pending.stop_if_deferred()
        return response

    async def _pending_answer(
        self,
        step: ModelStep,
        messages: list[ModelMessage],
        waits_on: tuple[str, str] | None,
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse | None:
        """The answer of a request that was submitted before (by an earlier try, or by the run whose history ends
        in its suspended response): one check of that job; None when it must be submitted now."""
        asked = messages[:-1] if waits_on is not None else messages
        resumed = PendingRequest.resumed(step, defer=self.run.attempt.options.defer_pending)
        if resumed is not None:
            # An earlier try submitted it: check on that batch or background response instead of submitting.
            self.pending, recorded = resumed
            try:
                return await self._check([*asked, recorded], model_settings, model_request_parameters)
            except Exception as error:
                if waits_on is not None or not _pydantic_ai.job_gone(error):
                    raise
                # Gone from the provider (past its retention): submitted again, as pydantic-ai would have to.
                step.run.attempt.log.warning(
                    "Durable: %s: the provider no longer has %s (%s); the request is submitted again",
                    step.shown(),
                    self.pending.ticket.describe(),
                    error,
                )
                self.pending = None
        if waits_on is not None and isinstance(submitted := messages[-1], ModelResponse):
            # The history ends in a request a run submitted before (PendingModelResponse): its ticket now.
            self.pending = PendingRequest.submitted(
                step, submitted, self.wrapped.model_name, defer=self.run.attempt.options.defer_pending
            )
            return await self._check(messages, model_settings, model_request_parameters)
        return None

    async def _check(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """One check of the pending request (``messages`` end in its suspended response): still pending (a
        resubmission is recorded), or its result, recorded as the step's response."""
        pending = self.pending
        assert pending is not None
        try:
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        except RequestPending:
            raise
        except BaseException as error:
            if not (pending.picked_up and _pydantic_ai.job_gone(error)):  # a job gone is submitted again (request)
                pending.step.record_failure(error)
            raise
        if pending_job(response) is not None:
            pending.checked(response)
            pending.stop_if_deferred()
            return response
        self.pending = None
        pending.collected(response)
        if pending.ticket.kind == "batch":  # counted as a model request above; here what its batch price saved
            self.run.attempt.stats.accounting.live.add_batched(batch_saving(response))
        return response

    async def compact_messages(self, request_context: Any, *, instructions: str | None = None) -> ModelResponse:
        """A provider's own compaction (``NativeCompaction``, pydantic-ai 2.78): a model step like a request, keyed
        by the messages it compacts and the compaction's instructions, so a retry replays the compaction item."""
        asked = ModelRequest(parts=[UserPromptPart(f"{_COMPACTION_REQUEST} {instructions or ''}".rstrip())])
        step = self._model_step(
            [*request_context.messages, asked],
            request_context.model_settings,
            request_context.model_request_parameters,
        )
        return await step.replay_or_run(
            lambda: self.wrapped.compact_messages(request_context, instructions=instructions)
        )

    def _resend_after(
        self, error: ModelHTTPError, step: ModelStep, messages: list[ModelMessage]
    ) -> list[ModelMessage] | None:
        """The history to send again when the server rejected the chain of a replayed response (WARNING)."""
        resend = self.chain.after_rejection(error, messages)
        if resend is not None:
            step.run.attempt.log.warning(
                "Durable: %s: the provider no longer has the response the replayed steps ended with (%s); "
                "sending the whole conversation instead",
                step.shown(),
                error.message,
            )
        return resend

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        if _pydantic_ai.batched_model(self.wrapped) is not None or (messages and pending_job(messages[-1])):
            # A batch result, or a check of a pending request, arrives at once: asked as ``request`` asks it, then
            # streamed as one event per part (as pydantic-ai's BatchedModel streams a batch result).
            response = await self.request(messages, model_settings, model_request_parameters)
            yield CompletedStreamedResponse(
                response, model_request_parameters=model_request_parameters, replay_events=True
            )
            return
        step = self._model_step(messages, model_settings, model_request_parameters)
        # A stream is a context, not one awaitable: the two halves of ModelStep.replay_or_run, around it.
        replayed = step.take_replay()
        if replayed is not None:
            replayed = self.chain.replayed(self.wrapped, messages, model_settings, model_request_parameters, replayed)
            yield CompletedStreamedResponse(
                replayed, model_request_parameters=model_request_parameters, replay_events=True
            )
            return
        step.before_live()
        try:
            async with AsyncExitStack() as opened:
                try:
                    stream = await opened.enter_async_context(
                        self.wrapped.request_stream(messages, model_settings, model_request_parameters, run_context)
                    )
                except ModelHTTPError as error:
                    resend = self._resend_after(error, step, messages)
                    if resend is None:
                        raise
                    stream = await opened.enter_async_context(
                        self.wrapped.request_stream(resend, model_settings, model_request_parameters, run_context)
                    )
                yield stream
        except BaseException as error:
            step.record_failure(error)
            raise
        if pending_job(stream.get()) is not None:
            # A streamed background response the provider goes on with: its ticket, recorded before the wait.
            self.pending = PendingRequest.submitted(
                step, stream.get(), self.wrapped.model_name, defer=self.run.attempt.options.defer_pending
            )
            self.pending.stop_if_deferred()
            return
        # A stream the consumer left before its end holds part of an answer: never replay that.
        step.record(stream.get(), complete=stream.get().state in _REPLAYABLE_STATES)
