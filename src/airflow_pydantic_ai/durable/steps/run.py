"""One attempt of a durable agent run: the loaded cache, the lookup of each step, and the attempt's ends.

A :class:`DurableRun` is opened at the start of a task attempt with the task instance's
:class:`~airflow_pydantic_ai.durable.storage.store.StepStore`. The caching model and toolset ask it for each
step (:meth:`DurableRun.model_step`, :meth:`DurableRun.tool_step`, :meth:`DurableRun.output_step`);
the step replays its entry or runs live and records itself. The state each concern owns lives in a
room of its own: the key chain (``keys.py``), the writer and the storage-errors policy
(``writer.py``), the counts and the summary line (``stats.py``), the replay ledger for usage limits
(``usage.py``), the answer a failing run may fail on (``last_answer.py``) and where the attempt left
the recorded path (``divergence.py``).

Data flows one way: ``open`` loads the entries once; steps read them and write new ones through the
writer; ``finish`` deletes the cache after Airflow recorded the success; ``log_summary`` ends every
attempt, also one that failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage, UsageLimits

from airflow_pydantic_ai.durable.errors import describe_error
from airflow_pydantic_ai.durable.keys.chain import Fingerprinter, KeyChain, ModelKey
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.keys.fingerprint import FingerprintError
from airflow_pydantic_ai.durable.steps.budget import RetryBudget, Spent
from airflow_pydantic_ai.durable.steps.cleanup import (
    delete_after_success,
    discard_earlier_run,
    pack_for_next_try,
    tidy_failed_try,
)
from airflow_pydantic_ai.durable.steps.codec import UnsupportedValue
from airflow_pydantic_ai.durable.steps.decision import Decision, DecisionStep
from airflow_pydantic_ai.durable.steps.last_answer import LastAnswer
from airflow_pydantic_ai.durable.steps.mode import ReplayPolicy
from airflow_pydantic_ai.durable.steps.model_step import ModelStep
from airflow_pydantic_ai.durable.steps.nesting import TOP, AttemptFamily, Place, RunScope, step_scope
from airflow_pydantic_ai.durable.steps.report import AttemptOutcome, DurableReport
from airflow_pydantic_ai.durable.steps.result import RecordedOutput, find_recorded_output, output_entry
from airflow_pydantic_ai.durable.steps.stats import AttemptStats, StepCounts, TaskLogger
from airflow_pydantic_ai.durable.steps.tally import StepKind
from airflow_pydantic_ai.durable.steps.telemetry import StepTelemetry
from airflow_pydantic_ai.durable.steps.tool_step import ToolStep
from airflow_pydantic_ai.durable.steps.usage import ReplayLedger, replay_aware
from airflow_pydantic_ai.durable.steps.writer import StepWriter, StorageErrors, TryOutlook, no_secrets
from airflow_pydantic_ai.durable.storage.attempts import AttemptRecord, record_attempt
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.storage.numbering import StepNumbers
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.durable.wording import plural

__all__ = ["DurableRun"]


@dataclass
class DurableRun:
    """The state of one durable attempt. Create it with :meth:`open`."""

    writer: StepWriter
    attempt: int
    entries: dict[str, StepEntry] = field(default_factory=dict, repr=False)
    keys: KeyChain = field(default_factory=KeyChain, repr=False)
    stats: AttemptStats = field(default_factory=AttemptStats)
    ledger: ReplayLedger = field(default_factory=ReplayLedger, repr=False)
    last_answer: LastAnswer = field(default_factory=LastAnswer, repr=False)
    divergence: Divergence = field(default_factory=Divergence, repr=False)
    run_task: asyncio.Task[Any] | None = field(default=None, repr=False)
    """The asyncio task of the agent run (set when it starts): a cancelled run stops waiting for tool threads."""
    finished: bool = field(default=False, repr=False)
    outcome: AttemptOutcome = field(default="running", repr=False)
    """How the attempt ended, for its report (set by :meth:`ending`)."""
    budget: RetryBudget | None = field(default=None, repr=False)
    """The usage limits counted across tries, when the task asked for them (``budget.py``)."""
    report_readers: list[Callable[[DurableReport], None]] = field(default_factory=list, repr=False)
    """Given the report once the attempt ended (:meth:`when_ended`)."""
    scope: RunScope | None = None
    """Where this agent run sits in the attempt; None for the attempt's first run at the top level."""
    family: AttemptFamily = field(default_factory=lambda: AttemptFamily(), repr=False)
    """What every agent run of the attempt shares (the runs bound so far, one-time warnings)."""
    policy: ReplayPolicy = field(default_factory=ReplayPolicy, repr=False)
    """What a step with no recorded entry does (``durable_mode``, see ``mode.py``)."""

    @classmethod
    def open(
        cls,
        store: StepStore,
        *,
        attempt: int,
        log: TaskLogger,
        contains_secret: Callable[[Any], bool] = no_secrets,
        storage_errors: StorageErrors = "warn",
        probe: bool = False,
        takes_recorded_output: bool = True,
        belongs: Callable[[Collection[int]], bool] | None = None,
        retry_coming: bool = True,
        delete_hint: str = "",
        fingerprinter: Fingerprinter | None = None,
        span_attributes: Mapping[str, str | int] | None = None,
        budget: UsageLimits | None = None,
    ) -> DurableRun:
        """Load the task instance's cache and start an attempt.

        ``probe``: first write and delete a probe object. A store that is unreachable (and
        ``storage_errors = "warn"``) is then not read, and writes are skipped until it may be back; one
        that refuses because it is misconfigured raises ``DurableConfigError``.

        ``belongs`` decides from the try numbers that wrote the loaded entries, before anything else uses
        them, whether they were written by this run at all (and not by an earlier run that had the same
        ids and was deleted): when it says no, they are not replayed, and the cache is deleted with a
        WARNING saying what it held.

        ``delete_hint``: how a person deletes this cache (a command), for the log line of the last try.

        ``span_attributes``: stamped on the spans pydantic-ai's instrumentation opens for this attempt's steps
        (the Airflow side gives the task instance's identity).

        ``budget``: usage limits counted across the tries of the task instance (what each try spent live is
        kept beside the steps); see ``budget.py``.
        """
        outlook = TryOutlook(retry_coming, takes_recorded_output, delete_hint)
        writer = StepWriter(store, log, contains_secret, storage_errors, outlook)
        run = cls(writer=writer, attempt=attempt, keys=KeyChain(fingerprinter or Fingerprinter()))
        run.stats.telemetry = StepTelemetry(dict(span_attributes or {}))  # issue 22
        if budget is not None:  # issue 22: read before the first step, whatever the load below finds
            run.budget = RetryBudget.load(store, attempt=attempt, limits=budget, log=log)
            run.stats.on_live_step = run.budget.spent_live
        if probe and not writer.check_at_start():
            return run
        try:
            loaded = store.load()
        except Exception as error:
            writer.load_failed(error)
            return run
        if loaded.entries and belongs is not None and not belongs({entry.attempt for entry in loaded.entries.values()}):
            discard_earlier_run(store, loaded.entries, attempt, log)
            if run.budget is not None:  # what an earlier DAG run spent is not this one's
                run.budget.earlier = run.budget.resumed = Spent()
            return run
        run.entries = loaded.entries
        writer.numbers = StepNumbers(loaded.entries.values())
        if any(entry.recorded_at is None for entry in loaded.entries.values()):
            # Release 0.1.0 wrote this cache: key the attempt as it did, so that its steps replay.
            run.keys.use_release_0_1_0_keys()
        run.divergence = Divergence.of(loaded.entries)
        run.stats.bytes_read, run.stats.entries_skipped = loaded.bytes_read, len(loaded.skipped)
        log.info(
            "Durable: found %s recorded by earlier attempts (%d bytes read)",
            plural(sum(entry.kind != "result" for entry in loaded.entries.values()), "step"),
            loaded.bytes_read,
        )
        return run

    # --- what the other rooms hold, under the names callers know ----------------------------------

    @property
    def store(self) -> StepStore:
        return self.writer.store

    @property
    def log(self) -> TaskLogger:
        return self.writer.log

    @property
    def outlook(self) -> TryOutlook:
        """What Airflow says about this try's place (whether a retry follows...), as the writer has it."""
        return self.writer.outlook

    @property
    def replayed(self) -> StepCounts:
        return self.stats.replayed

    @property
    def executed(self) -> StepCounts:
        return self.stats.executed

    @property
    def not_persisted(self) -> int:
        return self.writer.not_persisted

    @property
    def saved_input_tokens(self) -> int:
        return self.stats.saved_input_tokens

    @property
    def retry_storage_after(self) -> float:
        """Once writes keep failing (or the start probe failed), skip them for this many seconds, then try again."""
        return self.writer.backoff.retry_after

    @retry_storage_after.setter
    def retry_storage_after(self, seconds: float) -> None:
        self.writer.backoff.retry_after = seconds

    @property
    def who(self) -> str:
        """`` of agent 'name'`` in step log lines once the attempt has run more than one agent, else empty."""
        if self.family.agent_runs <= 1:
            return ""
        agent = self.scope.agent if self.scope is not None else self.family.first_agent
        return (
            f" of agent {agent!r}" if agent else " of the first agent" if self.scope is None else " of a nested agent"
        )

    @property
    def entry_scope(self) -> dict[str, Any] | None:
        """What each entry of this run stores about its place (None at the top level: entries as before)."""
        return None if self.scope is None else self.scope.to_payload()

    def bind(self, place: Place, run_id: str | None, agent: str | None) -> DurableRun | None:
        """The run of the attempt an agent run starting at ``place`` records into; None when one is bound already."""
        family = self.family
        if run_id is not None and run_id in family.bound:
            return None  # a second durable capability on the same run: the first one records it
        top = place.parent is None and place.top_level
        index = 0 if top and place.root_claims else place.next_index()
        if top and index == 0:
            bound = self
            if family.agent_runs == 0:
                family.first_agent = agent
                family.agent_runs = 1
        else:
            family.agent_runs += 1
            bound = self.nested(
                RunScope(parent=place.parent or TOP, index=index, at=place.at, agent=agent, depth=place.depth),
                keyed=place.parent is not None or top,
            )
        if run_id is not None:
            family.bound[run_id] = bound
        return bound

    def nested(self, scope: RunScope, *, keyed: bool = True) -> DurableRun:
        """A run of the same attempt with its own key chain, started from ``scope`` (shares entries, writer, counts)."""
        keys = KeyChain(self.keys.fingerprinter, lineage=scope.chain_start())
        keys.failed_closed = not keyed
        return DurableRun(
            writer=self.writer,
            attempt=self.attempt,
            entries=self.entries,
            keys=keys,
            stats=self.stats,
            divergence=self.divergence.for_scope(self.entries, scope.id),
            scope=scope,
            family=self.family,
            policy=self.policy,  # durable_mode: one policy for every agent run of the attempt
            budget=self.budget,  # issue 22: a budget across tries covers nested runs too
        )

    def running(self, key: str | None) -> AbstractContextManager[None]:
        """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
        return step_scope(self, key, self.keys.model_steps)

    def _agent_for_replay(self) -> str | None:
        """Which nested agent a replay miss names (None: the attempt's first run, named by the policy)."""
        if self.scope is None:
            return None
        return f"agent {self.scope.agent!r}" if self.scope.agent else "a nested agent"

    def unrecorded_run(self, run_id: str, agent: Callable[[], str]) -> None:
        """A model response was counted for agent run ``run_id`` inside this attempt: when no run of the attempt
        records it (its agent has no DurableCapability), one WARNING per attempt names the ``agent()``."""
        if run_id in self.family.bound or not self.family.warn_once("unrecorded requests"):
            return
        self.log.warning(
            "Durable: %s ran inside this durable attempt without DurableCapability: its model requests and tool "
            "calls are not recorded, so they run again on a retry. Make it durable: Agent(..., "
            "capabilities=[DurableCapability()]) (from airflow_pydantic_ai.durable import DurableCapability), "
            "or pass capabilities=[DurableCapability()] to its run",
            agent(),
        )

    def unrecorded_requests(self, label: str, count: int) -> None:
        """``count`` model requests ran inside ``label``'s call without passing through a durable run: one WARNING
        (none when :meth:`unrecorded_run` named the agent already)."""
        if not self.family.warn_once("unrecorded requests"):
            return
        self.log.warning(
            "Durable: %s made %d model request(s) that are not recorded: an agent run inside it has no "
            "DurableCapability, so it runs again on a retry. Make it durable: Agent(..., "
            "capabilities=[DurableCapability()]) (from airflow_pydantic_ai.durable import DurableCapability), "
            "or pass capabilities=[DurableCapability()] to its run",
            label,
            count,
        )

    def step_number(self, entry: StepEntry) -> int:
        """The number ``entry`` has (or would have, written now) in the cache's listing: the log names steps by it,
        as the view and ``cache show`` do (``numbering.py``)."""
        return self.writer.numbers.number(entry)

    @property
    def answer_number(self) -> int:
        """The number of this agent run's model step whose answer the calls running now belong to."""
        return self.keys.model_steps

    # --- the verbs steps report through (``owner.py``): the one place that decides which rooms they touch ---

    def step_replayed(
        self,
        kind: StepKind,
        entry_name: str,
        *,
        usage: RequestUsage | None = None,
        cost: Decimal | None = None,
        counted_by_pydantic_ai: bool = False,
    ) -> None:
        """A step was answered from its entry: counted as replayed, and kept out of what usage limits count."""
        if kind == "model":
            self.stats.model_replayed(entry_name, usage)
            self.ledger.replayed_requests += 1
        elif kind != "decision":
            self.stats.tool_replayed(entry_name)
            if counted_by_pydantic_ai:
                self.ledger.replayed_tool_returns += 1
        self.stats.step_done(kind, replayed=True, usage=usage, cost=cost)  # issue 22: report, telemetry

    def step_ran(self, kind: StepKind, *, usage: RequestUsage | None = None, cost: Decimal | None = None) -> None:
        """A step ran live: counted as executed (an output function call counts as a tool step)."""
        if kind == "model":
            self.stats.executed.model += 1
        elif kind != "decision":
            self.stats.executed.tool += 1
        self.stats.step_done(kind, replayed=False, usage=usage, cost=cost)  # issue 22: report, telemetry

    def record(self, entry: StepEntry, what: str) -> bool:
        """Record ``entry`` through the writer (False: not stored; the log says why)."""
        return self.writer.persist(entry, what)

    def not_stored(self) -> None:
        """A step ran live and is not recorded: counted as not persisted."""
        self.writer.skipped()

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

    def entry_unusable(self, entry: StepEntry, error: object, consequence: str) -> None:
        """One WARNING for an entry that cannot be rebuilt: it is never replayed, ``consequence`` happens instead."""
        self.log.warning(
            "Durable: cache entry %s%s cannot be rebuilt (%s); %s", self.store.location, entry.name, error, consequence
        )

    # --- lookup and step creation ------------------------------------------------------------------

    def model_step(self, model: Model, messages: Sequence[ModelMessage], settings: Any, parameters: Any) -> ModelStep:
        """Fingerprint a model request and look it up."""
        # Only the answer to *this* request, and the retries it draws, can make the run fail (see forget_what_failed).
        self.last_answer = LastAnswer(number=self.keys.model_steps + 1)
        self.ledger.pending_tool_replays = 0
        place = self.keys.next_model_key(model, messages, settings, parameters)
        # durable_mode: keep the texts for a diff; in replay mode, fail here, before any live call.
        self.policy.note_request(place, messages)
        self.policy.check_model_step(
            place, self.entries, messages, self.divergence.recorded_at_step, agent=self._agent_for_replay()
        )
        step = ModelStep(run=self, place=place)
        if messages and _compacted(messages[0]) and self.family.warn_once("compaction"):
            self.log.warning(
                "Durable: the conversation before %s was compacted by a capability; pydantic-ai sends that "
                "compaction request outside the run's model wrapper, so it is not recorded and runs again on a "
                "retry (the steps after it replay when it summarizes the conversation the same way)",
                step.shown(),
            )
        if place.failure is not None:
            self.log.warning(
                "Durable: %s cannot be fingerprinted (%s); it runs live, is not recorded, and every later step "
                "runs live too",
                step.shown(),
                place.failure,
            )
            self.divergence.diverged = True
            return step
        if place.key is None:
            return step
        entry = self.entries.get(step.entry_name)
        if entry is None:
            warning = self.divergence.explain_miss(place.number, place.components, step.shown, self.step_number)
            if warning is not None:
                self.log.warning("%s", warning)
        elif step.load(entry):
            cached = self.keys.predicted_tool_keys(messages, step.replayed)  # type: ignore[arg-type]
            self.ledger.pending_tool_replays = sum(entry_name("tool", key) in self.entries for key in cached)
        return step

    def tool_step(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
        *,
        live: bool = False,
    ) -> ToolStep:
        """Fingerprint a tool call and look it up (``live``: the tool opted out of replay; it runs, unrecorded)."""
        if live:
            label = f"tool {tool_name} (call {tool_call_id})" if tool_call_id else f"tool {tool_name}"
            return ToolStep(run=self, label=label + self.who, tool_name=tool_name, key=None, live=True)
        raw_arguments = _raw_arguments(messages, tool_call_id, tool_args)
        return self._call_step("tool", tool_name, raw_arguments, tool_call_id, messages)

    def output_step(
        self, function_name: str, raw_arguments: Any, tool_call_id: str | None, messages: Sequence[ModelMessage]
    ) -> ToolStep:
        """Fingerprint a call of an output function (what the model's final answer is handed to) and look it up."""
        return self._call_step("output function", function_name, raw_arguments, tool_call_id, messages)

    def _call_step(
        self, kind: str, name: str, raw_arguments: Any, tool_call_id: str | None, messages: Sequence[ModelMessage]
    ) -> ToolStep:
        label = f"{kind} {name} (call {tool_call_id})" if tool_call_id else f"{kind} {name}"
        label += self.who
        step = ToolStep(run=self, label=label, tool_name=name, key=None, is_tool=kind == "tool", call_id=tool_call_id)
        if self.keys.failed_closed:
            return step
        try:
            step.key = self.keys.tool_key(
                name if step.is_tool else f"{kind}:{name}", raw_arguments, tool_call_id, messages
            )
        except FingerprintError as error:
            self.log.warning("Durable: %s cannot be fingerprinted (%s); it runs live and is not recorded", label, error)
            return step
        # durable_mode: in replay mode, a call with no entry fails here; a tool named live ignores its entry.
        self.policy.check_call_step(
            label, name, step.key, self.entries, self.keys.model_steps, self.divergence.recorded_at_step
        )
        entry = self.entries.get(step.entry_name)
        if entry is not None and not self.policy.runs_live(name):
            step.load(entry)
        return step

    def decision_step(self, call: ToolCallPart, messages: Sequence[ModelMessage]) -> DecisionStep:
        """The decision slot of a call that waits for approval, looked up in the cache.

        ``messages`` is the run's conversation; the key covers it up to the model answer that made the
        call (the tool key formula), and the chain of model steps so far.
        """
        step = DecisionStep(run=self, call=call, key=None, step_number=self.keys.model_steps)
        if self.keys.failed_closed:
            return step
        try:
            step.key = self.keys.decision_key(call, messages)
        except FingerprintError as error:
            self.log.warning(
                "Durable: the call %s (%s) cannot be fingerprinted (%s); its decision cannot be recorded",
                call.tool_name,
                call.tool_call_id,
                error,
            )
            return step
        step.load()
        # durable_mode: in replay mode, a decision nobody recorded fails here (no person is asked).
        self.policy.check_decision(f"{call.tool_name} (call {call.tool_call_id})", step.recorded is not None)
        return step

    def decide(self, call: ToolCallPart, *, key: str, step_number: int, decision: Decision) -> None:
        """Record a person's decision on ``call`` (asked under ``key`` at model step ``step_number``)."""
        DecisionStep(run=self, call=call, key=key, step_number=step_number).record(decision)

    def record_decision(self, entry: StepEntry, what: str) -> None:
        """Store a decision and use it in this attempt (one that could not be stored is asked again on a retry)."""
        self.writer.persist(entry, what)
        self.entries[entry.name] = entry

    # --- the output ----------------------------------------------------------------------------------

    def recorded_output(self) -> RecordedOutput | None:
        """The output the previous try recorded before it was killed, if the cache holds it (see ``result.py``)."""
        return find_recorded_output(
            self.entries, attempt=self.attempt, outlook=self.outlook, location=self.store.location, log=self.log
        )

    def record_output(self, value: Any) -> None:
        """Store the output about to be pushed to XCom, so that a retry after a crash returns it as is.

        Not stored (with a warning) when it holds a registered secret or cannot be encoded exactly: a
        retry then replays the recorded steps to rebuild it.
        """
        what = "the task's output"
        try:
            entry = output_entry(value, attempt=self.attempt, step=self.keys.model_steps)
        except UnsupportedValue as error:
            self.writer.skipped()
            self.log.warning("Durable: %s is not cached (%s); a retry replays the steps instead", what, error)
            return
        self.writer.persist(entry, what, on_secret="it is not cached; a retry replays the steps instead")

    def usage_limits(self, limits: UsageLimits | None) -> UsageLimits | None:
        """``limits`` adjusted so that replayed steps do not count against them."""
        return replay_aware(limits, self.ledger)

    # --- the ends of an attempt --------------------------------------------------------------------

    @contextmanager
    def ending(self, *, waits: Callable[[BaseException], bool] = lambda error: False) -> Iterator[DurableRun]:
        """Around everything an attempt does after :meth:`open`: a try that ends without success packs what it
        saw (:meth:`pack_for_next_try`); a failure tidies up (not a ``waits`` one: a try that stops to wait
        for a person has not failed), and the summary is logged whatever happens."""
        try:
            yield self
            self.outcome = "succeeded"
        except BaseException as error:
            self.pack_for_next_try()
            self.outcome = "waiting" if waits(error) else "failed"
            if self.outcome == "failed":
                self.end_failed_try()
            raise
        finally:
            self.log_summary()

    def forget_what_failed(self) -> None:
        """The run ended in ``UnexpectedModelBehavior`` (retries exhausted): remove what made it fail.

        That is the last model answer of this attempt together with every retry outcome its calls drew
        (a tool's or an output function's ``ModelRetry``, a ``ToolRetryError``), recorded or replayed:
        replaying any of them would fail the retry the same way, even when the cause was transient. What
        the run got past stays: earlier answers and retries, and the answer's calls that returned. When a
        call of that answer raised an exception that is never recorded, that call ended the run, and
        nothing is removed.
        """
        names = self.last_answer.to_forget
        if not names:
            return
        for name in names:
            self.entries.pop(name, None)
            self.writer.numbers.discard(name)
            try:
                self.store.remove(name)
            except Exception as error:
                self.log.error("Durable: could not delete %s%s: %s", self.store.location, name, describe_error(error))
                return
        who = "a retry" if self.outlook.retry_coming else "a later try (after a clear)"
        self.log.info(
            "Durable: the run%s failed on %s; removed from the cache so %s asks again instead of replaying it",
            self.who,
            self.last_answer.describe(),
            who,
        )
        self.last_answer = LastAnswer(number=self.last_answer.number)  # forgotten once, however many hooks see it

    def pack_for_next_try(self) -> None:
        """This try ends without success (failed, or waits for a person): pack the entries it saw into one object."""
        pack_for_next_try(self.store, self.attempt, self.log, reachable=not self.writer.backoff.active)

    def end_failed_try(self) -> None:
        """This try failed: remove the folders it created and left empty; on the last try, say the cache is kept."""
        tidy_failed_try(self.store, self.outlook, self.log)

    def finish(self) -> None:
        """Delete the cache: steps newest first, the result entry last (a failure here never fails the task).

        Call it once Airflow has recorded the task's success (the operator does, from a success callback).
        """
        self.finished = True
        delete_after_success(self.store, self.entries, self.writer.written, self.log)

    def summary(self) -> str:
        return self.stats.summary()

    def when_ended(self, read: Callable[[DurableReport], None]) -> None:
        """Give ``read`` this attempt's report when it ends (right after the report line), whatever the outcome."""
        self.report_readers.append(read)

    def report(self) -> DurableReport:
        """This attempt's durable report (as it stands: final once :meth:`ending` is over)."""
        return DurableReport(
            try_number=self.attempt,
            outcome=self.outcome,
            tally=self.stats.tally,
            not_persisted=self.writer.not_persisted,
            changed=tuple(self.divergence.changed_components),
            cache_location=self.store.location,
            cache_deleted=self.outcome == "succeeded",
        )

    def log_summary(self) -> None:
        """The summary line at INFO, then what the replay saved and what was not persisted."""
        report = self.report()  # issue 22: the report line right after the summary, then to its readers
        self.stats.log(
            self.log,
            not_persisted=self.writer.not_persisted,
            what_next=self.outlook.what_next("will run again on a retry"),
            report_line=report.log_line(),
        )
        for read in self.report_readers:
            read(report)
        # A finished run deleted its cache, and a try that found and stored nothing has no cache to
        # describe: either way, leave nothing behind.
        if not self.finished and (self.entries or self.writer.written):
            record = AttemptRecord(self.attempt, self.summary(), tuple(self.divergence.changes))
            record_attempt(self.store, record, warn=self.log.warning)


def _compacted(message: ModelMessage) -> bool:
    """Whether the conversation starts with a compaction summary (a capability replaced the history with it)."""
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
