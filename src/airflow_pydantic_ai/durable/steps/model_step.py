"""One model request of a durable attempt: replayed from its entry, or run live and recorded.

:meth:`ModelStep.replay_or_run` is the step protocol (the toolset's and output functions' steps have
the same method). A streamed request cannot be one awaitable, so the caching model uses the two
halves it is made of, :meth:`ModelStep.take_replay` and :meth:`ModelStep.record`.

Guarantees: a response that was not read to its end (a stream left early) is never recorded; a
request that raised records nothing; a step without a key (fail closed) runs live and is counted as
not persisted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

from airflow_pydantic_ai.durable.encoding.codec import decode_response, encode_response
from airflow_pydantic_ai.durable.keys.chain import ModelKey
from airflow_pydantic_ai.durable.reporting.accounting import StepCount
from airflow_pydantic_ai.durable.reporting.cost import response_cost
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["ModelStep"]


@dataclass
class ModelStep:
    """A model request of a durable run, replayed or live."""

    run: AgentRun
    place: ModelKey
    replayed: ModelResponse | None = None
    replayed_usage: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def number(self) -> int:
        return self.place.number

    @property
    def label(self) -> str:
        return self.place.label

    @property
    def key(self) -> str | None:
        return self.place.key

    @property
    def entry_name(self) -> str:
        return entry_name("model", self.key or "")

    def shown(self, entry: StepEntry | None = None) -> str:
        """How the log names the step: ``step 5: model openai:gpt-4o``, numbered as the view and ``cache show``
        number it (``numbering.py``): by its entry (``entry``, or the one it replays), else where it would be
        listed if it were recorded now. A step that can never be recorded (no key) has no number."""
        what = f"model {self.label}{self.run.who}"
        if self.key is None:
            return f"a {what} step"
        if entry is None and self.replayed is not None:
            entry = self.run.attempt.entries.get(self.entry_name)
        if entry is None:
            entry = self._entry({}, {})
        return f"step {self.run.attempt.step_number(entry)}: {what}"

    def listed_number(self) -> int:
        """The step's number as the log, the view and ``cache show`` give it (0: it has no key)."""
        if self.key is None:
            return 0
        entry = self.run.attempt.entries.get(self.entry_name) if self.replayed is not None else None
        return self.run.attempt.step_number(entry or self._entry({}, {}))

    def _entry(self, payload: dict[str, Any], usage: dict[str, Any]) -> StepEntry:
        return StepEntry(
            kind="model",
            key=self.key or "",
            step=self.number,
            attempt=self.run.attempt.try_number,
            label=self.label,
            payload=payload,
            components=self.place.components,
            usage=usage,
            recorded_at=time.time(),
            scope=self.run.entry_scope,
        )

    def load(self, entry: StepEntry) -> bool:
        """Take the recorded response from ``entry``; False (with a warning) when it cannot be rebuilt."""
        try:
            self.replayed = decode_response(entry.payload["response"])
        except Exception as error:
            self.run.attempt.entry_unusable(entry, error, f"{self.shown(entry)} runs live")
            return False
        self.replayed_usage = entry.usage
        return True

    async def replay_or_run(
        self,
        request: Callable[[], Awaitable[ModelResponse]],
        *,
        pending: Callable[[ModelResponse], bool] | None = None,
    ) -> ModelResponse:
        """The recorded response; or ``request()`` live, recorded (``pending``: whether a live response is a
        submission the provider works on, which is handed back unrecorded: ``pending_step.py`` records its ticket)."""
        replayed = self.take_replay()
        if replayed is not None:
            return replayed
        self.before_live()
        try:
            response = await request()
        except BaseException as error:
            self.record_failure(error)
            raise
        if pending is not None and pending(response):
            return response
        self.record(response)
        return response

    def before_live(self) -> None:
        """The request is about to be sent: a budget across retries may refuse it first (issue 22)."""
        if self.run.attempt.budget is not None:
            self.run.attempt.budget.before_request(self.shown())

    def take_replay(self) -> ModelResponse | None:
        """The cached response, counted as replayed, or None if the step must run live."""
        if self.replayed is None:
            return None
        run = self.run
        usage, cost = self._recorded_spend(self.replayed)
        run.count(StepCount("model", replayed=True, entry_name=self.entry_name, usage=usage, cost=cost))
        shown = self.shown()
        run.answer_is([self.entry_name], shown)
        run.attempt.log.info("Durable: %s replayed %s", shown, run.replayed_from(self.entry_name))
        return self.replayed

    def _recorded_spend(self, response: ModelResponse) -> tuple[RequestUsage, Decimal | None]:
        """The tokens and cost the replayed request reported when it was recorded (issue 22)."""
        recorded = self.replayed_usage
        usage = RequestUsage(
            input_tokens=int(recorded.get("input_tokens") or 0), output_tokens=int(recorded.get("output_tokens") or 0)
        )
        cost = recorded.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            return usage, Decimal(str(cost))
        return usage, response_cost(replace(response, usage=usage))  # unpriced, or recorded by release 0.2.0 or earlier

    def record_failure(self, error: BaseException) -> None:
        """The request was sent but raised: counted as executed, nothing to cache."""
        self.run.count(StepCount("model"))
        self.run.request_failed(self.place)
        self.run.attempt.log.info(
            "Durable: %s failed after %.2f s (%s)",
            self.shown(),
            time.monotonic() - self.started,
            type(error).__name__,
        )

    def record(self, response: ModelResponse, *, complete: bool = True) -> None:
        """The request ran live: count it, and store its response (with the keys of the tries that failed before)."""
        run = self.run
        cost = response_cost(response)  # issue 22: priced once, for the report and the entry
        run.count(StepCount("model", usage=response.usage, cost=cost))
        shown = self.shown()
        batch = (response.provider_details or {}).get("batch")  # pydantic-ai marks a batch's result so
        how = f"was collected from batch {batch['id']}" if isinstance(batch, dict) and batch.get("id") else "ran live"
        run.attempt.log.info("Durable: %s %s in %.2f s", shown, how, time.monotonic() - self.started)
        if self.key is None:
            run.attempt.writer.skipped()
            return
        if not complete:
            run.attempt.writer.skipped()
            run.attempt.log.warning("Durable: %s was not read to its end (%s); it is not cached", shown, response.state)
            return
        usage: dict[str, Any] = {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        }
        if cost is not None:  # issue 22: a replay and the read side take it as recorded
            usage["cost_usd"] = float(cost)
        entry = self._entry({"response": encode_response(response)}, usage)
        copies = [replace(entry, key=alias) for alias in self.place.aliases]
        run.answer_is([entry.name, *(copy.name for copy in copies)], shown)
        run.attempt.record(entry, shown)
        for copy in copies:
            run.attempt.record(copy, f"{shown} (also as the try that failed before it)")
