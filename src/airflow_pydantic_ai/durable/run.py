"""One attempt of a durable agent run: what the cache holds, what this attempt replays and records.

A :class:`DurableRun` is created at the start of a task attempt with the task instance's
:class:`~airflow_pydantic_ai.durable.store.StepStore`. The caching model and toolset ask it, step by
step, whether a step can be replayed (:meth:`DurableRun.model_step`, :meth:`DurableRun.tool_step`),
and hand it what live steps produced. It keeps the counts for the summary line.

Keys chain: each model step's key covers the key of the model step before it (its *lineage*), and
each tool call's key covers the model step that asked for it. A step that runs live because its
request changed therefore makes every later step run live too, even where a model reuses tool call
ids or gives the same answer to a changed request.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import TypeAdapter
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolRetryError
from pydantic_ai.messages import ModelMessage, ModelResponse, RetryFeedbackPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage, UsageLimits

from airflow_pydantic_ai.durable.codec import (
    UnsupportedValue,
    decode_response,
    decode_value,
    encode_response,
    encode_value,
)
from airflow_pydantic_ai.durable.fingerprint import (
    FingerprintError,
    MessageDigests,
    changed_components,
    digest,
    fingerprint_request,
    fingerprint_tool_call,
)
from airflow_pydantic_ai.durable.store import StepEntry, StepStore

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.decision import DecisionStep

__all__ = [
    "SUMMARY_TEMPLATE",
    "DurableRun",
    "DurableStorageError",
    "ModelStep",
    "StepCounts",
    "ToolStep",
    "describe_error",
    "empty_summary",
    "format_summary",
]

SUMMARY_TEMPLATE = (
    "Durable: replayed {replayed} cached steps ({replayed_model} model, {replayed_tool} tool), "
    "executed {executed} new steps ({executed_model} model, {executed_tool} tool)"
)
"""The summary every attempt logs at INFO. Dashboards grep for it: never change its wording."""

StorageErrors = Literal["warn", "fail"]
_RAISED_OUTCOMES: dict[str, type[Exception]] = {"ModelRetry": ModelRetry, "ToolFailed": ToolFailed}
_RETRY_PART: TypeAdapter[RetryFeedbackPart | ToolReturnPart] = TypeAdapter(RetryFeedbackPart | ToolReturnPart)


class DurableStorageError(RuntimeError):
    """Writing a step to the cache failed and ``durable_storage_errors`` is ``fail``."""


class TaskLogger(Protocol):
    def info(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def warning(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def error(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...
    def debug(self, msg: str, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class StepCounts:
    model: int = 0
    tool: int = 0

    @property
    def total(self) -> int:
        return self.model + self.tool


def format_summary(replayed: StepCounts, executed: StepCounts) -> str:
    """The summary line for these counts."""
    return SUMMARY_TEMPLATE.format(
        replayed=replayed.total,
        replayed_model=replayed.model,
        replayed_tool=replayed.tool,
        executed=executed.total,
        executed_model=executed.model,
        executed_tool=executed.tool,
    )


def empty_summary() -> str:
    """The summary of an attempt that failed before its durable run could start."""
    return format_summary(StepCounts(), StepCounts())


def _no_secrets(value: Any) -> bool:
    return False


@dataclass
class DurableRun:
    """The state of one durable attempt. Create it with :meth:`open`."""

    store: StepStore
    attempt: int
    log: TaskLogger
    contains_secret: Callable[[Any], bool] = _no_secrets
    """Whether a payload holds a value registered as secret (Airflow's secrets masker, in a task)."""
    storage_errors: StorageErrors = "warn"
    entries: dict[str, StepEntry] = field(default_factory=dict, repr=False)
    replayed: StepCounts = field(default_factory=StepCounts)
    executed: StepCounts = field(default_factory=StepCounts)
    not_persisted: int = 0
    retry_storage_after: float = 60.0
    """Once writes keep failing (or the start probe failed), skip them for this many seconds, then try again."""
    saved_input_tokens: int = 0
    saved_output_tokens: int = 0
    # Per-attempt bookkeeping, private to the caching wrappers.
    _digests: MessageDigests = field(default_factory=MessageDigests, repr=False)
    _lineage: str = field(default="start", repr=False)
    _model_steps: int = field(default=0, repr=False)
    _occurrences: Counter[str] = field(default_factory=Counter, repr=False)
    _recorded_at_step: dict[int, StepEntry] = field(default_factory=dict, repr=False)
    _diverged: bool = field(default=False, repr=False)
    _failed_closed: bool = field(default=False, repr=False)
    """A request could not be fingerprinted: nothing after it can ever match, so nothing is looked up or stored."""
    _last_model_entries: list[str] = field(default_factory=list, repr=False)
    _failed_request: _FailedRequest | None = field(default=None, repr=False)
    _pending_tool_replays: int = field(default=0, repr=False)
    _replayed_tool_returns: int = field(default=0, repr=False)
    """Replayed successful function-tool calls: what pydantic-ai counts in ``usage.tool_calls``."""
    _failed_writes_in_a_row: int = field(default=0, repr=False)
    _skip_writes_until: float = field(default=0.0, repr=False)
    _storage_error: str = field(default="", repr=False)

    @classmethod
    def open(
        cls,
        store: StepStore,
        *,
        attempt: int,
        log: TaskLogger,
        contains_secret: Callable[[Any], bool] = _no_secrets,
        storage_errors: StorageErrors = "warn",
        reachable: bool = True,
    ) -> DurableRun:
        """Load the task instance's cache and start an attempt.

        ``reachable=False`` (the start probe failed, ``durable_storage_errors = warn``): nothing is loaded,
        and writes are skipped until the store has had time to come back.
        """
        run = cls(store=store, attempt=attempt, log=log, contains_secret=contains_secret, storage_errors=storage_errors)
        if not reachable:
            run._storage_unreachable("the cache could not be reached when the attempt started")
            log.error("Durable: this attempt runs every step live; it tries to store steps again as it goes")
            return run
        try:
            loaded = store.load()
        except Exception as error:
            if storage_errors == "fail":
                raise DurableStorageError(
                    f"could not read the durable cache at {store.location}: {describe_error(error)}. Fix the storage, "
                    "or set [pydantic_ai] durable_storage_errors = warn to run on without it."
                ) from error
            log.error(
                "Durable: could not read the cache at %s (%s); this attempt runs every step live",
                store.location,
                describe_error(error),
            )
            return run
        run.entries = loaded.entries
        for entry in loaded.entries.values():
            if entry.kind != "model":
                continue
            known = run._recorded_at_step.get(entry.step)
            if known is None or entry.attempt > known.attempt:
                run._recorded_at_step[entry.step] = entry
        log.info(
            "Durable: found %d steps recorded by earlier attempts (%d bytes read)",
            len(loaded.entries),
            loaded.bytes_read,
        )
        return run

    # --- model steps ---------------------------------------------------------------------------

    def model_step(
        self,
        model: Model,
        messages: Sequence[ModelMessage],
        settings: Any,
        parameters: Any,
    ) -> ModelStep:
        """Fingerprint a model request and look it up."""
        self._model_steps += 1
        number = self._model_steps
        label = f"{model.system}:{model.model_name}"
        # Only the answer to *this* request can be the one that makes the run fail (see forget_last_model_step).
        self._last_model_entries = []
        self._pending_tool_replays = 0
        failed, self._failed_request = self._failed_request, None
        if self._failed_closed:
            return ModelStep(run=self, number=number, label=label, key=None)
        try:
            prepared_settings, prepared_parameters = model.prepare_request(settings, parameters)
            fingerprint = fingerprint_request(
                model_identity=label,
                messages=messages,
                settings=prepared_settings,
                parameters=prepared_parameters,
                memo=self._digests,
            )
        except FingerprintError as error:
            self.log.warning(
                "Durable: model step %d (%s) cannot be fingerprinted (%s); it runs live, is not "
                "recorded, and every later step runs live too",
                number,
                label,
                error,
            )
            self._failed_closed = True
            self._diverged = True
            return ModelStep(run=self, number=number, label=label, key=None)
        lineage, aliases = self._lineage, []
        conversation = fingerprint.conversation
        if failed is not None and failed.conversation == conversation:
            # The same conversation asked again right after a request that raised: another try of the same
            # step (a fallback model, a retrying capability). It takes that step's place in the chain, and
            # its answer is also stored under the failed requests' keys, so that a retry replays it whichever
            # model is asked first; the chain continues from the first key, whichever model answered.
            self._model_steps -= 1
            number, lineage, aliases = failed.number, failed.lineage, failed.keys
        base = fingerprint.digest
        occurrence = self._occurrences[base]
        self._occurrences[base] += 1
        key = digest("model-step/v1", base, str(occurrence), lineage)
        self._lineage = aliases[0] if aliases else key
        step = ModelStep(
            run=self,
            number=number,
            label=label,
            key=key,
            components=fingerprint.components,
            conversation=conversation,
            lineage=lineage,
            aliases=aliases,
        )
        entry = self.entries.get(step.entry_name)
        if entry is not None:
            try:
                step.replayed = decode_response(entry.payload["response"])
            except Exception as error:
                self.log.warning(
                    "Durable: cache entry %s%s cannot be rebuilt (%s); model step %d runs live",
                    self.store.location,
                    entry.name,
                    error,
                    number,
                )
            else:
                step.replayed_usage = entry.usage
                self._pending_tool_replays = self._cached_tool_calls(messages, step.replayed)
                return step
        self._pending_tool_replays = 0
        if entry is None:
            # An entry that exists but cannot be rebuilt was reported above; the request did not change.
            self._explain_miss(step)
        return step

    def _cached_tool_calls(self, messages: Sequence[ModelMessage], response: ModelResponse) -> int:
        """How many of a replayed response's tool calls are cached too (they will not count as live calls)."""
        calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
        if not calls:
            return 0
        conversation = self._digests.conversation([*messages, response])
        occurrences = Counter(self._occurrences)
        cached = 0
        for call in calls:
            try:
                base = fingerprint_tool_call(
                    tool_name=call.tool_name,
                    raw_arguments=call.args,
                    tool_call_id=call.tool_call_id,
                    conversation=conversation,
                    lineage=self._lineage,
                )
            except FingerprintError:
                continue
            key = digest("tool-step/v1", base, str(occurrences[base]))
            occurrences[base] += 1
            cached += f"tool-{key}.json" in self.entries
        return cached

    def _explain_miss(self, step: ModelStep) -> None:
        if self._diverged:
            return
        # Everything in the cache was loaded before this attempt began: it is all from earlier attempts.
        recorded = self._recorded_at_step.get(step.number)
        if recorded is None:
            return
        self._diverged = True
        changes = changed_components(recorded.components, step.components) or [
            "an earlier step (same request, different history of replays)"
        ]
        self.log.warning(
            "Durable: model step %d differs from what attempt %d recorded; changed: %s. "
            "It runs live, and so does every step after it.",
            step.number,
            recorded.attempt,
            ", ".join(changes),
        )

    # --- tool steps ----------------------------------------------------------------------------

    def tool_step(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
    ) -> ToolStep:
        """Fingerprint a tool call and look it up."""
        raw_arguments = _raw_arguments(messages, tool_call_id, tool_args)
        return self._call_step("tool", tool_name, raw_arguments, tool_call_id, messages)

    def output_step(
        self,
        function_name: str,
        raw_arguments: Any,
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
    ) -> ToolStep:
        """Fingerprint a call of an output function (what the model's final answer is handed to) and look it up."""
        return self._call_step("output function", function_name, raw_arguments, tool_call_id, messages)

    def _call_step(
        self,
        kind: str,
        name: str,
        raw_arguments: Any,
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
    ) -> ToolStep:
        label = f"{kind} {name} (call {tool_call_id})" if tool_call_id else f"{kind} {name}"
        is_tool = kind == "tool"
        if self._failed_closed:
            return ToolStep(run=self, label=label, tool_name=name, key=None, is_tool=is_tool, call_id=tool_call_id)
        try:
            base = fingerprint_tool_call(
                tool_name=name if is_tool else f"{kind}:{name}",
                raw_arguments=raw_arguments,
                tool_call_id=tool_call_id,
                conversation=self._digests.conversation(messages),
                lineage=self._lineage,
            )
        except FingerprintError as error:
            self.log.warning("Durable: %s cannot be fingerprinted (%s); it runs live and is not recorded", label, error)
            return ToolStep(run=self, label=label, tool_name=name, key=None, is_tool=is_tool, call_id=tool_call_id)
        occurrence = self._occurrences[base]
        self._occurrences[base] += 1
        key = digest("tool-step/v1", base, str(occurrence))
        step = ToolStep(run=self, label=label, tool_name=name, key=key, is_tool=is_tool, call_id=tool_call_id)
        entry = self.entries.get(step.entry_name)
        if entry is not None:
            outcome = entry.payload.get("outcome")
            try:
                if outcome == "return":
                    step.replayed = (decode_value(entry.payload["value"]),)
                elif outcome in _RAISED_OUTCOMES:
                    step.replayed_error = _RAISED_OUTCOMES[outcome](str(entry.payload["message"]))
                elif outcome == "ToolRetryError":
                    step.replayed_error = ToolRetryError(_RETRY_PART.validate_python(entry.payload["part"]))
                else:
                    raise UnsupportedValue(f"unknown outcome {outcome!r}")
            except Exception as error:  # whatever is wrong with the stored outcome, run the call live
                self.log.warning(
                    "Durable: cache entry %s%s cannot be rebuilt (%s); %s runs live",
                    self.store.location,
                    entry.name,
                    error,
                    label,
                )
                step.replayed, step.replayed_error = None, None
        return step

    # --- decisions on calls that need approval ---------------------------------------------------

    def decision_step(self, call: ToolCallPart, messages: Sequence[ModelMessage]) -> DecisionStep:
        """The decision slot of a call that waits for approval, looked up in the cache.

        ``messages`` is the run's conversation; the key covers it up to the model answer that made the
        call (the tool key formula), and the chain of model steps so far.
        """
        from airflow_pydantic_ai.durable.decision import DecisionStep

        step = DecisionStep(run=self, call=call, key=None, step_number=self._model_steps)
        if self._failed_closed:
            return step
        asked_at = len(messages)
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, ModelResponse) and any(
                isinstance(part, ToolCallPart) and part.tool_call_id == call.tool_call_id for part in message.parts
            ):
                asked_at = index + 1
                break
        try:
            base = fingerprint_tool_call(
                tool_name=f"decision:{call.tool_name}",
                raw_arguments=call.args,
                tool_call_id=call.tool_call_id,
                conversation=self._digests.conversation(list(messages[:asked_at])),
                lineage=self._lineage,
            )
        except FingerprintError as error:
            self.log.warning(
                "Durable: the call %s (%s) cannot be fingerprinted (%s); its decision cannot be recorded",
                call.tool_name,
                call.tool_call_id,
                error,
            )
            return step
        occurrence = self._occurrences[base]
        self._occurrences[base] += 1
        step.key = digest("decision-step/v1", base, str(occurrence))
        step.load()
        return step

    def record_decision(self, entry: StepEntry, what: str) -> None:
        """Store a decision and use it in this attempt (one that could not be stored is asked again on a retry)."""
        self._persist(entry, what)
        self.entries[entry.name] = entry

    # --- recording -----------------------------------------------------------------------------

    def _persist(self, entry: StepEntry, what: str) -> None:
        if self.contains_secret(entry.payload):
            self.not_persisted += 1
            self.log.warning(
                "Durable: %s contains a value registered as secret; it is not cached and will run again on a retry",
                what,
            )
            return
        if time.monotonic() < self._skip_writes_until:
            # An unreachable store would make every step wait for its timeout: skip, and say so.
            self.not_persisted += 1
            self.log.error(
                "Durable: did not store %s: the cache at %s is unreachable (%s); it runs again on a retry",
                what,
                self.store.location,
                self._storage_error,
            )
            return
        try:
            data = self.store.encode(entry)
        except (ValueError, TypeError, RecursionError) as error:  # the value, not the storage, is at fault
            self.not_persisted += 1
            self.log.warning(
                "Durable: %s is not cached: it cannot be written as JSON (%s)", what, describe_error(error)
            )
            return
        try:
            self.store.write(entry.name, data)
        except Exception as error:
            self.not_persisted += 1
            self.log.error(
                "Durable: could not store %s at %s%s: %s", what, self.store.location, entry.name, describe_error(error)
            )
            if self.storage_errors == "fail":
                raise DurableStorageError(
                    f"could not store {what} in the durable cache at {self.store.location}: {describe_error(error)}. "
                    "Fix the storage, or set [pydantic_ai] durable_storage_errors = warn to run on without it."
                ) from error
            self._failed_writes_in_a_row += 1
            if self._failed_writes_in_a_row >= 2:
                failed = self._failed_writes_in_a_row
                self._storage_unreachable(f"{failed} writes failed in a row: {describe_error(error)}")
        else:
            self._failed_writes_in_a_row = 0

    def _storage_unreachable(self, reason: str) -> None:
        self._storage_error = reason
        self._skip_writes_until = time.monotonic() + self.retry_storage_after
        self.log.error(
            "Durable: the cache at %s is unreachable (%s); steps are not stored for the next %.0f s",
            self.store.location,
            reason,
            self.retry_storage_after,
        )

    def forget_last_model_step(self) -> None:
        """Drop the last model answer of this attempt (it made the run fail) so a retry asks again."""
        if not self._last_model_entries:
            return
        for name in self._last_model_entries:
            self.entries.pop(name, None)
            try:
                self.store.remove(name)
            except Exception as error:
                self.log.error("Durable: could not delete %s%s: %s", self.store.location, name, describe_error(error))
                return
        else:
            self.log.info(
                "Durable: the last model answer made the run fail; it was removed from the cache so a retry asks again"
            )

    # --- reporting -----------------------------------------------------------------------------

    def summary(self) -> str:
        return format_summary(self.replayed, self.executed)

    def log_summary(self) -> None:
        """The summary line at INFO, then what the replay saved and what was not persisted."""
        self.log.info(self.summary())
        if self.replayed.total:
            self.log.info(
                "Durable: the replay saved %d model requests (%d input tokens, %d output tokens) and %d tool calls",
                self.replayed.model,
                self.saved_input_tokens,
                self.saved_output_tokens,
                self.replayed.tool,
            )
        if self.not_persisted:
            self.log.warning(
                "Durable: %d steps of this attempt were not persisted and will run again on a retry",
                self.not_persisted,
            )

    def finish(self) -> None:
        """The task succeeded and its result is pushed: delete the cache (a failure here never fails the task)."""
        try:
            self.store.clear()
        except Exception as error:
            self.log.error(
                "Durable: task succeeded but its cache at %s could not be deleted (%s); delete it by hand, "
                "or let a bucket lifecycle rule expire it",
                self.store.location,
                describe_error(error),
            )
            return
        self.log.info("Durable: task succeeded; deleted the cache at %s", self.store.location)

    def usage_limits(self, limits: UsageLimits | None) -> UsageLimits | None:
        """``limits`` adjusted so that replayed steps do not count against them."""
        if limits is None:
            return None
        adjusted = ReplayAwareUsageLimits(
            **{name: getattr(limits, name) for name in limits.__dataclass_fields__ if not name.startswith("_")}
        )
        adjusted.run = self
        return adjusted


@dataclass(frozen=True)
class _FailedRequest:
    conversation: str
    number: int
    lineage: str
    keys: list[str]


@dataclass
class ModelStep:
    """A model request of a durable run, replayed or live."""

    run: DurableRun
    number: int
    label: str
    key: str | None
    components: dict[str, Any] = field(default_factory=dict)
    conversation: str = ""
    lineage: str = ""
    aliases: list[str] = field(default_factory=list)
    """Keys of earlier tries of this step in this attempt that raised (a fallback chain)."""
    replayed: ModelResponse | None = None
    replayed_usage: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def entry_name(self) -> str:
        return f"model-{self.key}.json"

    def use_replay(self) -> ModelResponse | None:
        """The cached response, counted as replayed, or None if the step must run live."""
        if self.replayed is None:
            return None
        run = self.run
        run.replayed.model += 1
        run.saved_input_tokens += int(self.replayed_usage.get("input_tokens") or 0)
        run.saved_output_tokens += int(self.replayed_usage.get("output_tokens") or 0)
        run._last_model_entries = [self.entry_name]
        run.log.info("Durable: model step %d (%s) replayed from the cache", self.number, self.label)
        return self.replayed

    def record_failure(self, error: BaseException) -> None:
        """The request was sent but raised: counted as executed, nothing to cache."""
        self.run.executed.model += 1
        if self.key is not None:
            # If the same conversation is asked again next (a fallback model), that is this step again.
            self.run._failed_request = _FailedRequest(
                self.conversation, self.number, self.lineage, [*self.aliases, self.key]
            )
        self.run.log.info(
            "Durable: model step %d (%s) failed after %.2f s (%s)",
            self.number,
            self.label,
            time.monotonic() - self.started,
            type(error).__name__,
        )

    def record(self, response: ModelResponse, *, complete: bool = True) -> None:
        run = self.run
        run.executed.model += 1
        run.log.info(
            "Durable: model step %d (%s) ran live in %.2f s",
            self.number,
            self.label,
            time.monotonic() - self.started,
        )
        if self.key is None:
            return
        if not complete:
            run.not_persisted += 1
            run.log.warning(
                "Durable: model step %d (%s) was not read to its end (%s); it is not cached",
                self.number,
                self.label,
                response.state,
            )
            return
        usage = {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens}
        entry = StepEntry(
            kind="model",
            key=self.key,
            step=self.number,
            attempt=run.attempt,
            label=self.label,
            payload={"response": encode_response(response)},
            components=self.components,
            usage=usage,
            recorded_at=time.time(),
        )
        what = f"model step {self.number} ({self.label})"
        run._last_model_entries = [entry.name]
        run._persist(entry, what)
        for alias in self.aliases:
            copy = replace(entry, key=alias)
            run._last_model_entries.append(copy.name)
            run._persist(copy, f"{what} (also as the try that failed before it)")


@dataclass
class ToolStep:
    """A tool call (or output function call) of a durable run, replayed or live; counted as a tool step."""

    run: DurableRun
    label: str
    tool_name: str
    key: str | None
    is_tool: bool = True
    """A function tool (False: an output function, which pydantic-ai does not count as a tool call)."""
    call_id: str | None = None
    replayed: tuple[Any] | None = None
    replayed_error: Exception | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def entry_name(self) -> str:
        return f"tool-{self.key}.json"

    @property
    def is_replay(self) -> bool:
        return self.replayed is not None or self.replayed_error is not None

    def replay(self) -> Any:
        """Return (or raise) what the tool did when it was recorded."""
        self.run.replayed.tool += 1
        self.run.log.info("Durable: %s replayed from the cache", self.label)
        if self.replayed_error is not None:
            raise self.replayed_error
        assert self.replayed is not None
        if self.is_tool:
            self.run._replayed_tool_returns += 1
        return self.replayed[0]

    def _finish(self) -> int:
        self.run.executed.tool += 1
        self.run.log.info("Durable: %s ran live in %.2f s", self.label, time.monotonic() - self.started)
        return self.run._model_steps

    def record_return(self, value: Any) -> None:
        step_number = self._finish()
        if self.key is None:
            return
        try:
            encoded = encode_value(value)
        except UnsupportedValue as error:
            self.run.not_persisted += 1
            self.run.log.warning("Durable: the result of %s is not cached: %s", self.label, error)
            return
        self._write(step_number, {"outcome": "return", "value": encoded})

    def record_failure(self, error: BaseException) -> None:
        """The tool ran and raised (or was cancelled): counted as executed; a retry runs it again."""
        self.run.executed.tool += 1
        # The run fails (if it does) because of this call, not because of the model answer that asked
        # for it: that answer must stay cached, or its other tool calls would happen again.
        self.run._last_model_entries = []
        self.run.log.info(
            "Durable: %s failed after %.2f s (%s); it is not cached and runs again on a retry",
            self.label,
            time.monotonic() - self.started,
            type(error).__name__,
        )

    def record_deferral(self) -> None:
        """The tool asked for approval (``ApprovalRequired``) before doing anything: nothing ran, nothing to keep."""
        self.run.log.info("Durable: %s asks for approval", self.label)

    def record_raise(self, error: ModelRetry | ToolFailed) -> None:
        step_number = self._finish()
        if self.key is None:
            return
        self._write(step_number, {"outcome": type(error).__name__, "message": error.message})

    def record_retry_signal(self, error: ToolRetryError) -> None:
        """A retry already in pydantic-ai's own form: stored as the part it sends the model, replayed as is."""
        step_number = self._finish()
        if self.key is None:
            return
        part = _RETRY_PART.dump_python(error.tool_retry, mode="json")
        self._write(step_number, {"outcome": "ToolRetryError", "part": part})

    def _write(self, step_number: int, payload: dict[str, Any]) -> None:
        assert self.key is not None
        entry = StepEntry(
            kind="tool",
            key=self.key,
            step=step_number,
            attempt=self.run.attempt,
            label=self.tool_name,
            payload=payload,
            call_id=self.call_id,
            role="tool" if self.is_tool else "output",
            recorded_at=time.time(),
        )
        self.run._persist(entry, self.label)


def describe_error(error: BaseException) -> str:
    """An error for a log line: a timeout's message is often empty."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


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


@dataclass(repr=False, kw_only=True)
class ReplayAwareUsageLimits(UsageLimits):
    """Usage limits that count only live steps: replayed requests and tool calls are free."""

    run: DurableRun | None = None

    def _live(self, usage: RunUsage) -> RunUsage:
        if self.run is None:
            return usage
        return replace(
            usage,
            requests=max(0, usage.requests - self.run.replayed.model),
            tool_calls=max(0, usage.tool_calls - self.run._replayed_tool_returns),
        )

    def check_before_request(self, usage: RunUsage) -> None:
        super().check_before_request(self._live(usage))

    def check_before_tool_call(self, projected_usage: RunUsage) -> None:
        # Checked before a batch of calls runs: the batch's calls that are cached will not be live.
        live = self._live(projected_usage)
        if self.run is not None:
            live = replace(live, tool_calls=max(0, live.tool_calls - self.run._pending_tool_replays))
        super().check_before_tool_call(live)
