"""One attempt of a durable agent run: the loaded cache, the lookup of each step, and the attempt's ends.

A :class:`DurableRun` is opened at the start of a task attempt with the task instance's
:class:`~airflow_pydantic_ai.durable.storage.store.StepStore`. The caching model and toolset ask it for each
step (:meth:`DurableRun.model_step`, :meth:`DurableRun.tool_step`, :meth:`DurableRun.output_step`);
the step replays its entry or runs live and records itself. The state each concern owns lives in a
room of its own: the key chain (``keys.py``), the writer and the storage-errors policy
(``writer.py``), the one count and the summary line (``stats.py``, ``accounting.py``, read by the usage limits in
``usage.py``), the answer a failing run may fail on (``last_answer.py``) and where the attempt left
the recorded path (``divergence.py``).

Data flows one way: ``open`` loads the entries once; steps read them and write new ones through the
writer; ``finish`` deletes the cache after Airflow recorded the success; ``log_summary`` ends every
attempt, also one that failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage, UsageLimits

from airflow_pydantic_ai.durable.attempt import ending as ends
from airflow_pydantic_ai.durable.attempt import lookup
from airflow_pydantic_ai.durable.attempt.cleanup import (
    delete_after_success,
    pack_for_next_try,
    tidy_failed_try,
)
from airflow_pydantic_ai.durable.attempt.last_answer import LastAnswer
from airflow_pydantic_ai.durable.attempt.nesting import TOP, AttemptFamily, Place, RunScope, draw_run_id, step_scope
from airflow_pydantic_ai.durable.attempt.opening import AttemptOptions, Recording, load_cache, replayed_from
from airflow_pydantic_ai.durable.attempt.replay_policy import ReplayPolicy
from airflow_pydantic_ai.durable.attempt.result import RecordedOutput, find_recorded_output, record_output
from airflow_pydantic_ai.durable.attempt.writer import StepWriter, TryOutlook
from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.keys.chain import Fingerprinter, KeyChain, ModelKey
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.kinds import StepRole
from airflow_pydantic_ai.durable.reporting.accounting import SummaryCounts
from airflow_pydantic_ai.durable.reporting.budget import RetryBudget
from airflow_pydantic_ai.durable.reporting.report import AttemptOutcome, DurableReport
from airflow_pydantic_ai.durable.reporting.stats import AttemptStats, TaskLogger, empty_summary
from airflow_pydantic_ai.durable.reporting.telemetry import StepTelemetry
from airflow_pydantic_ai.durable.reporting.usage import replay_aware
from airflow_pydantic_ai.durable.side_effects.once import (
    CallInDoubt,
    OutcomeRules,
    Resolution,
    before_live_call,
    forget_mark,
    mark_start,
    resolution_entry,
)
from airflow_pydantic_ai.durable.steps.decision import Decision, DecisionStep
from airflow_pydantic_ai.durable.steps.model_step import ModelStep
from airflow_pydantic_ai.durable.steps.tool_step import ToolStep
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["DurableRun"]

_MAKE_IT_DURABLE = (
    "Make it durable: Agent(..., capabilities=[DurableCapability()]) (from airflow_pydantic_ai.durable import "
    "DurableCapability), or pass capabilities=[DurableCapability()] to its run"
)


@dataclass
class DurableRun:
    """The state of one durable attempt. Create it with :meth:`open`."""

    writer: StepWriter
    attempt: int
    entries: dict[str, StepEntry] = field(default_factory=dict, repr=False)
    unverified: dict[str, str] = field(default_factory=dict, repr=False)
    """Entries that exist but could not be verified (name -> why): a start mark among them puts its call in doubt."""
    unread: str = field(default="", repr=False)
    """Why the cache could not be read at all (empty: it was, or it was not asked): no at-most-once call runs."""
    keys: KeyChain = field(default_factory=KeyChain, repr=False)
    stats: AttemptStats = field(default_factory=AttemptStats)
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
    """What a step with no recorded entry does (``durable_mode``, see ``replay_policy.py``)."""

    recording: Recording | None = field(default=None, repr=False)
    """Steps recorded elsewhere that this attempt replays too (a fixture's), for the log's "replayed from"."""
    outcomes: OutcomeRules = field(default_factory=OutcomeRules, repr=False)
    """What an at-most-once call an earlier try started and never finished does (``at_most_once.py``)."""
    redact: Callable[[Any], Any] | None = field(default=None, repr=False)
    """Airflow's secrets masker, for arguments shown in an error (None: shown as they are)."""

    @classmethod
    def open(
        cls, store: StepStore, *, attempt: int, log: TaskLogger, options: AttemptOptions | None = None
    ) -> DurableRun:
        """Load the task instance's cache and start an attempt, as ``options`` say (``opening.py``).

        With ``options.probe``, a store that is unreachable (and ``storage_errors = "warn"``) is not read, and
        writes are skipped until it may be back; one that refuses because it is misconfigured raises
        ``DurableConfigError``. ``options.belongs`` decides from the try numbers that wrote the loaded entries,
        before anything else uses them, whether they were written by this run at all (and not by an earlier
        run that had the same ids and was deleted): when it says no, they are not replayed, and the cache is
        deleted with a WARNING saying what it held. ``options.recording``'s steps replay too, whatever the load
        found (the cache's own entries win).
        """
        options = options or AttemptOptions()
        writer = StepWriter(store, log, options.contains_secret, options.storage_errors, options.outlook)
        writer.max_entry_bytes = options.max_entry_bytes
        run = cls(
            writer=writer,
            attempt=attempt,
            keys=KeyChain(options.fingerprinter or Fingerprinter()),
            policy=options.policy or ReplayPolicy(),
            outcomes=options.unknown_outcome,
            redact=options.redact,
        )
        run.family.defer_pending = options.defer_pending  # issue 38: a pending request stops the run
        run.stats.telemetry = StepTelemetry(dict(options.span_attributes))  # issue 22
        if options.budget is not None:  # issue 22: read before the first step, whatever the load below finds
            run.budget = RetryBudget.load(store, attempt=attempt, limits=options.budget, log=log)
            run.stats.on_live_step = run.budget.spent_live
        load_cache(run, options)
        if options.recording is not None:
            run._replay_also(options.recording)
        # Key as the entries were keyed (keys/schemes.py); what this attempt records says so.
        run.keys.fingerprinter.expect(run.entries)
        writer.recorded_with = run.keys.recorded_with
        return run

    def _replay_also(self, recording: Recording) -> None:
        """Replay ``recording``'s steps too, as if the cache held them; the cache's own entries win."""
        self.entries = {**recording.entries, **self.entries}
        self.divergence = Divergence.of(self.entries)
        self.recording = recording

    def replayed_from(self, entry_name: str) -> str:
        """Where the replayed entry ``entry_name`` came from, for its log line (``opening.replayed_from``)."""
        return replayed_from(self.entries.get(entry_name), self.recording)

    def names_agent(self, agent: str | None) -> None:
        """The agent this attempt runs has a name: a replay miss names it."""
        if agent:
            self.policy.agent = f"agent {agent!r}"

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
    def replayed(self) -> SummaryCounts:
        return self.stats.replayed

    @property
    def executed(self) -> SummaryCounts:
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
        index = 0 if top and place.root_claims else place.index_for(run_id)
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

    def stable_run_id(self, place: Place) -> str | None:
        """The ``run_id`` an agent run starting at ``place`` gets on every try of the task instance (formula in
        ``keys/run_ids.py``); None (pydantic-ai's random one) where the run has no stable place: under a step
        that could not be keyed (whose steps never replay either).

        pydantic-ai asks before the run binds: the run's index in ``place`` is drawn now and kept for
        :meth:`bind`. A run that claims the attempt's first run (``run_agent``) is numbered by continuation
        instead, since pydantic-ai refuses a continuation a ``run_id`` its history already holds.
        """
        return draw_run_id(place, self.family, self.store.owner or [self.store.root])

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
            recording=self.recording,
            budget=self.budget,  # issue 22: a budget across tries covers nested runs too
            outcomes=self.outcomes,
            redact=self.redact,
        )

    def running(self, key: str | None) -> AbstractContextManager[None]:
        """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
        return step_scope(self, key, self.keys.model_steps)

    def agent_for_replay(self) -> str | None:
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
            "calls are not recorded, so they run again on a retry. %s",
            agent(),
            _MAKE_IT_DURABLE,
        )

    def unrecorded_requests(self, label: str, count: int) -> None:
        """``count`` model requests ran inside ``label``'s call without passing through a durable run: one WARNING
        (none when :meth:`unrecorded_run` named the agent already)."""
        if not self.family.warn_once("unrecorded requests"):
            return
        self.log.warning(
            "Durable: %s made %d model request(s) that are not recorded: an agent run inside it has no "
            "DurableCapability, so it runs again on a retry. %s",
            label,
            count,
            _MAKE_IT_DURABLE,
        )

    def step_number(self, entry: StepEntry, *, never_written: bool = False) -> int:
        """The number ``entry`` has (or would have, written now) in the cache's listing: the log names steps by it,
        as the view and ``cache show`` do (``numbering.py``)."""
        return self.writer.numbers.number(entry, never_written=never_written)

    def step_coming(self, entry: StepEntry) -> AbstractContextManager[None]:
        return self.writer.numbers.coming(entry)

    @property
    def answer_number(self) -> int:
        """The number of this agent run's model step whose answer the calls running now belong to."""
        return self.keys.model_steps

    @property
    def task_instance(self) -> list[Any]:
        """The task instance this attempt belongs to, as its entries store it (the store's owner: dag, run, task,
        map index, and a loop's region and index); the cache's location when the store has no owner."""
        owner = self.store.owner
        return list(owner) if owner is not None else [self.store.location]

    def holds_secret(self, payload: Any) -> bool:
        """Whether ``payload`` holds a value registered as secret: the writer would not store it."""
        return self.writer.contains_secret(payload)

    # --- the verbs steps report through (``owner.py``): the one place that decides which rooms they touch ---

    @property
    def run_key(self) -> Any:
        """Which agent run of the attempt this is, for the counts kept by run (None: the first run)."""
        return None if self.scope is None else self.scope.id

    def step_replayed(
        self,
        kind: StepRole,
        entry_name: str,
        *,
        usage: RequestUsage | None = None,
        cost: Decimal | None = None,
        counted_by_pydantic_ai: bool = True,
    ) -> None:
        """A step was answered from its entry: counted once as replayed (which keeps it out of what usage limits
        count, when pydantic-ai counts it)."""
        self.stats.step_done(
            kind,
            replayed=True,
            run=self.run_key,
            entry_name=entry_name,
            usage=usage,
            cost=cost,
            counted_by_pydantic_ai=counted_by_pydantic_ai,
        )

    def step_ran(self, kind: StepRole, *, usage: RequestUsage | None = None, cost: Decimal | None = None) -> None:
        """A step ran live: counted once as executed (the kind table says which summary column it counts in)."""
        self.stats.step_done(kind, replayed=False, run=self.run_key, usage=usage, cost=cost)

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

    # --- finding a step (``lookup.py``) ---------------------------------------------------------------

    def model_step(self, model: Model, messages: Sequence[ModelMessage], settings: Any, parameters: Any) -> ModelStep:
        """Fingerprint a model request and look it up."""
        return lookup.model_step(self, model, messages, settings, parameters)

    def tool_step(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
        *,
        live: bool = False,
        allowed: AllowedTypes = UNDECLARED,
    ) -> ToolStep:
        """Fingerprint a tool call and look it up (``live``: the tool opted out of replay; it runs, unrecorded;
        ``allowed``: the classes its result may name, from the tool's declaration)."""
        return lookup.tool_step(self, tool_name, tool_args, tool_call_id, messages, live=live, allowed=allowed)

    def output_step(
        self,
        function_name: str,
        raw_arguments: Any,
        tool_call_id: str | None,
        messages: Sequence[ModelMessage],
        allowed: AllowedTypes = UNDECLARED,
    ) -> ToolStep:
        """Fingerprint a call of an output function (what the model's final answer is handed to) and look it up."""
        return lookup.output_step(self, function_name, raw_arguments, tool_call_id, messages, allowed)

    def before_at_most_once(self, step: ToolStep) -> None:
        """Before an at-most-once call runs live: settle an earlier start that never finished, then record this
        start (``at_most_once.py``); ``step`` may replay a person's answer instead, or this raises."""
        before_live_call(self, step, self.outcomes, redact=self.redact)

    def mark_start(self, step: ToolStep) -> None:
        """Record that an at-most-once call starts now (right before it runs, ``at_most_once.py``)."""
        mark_start(self, step, redact=self.redact)

    def unverified_mark(self, key: str) -> str | None:
        """Why the start mark of the call ``key`` exists but could not be verified; None when it is readable or
        absent (issue 35: such a mark still puts its call in doubt)."""
        return self.unverified.get(entry_name("started", key))

    def forget_mark(self, name: str) -> None:
        """An at-most-once call ended with an exception of its own: remove its start mark (a retry runs it again)."""
        forget_mark(self, name)

    def resolve(self, doubt: CallInDoubt, resolution: Resolution) -> None:
        """Record what was decided about a call in doubt, and use it in this attempt."""
        entry = resolution_entry(doubt, resolution)
        self.writer.persist(entry, f"the answer about {doubt.label}")
        self.entries[entry.name] = entry

    def decision_step(self, call: ToolCallPart, messages: Sequence[ModelMessage]) -> DecisionStep:
        """The decision slot of a call that waits for approval, looked up in the cache."""
        return lookup.decision_step(self, call, messages)

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
        """Store the output about to be pushed to XCom, so that a retry after a crash returns it as is (not stored,
        with a warning, when it holds a registered secret or cannot be encoded exactly: see ``result.py``)."""
        record_output(self.writer, value, attempt=self.attempt, step=self.keys.model_steps)

    def usage_limits(self, limits: UsageLimits | None) -> UsageLimits | None:
        """``limits`` adjusted so that replayed steps do not count against them."""
        return replay_aware(limits, self.stats.accounting, self.run_key)

    # --- the ends of an attempt (``ending.py``) -------------------------------------------------------

    def ending(
        self, *, waits: Callable[[BaseException], bool] = lambda error: False
    ) -> AbstractContextManager[DurableRun]:
        """Around everything an attempt does after :meth:`open`: a try that ends without success packs what it
        saw; a failure tidies up (not a ``waits`` one), and the summary is logged whatever happens."""
        return ends.ending(self, waits=waits)

    def forget_what_failed(self) -> None:
        """The run ended in ``UnexpectedModelBehavior`` (retries exhausted): remove the answer it failed on."""
        ends.forget_what_failed(self)

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
        delete_after_success(
            self.store,
            self.entries,
            self.writer.written,
            self.log,
            unverified=self.unverified,
            resolve_command=self.outcomes.resolve_command,
        )

    def summary(self) -> str:
        return self.stats.summary()

    @staticmethod
    def empty_summary() -> str:
        """The summary line of an attempt that failed before it could open (every count 0)."""
        return empty_summary()

    def when_ended(self, read: Callable[[DurableReport], None]) -> None:
        """Give ``read`` this attempt's report when it ends (right after the report line), whatever the outcome."""
        self.report_readers.append(read)

    def report(self) -> DurableReport:
        """This attempt's durable report (as it stands: final once :meth:`ending` is over)."""
        return ends.report_of(self)

    def log_summary(self) -> None:
        """The summary line at INFO, then what the replay saved and what was not persisted."""
        ends.log_summary(self)
