"""One attempt of a durable task: the loaded cache, the writer, the one count, the agent runs, the ends.

An :class:`Attempt` is opened at the start of a task attempt with the task instance's
:class:`~airflow_pydantic_ai.durable.storage.store.StepStore` (:meth:`Attempt.open`). It owns what lives for
the try: the entries it loaded (and those it could not verify), the writer and the storage-errors policy
(``writer.py``), the one count and the summary line (``reporting/``), the budget across tries, the replay
policy (``replay_policy.py``), the options it was opened with (the outcome rules of at-most-once calls, the
secrets masker, a fixture's recording), the agent runs bound so far (``nesting.py``) and its ends
(``ending.py``). Each agent run inside it is an :class:`~.agent_run.AgentRun` with a key chain of its own:
:attr:`Attempt.first` at the top level, the others made by :meth:`Attempt.agent_run`.

Data flows one way: ``open`` loads the entries once; steps read them and write new ones through the
writer; ``finish`` deletes the cache after Airflow recorded the success; ``log_summary`` ends every
attempt, also one that failed. The Airflow side asks the attempt (:meth:`steps_found`, :attr:`location`,
:meth:`reader`) and never reads its rooms.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ToolCallPart

from airflow_pydantic_ai.durable.attempt import ending as ends
from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
from airflow_pydantic_ai.durable.attempt.cleanup import delete_after_success, pack_for_next_try
from airflow_pydantic_ai.durable.attempt.nesting import TOP, AttemptFamily, Place, RunScope
from airflow_pydantic_ai.durable.attempt.opening import AttemptOptions, load_cache
from airflow_pydantic_ai.durable.attempt.replay_policy import ReplayPolicy
from airflow_pydantic_ai.durable.attempt.result import RecordedOutput, find_recorded_output, record_output
from airflow_pydantic_ai.durable.attempt.writer import StepWriter, TryOutlook
from airflow_pydantic_ai.durable.keys.chain import Fingerprinter, KeyChain
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.keys.schemes import recorded_release
from airflow_pydantic_ai.durable.reporting.accounting import SummaryCounts
from airflow_pydantic_ai.durable.reporting.budget import RetryBudget
from airflow_pydantic_ai.durable.reporting.report import DurableReport
from airflow_pydantic_ai.durable.reporting.stats import AttemptStats, TaskLogger, empty_summary
from airflow_pydantic_ai.durable.reporting.telemetry import StepTelemetry
from airflow_pydantic_ai.durable.side_effects.doubt import CallLedger
from airflow_pydantic_ai.durable.side_effects.records import CallInDoubt, Resolution, resolution_entry
from airflow_pydantic_ai.durable.steps.decision import Decision, DecisionStep
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.reader import CacheReader
from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["Attempt", "StepsFound"]


@dataclass(frozen=True)
class StepsFound:
    """What an attempt's cache held when it opened, and what the attempt replayed so far: the answer to the
    Airflow side's questions (how many steps a resume after a clear finds, what a verify reports)."""

    recorded: int
    """Steps the attempt loaded (the cache's, and a recording's)."""
    releases: frozenset[str | None]
    """The pydantic-ai releases the loaded steps say recorded them (None: a step that does not say)."""
    replayed: SummaryCounts
    model_steps: int
    """Model steps of the attempt's first agent run so far (where a replay that stopped ended)."""


@dataclass
class Attempt:
    """The state of one durable attempt. Create it with :meth:`open`."""

    writer: StepWriter
    try_number: int
    entries: dict[str, StepEntry] = field(default_factory=dict, repr=False)
    unverified: dict[str, str] = field(default_factory=dict, repr=False)
    """Entries that exist but could not be verified (name -> why): a start mark among them puts its call in doubt."""
    unread: str = field(default="", repr=False)
    """Why the cache could not be read at all (empty: it was, or it was not asked): no at-most-once call runs."""
    stats: AttemptStats = field(default_factory=AttemptStats)
    budget: RetryBudget | None = field(default=None, repr=False)
    """The usage limits counted across tries, when the task asked for them (``budget.py``)."""
    family: AttemptFamily = field(default_factory=lambda: AttemptFamily(), repr=False)
    """The agent runs bound so far, one-time warnings."""
    policy: ReplayPolicy = field(default_factory=ReplayPolicy, repr=False)
    """What a step with no recorded entry does (``durable_mode``): one policy for every agent run."""
    options: AttemptOptions = field(default_factory=AttemptOptions, repr=False)
    """What the attempt was opened with: the outcome rules of at-most-once calls (``unknown_outcome``), the
    secrets masker (``redact``), steps recorded elsewhere to replay too (``recording``)."""
    end: ends.AttemptEnd = field(default_factory=lambda: ends.AttemptEnd(), repr=False)
    """How the attempt ended, whether it deleted its cache, who reads its report."""
    first: AgentRun = field(init=False, repr=False)
    """The attempt's first agent run at the top level (the one the operator's run records into; set by
    :meth:`open`)."""

    @classmethod
    def open(cls, store: StepStore, *, attempt: int, log: TaskLogger, options: AttemptOptions | None = None) -> Attempt:
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
        new = cls(writer=writer, try_number=attempt, policy=options.policy or ReplayPolicy(), options=options)
        keys = KeyChain(options.fingerprinter or Fingerprinter())
        new.first = AgentRun(new, keys=keys)
        new.stats.telemetry = StepTelemetry(dict(options.span_attributes))  # issue 22
        if options.budget is not None:  # issue 22: read before the first step, whatever the load below finds
            new.budget = RetryBudget.load(store, attempt=attempt, limits=options.budget, log=log)
            new.stats.on_live_step = new.budget.spent_live
        load_cache(new, options)
        if options.recording is not None:  # replayed as if the cache held them; the cache's own entries win
            new.entries = {**options.recording.entries, **new.entries}
            new.first.divergence = Divergence.of(new.entries)
        # Key as the entries were keyed (keys/schemes.py); what this attempt records says so.
        keys.fingerprinter.expect(new.entries)
        writer.recorded_with = keys.recorded_with
        return new

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

    # --- the agent runs (``nesting.py``) -----------------------------------------------------------

    def bind(self, place: Place, run_id: str | None, agent: str | None) -> AgentRun | None:
        """The agent run of the attempt a pydantic-ai run starting at ``place`` records into; None when one is
        bound already."""
        family = self.family
        if run_id is not None and run_id in family.bound:
            return None  # a second durable capability on the same run: the first one records it
        top = place.parent is None and place.top_level
        index = 0 if top and place.root_claims else place.index_for(run_id)
        if top and index == 0:
            bound = self.first
            if family.agent_runs == 0:
                family.first_agent = agent
                family.agent_runs = 1
        else:
            family.agent_runs += 1
            bound = self.agent_run(
                RunScope(parent=place.parent or TOP, index=index, at=place.at, agent=agent, depth=place.depth),
                keyed=place.parent is not None or top,
            )
        if run_id is not None:
            family.bound[run_id] = bound
        return bound

    def agent_run(self, scope: RunScope, *, keyed: bool = True) -> AgentRun:
        """A further agent run of the attempt, started from ``scope``, with a key chain of its own (``keyed``:
        False when the step that started it has no key: nothing of the run gets one either)."""
        keys = KeyChain(self.first.keys.fingerprinter, lineage=scope.chain_start())
        keys.failed_closed = not keyed
        return AgentRun(
            self, keys=keys, divergence=self.first.divergence.for_scope(self.entries, scope.id), scope=scope
        )

    # --- what steps and side effects ask and report -------------------------------------------------

    def step_number(self, entry: StepEntry, *, never_written: bool = False) -> int:
        """The number ``entry`` has (or would have, written now) in the cache's listing: the log names steps by it,
        as the view and ``cache show`` do (``numbering.py``); ``never_written``: a failed step, numbered after
        the calls of its answer still running."""
        return self.writer.numbers.number(entry, never_written=never_written)

    @property
    def task_instance(self) -> list[Any]:
        """The task instance this attempt belongs to, as its entries store it (the store's owner: dag, run, task,
        map index, and a loop's region and index); the cache's location when the store has no owner."""
        owner = self.store.owner
        return list(owner) if owner is not None else [self.store.location]

    def holds_secret(self, payload: Any) -> bool:
        """Whether ``payload`` holds a value registered as secret: the writer would not store it."""
        return self.writer.contains_secret(payload)

    def record(self, entry: StepEntry, what: str) -> bool:
        """Record ``entry`` through the writer (False: not stored; the log says why)."""
        return self.writer.persist(entry, what)

    def entry_unusable(self, entry: StepEntry, error: object, consequence: str) -> None:
        """One WARNING for an entry that cannot be rebuilt: it is never replayed, ``consequence`` happens instead."""
        self.log.warning(
            "Durable: cache entry %s%s cannot be rebuilt (%s); %s", self.store.location, entry.name, error, consequence
        )

    def calls_in_doubt(self) -> list[CallInDoubt]:
        """The calls in doubt of this attempt's cache that no answer resolves yet, oldest start first
        (``side_effects/doubt.py`` decides)."""
        return CallLedger(self.entries, self.unverified).unanswered()

    def call_in_doubt(self, key: str, tool: str) -> CallInDoubt | None:
        """The call in doubt ``key`` as the cache says now, with an answer recorded meanwhile (``cache resolve``);
        None when it is not in doubt (its mark gone, or its call finished). ``tool``: what it was asked about as."""
        return CallLedger(self.entries, self.unverified).call(key, tool)

    def resolve(self, doubt: CallInDoubt, resolution: Resolution) -> None:
        """Record what was decided about a call in doubt, and use it in this attempt."""
        self.record_decision(resolution_entry(doubt, resolution), f"the answer about {doubt.label}")

    def decide(self, call: ToolCallPart, *, key: str, step_number: int, decision: Decision) -> None:
        """Record a person's decision on ``call`` (asked under ``key`` at model step ``step_number``)."""
        DecisionStep(run=self.first, call=call, key=key, step_number=step_number).record(decision)

    def record_decision(self, entry: StepEntry, what: str) -> None:
        """Store a decision and use it in this attempt (one that could not be stored is asked again on a retry)."""
        self.writer.persist(entry, what)
        self.entries[entry.name] = entry

    # --- what the Airflow side asks ----------------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the cache is (for a log line)."""
        return self.store.location

    def steps_found(self) -> StepsFound:
        """What the cache held when the attempt opened, and what it replayed so far."""
        steps = [entry for entry in self.entries.values() if entry.is_step]
        return StepsFound(
            recorded=len(steps),
            releases=frozenset(recorded_release(entry.recorded_with) for entry in steps),
            replayed=self.stats.replayed,
            model_steps=self.first.keys.model_steps,
        )

    def reader(self) -> CacheReader:
        """The read side of this attempt's cache (what is stored now, not what the attempt loaded)."""
        return CacheReader(self.store)

    # --- the output ----------------------------------------------------------------------------------

    def recorded_output(self) -> RecordedOutput | None:
        """The output the previous try recorded before it was killed, if the cache holds it (see ``result.py``)."""
        return find_recorded_output(
            self.entries, attempt=self.try_number, outlook=self.outlook, location=self.store.location, log=self.log
        )

    def record_output(self, value: Any) -> None:
        """Store the output about to be pushed to XCom, so that a retry after a crash returns it as is (not stored,
        with a warning, when it holds a registered secret or cannot be encoded exactly: see ``result.py``)."""
        record_output(self.writer, value, attempt=self.try_number, step=self.first.keys.model_steps)

    # --- the ends of an attempt (``ending.py``) -------------------------------------------------------

    def ending(
        self, *, waits: Callable[[BaseException], bool] = lambda error: False
    ) -> AbstractContextManager[Attempt]:
        """Around everything an attempt does after :meth:`open`: a try that ends without success packs what it
        saw; a failure tidies up (not a ``waits`` one), and the summary is logged whatever happens."""
        return ends.ending(self, waits=waits)

    def pack_for_next_try(self) -> None:
        """This try ends without success (failed, or waits for a person): pack the entries it saw into one object."""
        pack_for_next_try(self.store, self.try_number, self.log, reachable=not self.writer.backoff.active)

    def finish(self) -> None:
        """Delete the cache: steps newest first, the result entry last (a failure here never fails the task).

        Call it once Airflow has recorded the task's success (the operator does, from a success callback).
        """
        self.end.finished = True
        delete_after_success(
            self.store,
            self.entries,
            self.writer.written,
            self.log,
            unverified=self.unverified,
            resolve_command=self.options.unknown_outcome.resolve_command,
        )

    @staticmethod
    def empty_summary() -> str:
        """The summary line of an attempt that failed before it could open (every count 0)."""
        return empty_summary()

    def when_ended(self, read: Callable[[DurableReport], None]) -> None:
        """Give ``read`` this attempt's report when it ends (right after the report line), whatever the outcome."""
        self.end.readers.append(read)

    def report(self) -> DurableReport:
        """This attempt's durable report (as it stands: final once :meth:`ending` is over)."""
        return ends.report_of(self)

    def log_summary(self) -> None:
        """The summary line at INFO, then what the replay saved and what was not persisted."""
        ends.log_summary(self)


DurableRun = Attempt
"""The attempt's name before (``docs/api.rst`` listed it): still importable from ``airflow_pydantic_ai.durable``."""
