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

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import TypeAdapter
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolRetryError
from pydantic_ai.messages import ModelMessage, ModelResponse, RetryFeedbackPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage, UsageLimits

from airflow_pydantic_ai.durable.attempts import AttemptRecord, record_attempt
from airflow_pydantic_ai.durable.codec import (
    UnsupportedValue,
    decode_response,
    decode_value,
    encode_response,
    encode_value,
)
from airflow_pydantic_ai.durable.errors import DurableStorageError
from airflow_pydantic_ai.durable.fingerprint import (
    FingerprintError,
    MessageDigests,
    changed_components,
    digest,
    fingerprint_request,
    fingerprint_tool_call,
)
from airflow_pydantic_ai.durable.store import RESULT_ENTRY, RESULT_KEY, StepEntry, StepStore

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.decision import DecisionStep

__all__ = [
    "SUMMARY_TEMPLATE",
    "DurableRun",
    "DurableStorageError",
    "ModelStep",
    "RecordedOutput",
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


@dataclass(frozen=True)
class RecordedOutput:
    """The output an earlier try pushed to XCom before it was killed, found in the cache."""

    value: Any
    attempt: int


@dataclass
class DurableRun:
    """The state of one durable attempt. Create it with :meth:`open`."""

    store: StepStore
    attempt: int
    log: TaskLogger
    contains_secret: Callable[[Any], bool] = _no_secrets
    """Whether a payload holds a value registered as secret (Airflow's secrets masker, in a task)."""
    storage_errors: StorageErrors = "warn"
    retry_coming: bool = True
    """Whether Airflow retries the task if this try fails (False on the last try): log lines say what happens next."""
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
    _last_answer: _LastAnswer = field(default_factory=lambda: _LastAnswer(), repr=False)
    _failed_request: _FailedRequest | None = field(default=None, repr=False)
    _pending_tool_replays: int = field(default=0, repr=False)
    _replayed_tool_returns: int = field(default=0, repr=False)
    """Replayed successful function-tool calls: what pydantic-ai counts in ``usage.tool_calls``."""
    run_task: asyncio.Task[Any] | None = field(default=None, repr=False)
    """The asyncio task of the agent run (set when it starts): a cancelled run stops waiting for tool threads."""
    _failed_writes_in_a_row: int = field(default=0, repr=False)
    _skip_writes_until: float = field(default=0.0, repr=False)
    _storage_error: str = field(default="", repr=False)
    takes_recorded_output: bool = True
    """False on the first try of a DAG run or after a clear: an output recorded earlier is never returned."""
    _written: list[str] = field(default_factory=list, repr=False)
    """Names of the entries this attempt stored, oldest first (the cache is deleted newest first)."""
    _changes: list[str] = field(default_factory=list, repr=False)
    """The "changed: ..." warnings of this attempt, for its attempt record."""
    _finished: bool = field(default=False, repr=False)

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
        takes_recorded_output: bool = True,
        belongs: Callable[[Mapping[str, StepEntry]], bool] | None = None,
        retry_coming: bool = True,
    ) -> DurableRun:
        """Load the task instance's cache and start an attempt.

        ``reachable=False`` (the start probe failed, ``durable_storage_errors = warn``): nothing is loaded,
        and writes are skipped until the store has had time to come back.

        ``belongs`` decides, before anything else uses the loaded entries, whether they were written by
        this run at all (and not by an earlier run that had the same ids and was deleted): when it says
        no, they are not replayed, and the cache is deleted with a WARNING saying what it held.
        """
        run = cls(
            store=store,
            attempt=attempt,
            log=log,
            contains_secret=contains_secret,
            storage_errors=storage_errors,
            takes_recorded_output=takes_recorded_output,
            retry_coming=retry_coming,
        )
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
        if loaded.entries and belongs is not None and not belongs(loaded.entries):
            run._discard_earlier_run(loaded.entries)
            return run
        run.entries = loaded.entries
        if any(entry.recorded_at is None for entry in loaded.entries.values()):
            # Release 0.1.0 wrote this cache: key the attempt as it did, so that its steps replay.
            run._digests = MessageDigests(keep_response_timestamps=True)
        for entry in loaded.entries.values():
            if entry.kind != "model":
                continue
            known = run._recorded_at_step.get(entry.step)
            if known is None or entry.attempt > known.attempt:
                run._recorded_at_step[entry.step] = entry
        log.info(
            "Durable: found %d steps recorded by earlier attempts (%d bytes read)",
            sum(entry.kind != "result" for entry in loaded.entries.values()),
            loaded.bytes_read,
        )
        return run

    def _discard_earlier_run(self, entries: Mapping[str, StepEntry]) -> None:
        tries = sorted({entry.attempt for entry in entries.values()})
        stamps = sorted(entry.recorded_at for entry in entries.values() if entry.recorded_at is not None)
        if stamps:
            first, last = (_utc(stamp) for stamp in (stamps[0], stamps[-1]))
            written = f"written {first}" if first == last else f"written from {first} to {last}"
        else:
            written = "written by release 0.1.0, time unknown"
        self.log.warning(
            "Durable: the cache at %s was left by an earlier run with the same ids, since deleted (%d steps "
            "by tries %s, %s); this is try %d of a new run, so it is not replayed, and it is deleted",
            self.store.location,
            len(entries),
            ", ".join(map(str, tries)),
            written,
            self.attempt,
        )
        try:
            self.store.clear()
        except Exception as error:
            self.log.error(
                "Durable: could not delete %s (%s); its steps are ignored by this run",
                self.store.location,
                describe_error(error),
            )

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
        # Only the answer to *this* request, and the retries it draws, can make the run fail (see forget_what_failed).
        self._last_answer = _LastAnswer(number=number)
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
        warning = (
            f"Durable: model step {step.number} differs from what attempt {recorded.attempt} recorded; "
            f"changed: {', '.join(changes)}. It runs live, and so does every step after it."
        )
        self._changes.append(warning)
        self.log.warning("%s", warning)

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

    def _persist(self, entry: StepEntry, what: str, *, on_secret: str | None = None) -> bool:
        """Store ``entry``; False when it was not stored (the log says why)."""
        if self.contains_secret(entry.payload):
            self.not_persisted += 1
            self.log.warning(
                "Durable: %s contains a value registered as secret; %s",
                what,
                on_secret or f"it is not cached and {self.what_next('will run again on a retry')}",
            )
            return False
        if time.monotonic() < self._skip_writes_until:
            # An unreachable store would make every step wait for its timeout: skip, and say so.
            self.not_persisted += 1
            self.log.error(
                "Durable: did not store %s: the cache at %s is unreachable (%s); %s",
                what,
                self.store.location,
                self._storage_error,
                self.what_next("it runs again on a retry"),
            )
            return False
        try:
            data = self.store.encode(entry)
        except (ValueError, TypeError, RecursionError) as error:  # the value, not the storage, is at fault
            self.not_persisted += 1
            self.log.warning(
                "Durable: %s is not cached: it cannot be written as JSON (%s)", what, describe_error(error)
            )
            return False
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
            return False
        self._failed_writes_in_a_row = 0
        if entry.name not in self._written:
            self._written.append(entry.name)
        return True

    def _storage_unreachable(self, reason: str) -> None:
        self._storage_error = reason
        self._skip_writes_until = time.monotonic() + self.retry_storage_after
        self.log.error(
            "Durable: the cache at %s is unreachable (%s); steps are not stored for the next %.0f s",
            self.store.location,
            reason,
            self.retry_storage_after,
        )

    def forget_what_failed(self) -> None:
        """The run ended in ``UnexpectedModelBehavior`` (retries exhausted): remove what made it fail.

        That is the last model answer of this attempt together with every retry outcome its calls drew
        (a tool's or an output function's ``ModelRetry``, a ``ToolRetryError``), recorded or replayed:
        replaying any of them would fail the retry the same way, even when the cause was transient. What
        the run got past stays: earlier answers and retries, and the answer's calls that returned. When a
        call of that answer raised an exception that is never recorded, that call ended the run, and
        nothing is removed.
        """
        last = self._last_answer
        if last.failed_call or not (last.model_entries or last.retry_entries):
            return
        for name in [*last.model_entries, *last.retry_entries]:
            self.entries.pop(name, None)
            try:
                self.store.remove(name)
            except Exception as error:
                self.log.error("Durable: could not delete %s%s: %s", self.store.location, name, describe_error(error))
                return
        what = [f"model step {last.number}'s answer"] if last.model_entries else []
        what += [f"the {outcome} of {label}" for label, outcome in last.retry_labels]
        who = "a retry" if self.retry_coming else "a later try (after a clear)"
        self.log.info(
            "Durable: the run failed on %s; removed from the cache so %s asks again instead of replaying it",
            _join(what),
            who,
        )

    # --- reporting -----------------------------------------------------------------------------

    def what_next(self, on_retry: str = "runs again on a retry") -> str:
        """What happens to a step that was not cached: ``on_retry``, unless this is the last try."""
        return on_retry if self.retry_coming else "no retry is coming (this is the last try)"

    def end_failed_try(self) -> None:
        """This try failed: remove the folders it created and left empty; on the last try, say the cache is kept."""
        try:
            self.store.remove_empty_folders()
            kept = self.store.exists()
        except Exception as error:
            self.log.debug("Durable: could not tidy %s: %s", self.store.location, describe_error(error))
            return
        if self.retry_coming or not kept:
            return
        how = f"rm -r '{self.store.root}' on this worker" if self.store.is_local else "delete that prefix"
        self.log.info(
            "Durable: no retry is coming, so the cache at %s is kept: clearing the task later resumes from it. "
            "To start over instead, %s (or let a lifecycle rule expire it)",
            self.store.location,
            how,
        )

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
                "Durable: %d steps of this attempt were not persisted and %s",
                self.not_persisted,
                self.what_next("will run again on a retry"),
            )
        # A finished run deleted its cache, and a try that found and stored nothing has no cache to
        # describe: either way, leave nothing behind.
        if not self._finished and (self.entries or self._written):
            record = AttemptRecord(self.attempt, self.summary(), tuple(self._changes))
            record_attempt(self.store, record, warn=self.log.warning)

    # --- the output ----------------------------------------------------------------------------

    def recorded_output(self) -> RecordedOutput | None:
        """The output the previous try recorded before it was killed, if the cache holds it.

        Only the try right after the one that recorded it takes it (each try that returns it records it
        again as its own): an older result entry can only come from a zombie try, whose output a later
        run of the task instance must not take. Its steps still replay if their requests are unchanged.
        """
        entry = self.entries.get(RESULT_ENTRY)
        if entry is None:
            return None
        if not self.takes_recorded_output:
            # A clear asks for a new run: the output is what a success left behind (its deletion was cut short).
            self.log.warning(
                "Durable: ignoring the output recorded by try %d in %s%s: this is the first try since the DAG run "
                "started or the task was cleared, so the agent runs again (unchanged steps replay)",
                entry.attempt,
                self.store.location,
                entry.name,
            )
            return None
        if entry.attempt != self.attempt - 1:
            self.log.warning(
                "Durable: ignoring the output recorded by try %d in %s%s: only the try right after it may "
                "return it (this is try %d); the run replays its steps instead",
                entry.attempt,
                self.store.location,
                entry.name,
                self.attempt,
            )
            return None
        try:
            value = decode_value(entry.payload["value"])
        except Exception as error:
            self.log.warning(
                "Durable: cache entry %s%s cannot be rebuilt (%s); the run replays its steps instead",
                self.store.location,
                entry.name,
                error,
            )
            return None
        self.log.info(
            "Durable: try %d already produced this task's output, but its success was not recorded (the "
            "worker was lost); returning that output without calling the model or any tool",
            entry.attempt,
        )
        return RecordedOutput(value=value, attempt=entry.attempt)

    def record_output(self, value: Any) -> None:
        """Store the output about to be pushed to XCom, so that a retry after a crash returns it as is.

        Not stored (with a warning) when it holds a registered secret or cannot be encoded exactly: a
        retry then replays the recorded steps to rebuild it.
        """
        what = "the task's output"
        try:
            encoded = encode_value(value)
        except UnsupportedValue as error:
            self.not_persisted += 1
            self.log.warning("Durable: %s is not cached (%s); a retry replays the steps instead", what, error)
            return
        entry = StepEntry(
            kind="result",
            key=RESULT_KEY,
            step=self._model_steps,
            attempt=self.attempt,
            label="output",
            payload={"value": encoded},
            role="result",
            recorded_at=time.time(),
        )
        self._persist(entry, what, on_secret="it is not cached; a retry replays the steps instead")

    def finish(self) -> None:
        """Delete the cache: steps newest first, the result entry last (a failure here never fails the task).

        Call it once Airflow has recorded the task's success (the operator does, from a success callback).
        """
        self._finished = True
        recorded = sorted(
            (entry for entry in self.entries.values() if entry.name not in self._written),
            key=lambda entry: (entry.recorded_at or 0.0, entry.attempt, entry.step),
        )
        newest_first = [*reversed([entry.name for entry in recorded] + self._written)]
        try:
            self.store.clear(newest_first)
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


@dataclass
class _LastAnswer:
    """The model answer an attempt is on, and the retries its calls drew: what a run that exhausts its
    retries failed on (see :meth:`DurableRun.forget_what_failed`)."""

    number: int = 0
    model_entries: list[str] = field(default_factory=list)
    """The answer's entries (more than one when a fallback stored it under the failed tries' keys too)."""
    retry_entries: list[str] = field(default_factory=list)
    retry_labels: list[tuple[str, str]] = field(default_factory=list)
    failed_call: bool = False
    """A call raised an exception that is never recorded: that, not the answer, ended the run."""

    def drew_retry(self, entry_name: str, label: str, outcome: str) -> None:
        self.retry_entries.append(entry_name)
        self.retry_labels.append((label, outcome))


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


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
        run._last_answer.model_entries = [self.entry_name]
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
        run._last_answer.model_entries = [entry.name]
        run._persist(entry, what)
        for alias in self.aliases:
            copy = replace(entry, key=alias)
            run._last_answer.model_entries.append(copy.name)
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
    abandoned: bool = False
    """The run ended before this live call did: whatever it returns later is not recorded."""

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
            if not isinstance(self.replayed_error, ToolFailed):  # a retry: it may be what makes the run fail
                self.run._last_answer.drew_retry(self.entry_name, self.label, type(self.replayed_error).__name__)
            raise self.replayed_error
        assert self.replayed is not None
        if self.is_tool:
            self.run._replayed_tool_returns += 1
        return self.replayed[0]

    def abandon(self, grace: float) -> None:
        """The run was cancelled and this call's thread did not finish within ``grace`` seconds."""
        self.abandoned = True
        self.run.executed.tool += 1
        self.run.not_persisted += 1
        self.run.log.warning(
            "Durable: %s did not finish within %.0f s after the run was cancelled (after %.2f s in all); its "
            "result is not recorded and it runs again on a retry",
            self.label,
            grace,
            time.monotonic() - self.started,
        )

    def _finish(self) -> int:
        self.run.executed.tool += 1
        self.run.log.info("Durable: %s ran live in %.2f s", self.label, time.monotonic() - self.started)
        return self.run._model_steps

    def record_return(self, value: Any) -> None:
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
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
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        self.run.executed.tool += 1
        # The run fails (if it does) because of this call, not because of the model answer that asked
        # for it: that answer must stay cached, or its other tool calls would happen again.
        self.run._last_answer.failed_call = True
        self.run.log.info(
            "Durable: %s failed after %.2f s (%s); it is not cached and %s",
            self.label,
            time.monotonic() - self.started,
            type(error).__name__,
            self.run.what_next(),
        )

    def record_deferral(self) -> None:
        """The tool asked for approval (``ApprovalRequired``) before doing anything: nothing ran, nothing to keep."""
        self.run.log.info("Durable: %s asks for approval", self.label)

    def record_raise(self, error: ModelRetry | ToolFailed) -> None:
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        step_number = self._finish()
        if self.key is None:
            return
        if isinstance(error, ModelRetry):  # ToolFailed costs no retry: it can never exhaust them
            self.run._last_answer.drew_retry(self.entry_name, self.label, "ModelRetry")
        self._write(step_number, {"outcome": type(error).__name__, "message": error.message})

    def record_retry_signal(self, error: ToolRetryError) -> None:
        """A retry already in pydantic-ai's own form: stored as the part it sends the model, replayed as is."""
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        step_number = self._finish()
        if self.key is None:
            return
        part = _RETRY_PART.dump_python(error.tool_retry, mode="json")
        self.run._last_answer.drew_retry(self.entry_name, self.label, "ToolRetryError")
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


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
