"""What an attempt is opened with: one value the caller builds once, instead of a dozen loose arguments.

:class:`AttemptOptions` holds everything :meth:`~airflow_pydantic_ai.durable.attempt.run.DurableRun.open` needs
besides the store, the try number and the logger: how the try sits among its tries (the outlook), what the
writer must refuse, the storage-errors policy, the replay policy (``durable_mode``), steps recorded elsewhere
to replay as well (a fixture's), the spans' identity and the usage limits counted across tries. The Airflow
side reads its options and the task instance once and hands one value over; tests pass only what they vary.

:class:`Recording` is steps recorded somewhere other than the cache (a fixture file, an exported cache) that
the attempt replays as if its cache held them; the cache's own entries win, and the log says which steps came
from where (:func:`replayed_from`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.usage import UsageLimits

from airflow_pydantic_ai.durable.attempt.cleanup import CallsKept, discard, discard_earlier_run
from airflow_pydantic_ai.durable.attempt.replay_policy import ReplayPolicy
from airflow_pydantic_ai.durable.attempt.writer import StorageErrors, TryOutlook, no_secrets, secret_check
from airflow_pydantic_ai.durable.errors import describe_error
from airflow_pydantic_ai.durable.keys.chain import Fingerprinter
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.reporting.budget import Spent
from airflow_pydantic_ai.durable.side_effects.once import OutcomeRules
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.numbering import StepNumbers
from airflow_pydantic_ai.durable.wording import plural

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.owner import AttemptOwner

__all__ = ["AttemptOptions", "Recording", "load_cache", "replayed_from"]


@dataclass(frozen=True)
class Recording:
    """Steps recorded elsewhere (``source``: ``the fixture tests/fixtures/x.json``), replayed as well."""

    entries: Mapping[str, StepEntry]
    source: str


@dataclass(frozen=True)
class AttemptOptions:
    """How one attempt is opened (every field has the default a plain test wants)."""

    retry_coming: bool = True
    """Whether Airflow retries the task if this try fails (False on the last try)."""
    takes_recorded_output: bool = True
    """False on the first try of a DAG run or after a clear: an output recorded earlier is never returned."""
    delete_hint: str = ""
    """How a person deletes this cache (a command), for the log line of the last try."""
    redact: Callable[[Any], Any] | None = None
    """A secrets masker, as Airflow's ``redact``: it takes text or a structure (masking the values of sensitive
    keys too). A payload holding a value it would hide is not recorded. None: nothing is secret."""
    storage_errors: StorageErrors = "warn"
    max_entry_bytes: int | None = None
    """The largest entry stored (``durable_max_entry_bytes``): a larger step is not cached (None: no limit)."""
    probe: bool = False
    """First write and delete a probe object (an unreachable store is then not read)."""
    belongs: Callable[[Collection[int]], bool] | None = None
    """From the try numbers that wrote the loaded entries: whether this DAG run wrote them at all."""
    fingerprinter: Fingerprinter | None = None
    span_attributes: Mapping[str, str | int] = field(default_factory=dict)
    """Stamped on the spans pydantic-ai's instrumentation opens for this attempt's steps."""
    budget: UsageLimits | None = None
    """Usage limits counted across the tries of the task instance (``budget.py``)."""
    policy: ReplayPolicy | None = None
    """What a step with no recorded entry does (``durable_mode``); None: ``auto``."""
    recording: Recording | None = None
    """Steps recorded elsewhere (a fixture's) to replay too."""
    unknown_outcome: OutcomeRules = field(default_factory=OutcomeRules)
    """What an at-most-once call an earlier try started and never finished does (``on_unknown_outcome``)."""
    defer_pending: bool = False
    """A model request the provider works on (a batch, a background response) stops the run once its submission is
    recorded: ``run_agent`` raises ``RequestPending`` with its ticket, and the caller waits elsewhere (Airflow's
    triggerer). False: the run waits in-process, as pydantic-ai does (``steps/pending_step.py``)."""
    start_over: str = ""
    """Why this attempt discards the cache it finds (``cleared with on_clear=fresh``, ``durable_mode = record``):
    nothing replays and the cache is deleted, but its calls in doubt, which stay in doubt. Empty: it resumes."""

    @property
    def outlook(self) -> TryOutlook:
        return TryOutlook(self.retry_coming, self.takes_recorded_output, self.delete_hint)

    @property
    def contains_secret(self) -> Callable[[Any], bool]:
        return no_secrets if self.redact is None else secret_check(self.redact)


def replayed_from(entry: StepEntry | None, recording: Recording | None) -> str:
    """Where a replayed step came from, for its log line: ``from the cache (recorded by try 1)`` or ``from the
    fixture FILE``."""
    if entry is not None and recording is not None and recording.entries.get(entry.name) is entry:
        return f"from {recording.source}"
    if entry is None:
        return "from the cache"
    return f"from the cache (recorded by try {entry.attempt})"


_KEPT_ROLES = frozenset({"started", "resolution"})
"""Entries a deletion keeps (``CallsKept``): whoever wrote them, they say nothing of whose cache it is."""


def load_cache(run: AttemptOwner, options: AttemptOptions) -> None:
    """Read the cache into ``run`` (see :meth:`DurableRun.open`): its entries, their numbering, the divergence
    they allow; an earlier DAG run's cache, or any with ``options.start_over``, is discarded instead, but the calls
    in doubt it holds, which the attempt loads."""
    writer, store, log = run.writer, run.store, run.log
    if options.probe and not writer.check_at_start():
        run.unread = f"it was unreachable when the try started ({writer.backoff.reason})"
        _not_discarded(options.start_over, store.location, run.unread, log)
        return
    try:
        loaded = store.load()
    except Exception as error:
        writer.load_failed(error)
        run.unread = describe_error(error)
        _not_discarded(options.start_over, store.location, run.unread, log)
        return
    tries = {
        entry.attempt
        for entry in (*loaded.entries.values(), *loaded.tombstones.values())
        if entry.step_role not in _KEPT_ROLES
    }
    earlier_run = bool(tries) and options.belongs is not None and not options.belongs(tries)
    if earlier_run or options.start_over:
        resolve = options.unknown_outcome.resolve_command
        if earlier_run:
            kept = discard_earlier_run(
                store, loaded.entries, loaded.unverified, run.attempt, log, resolve_command=resolve
            )
        else:
            kept = discard(
                store, loaded.entries, loaded.unverified, log, why=options.start_over, resolve_command=resolve
            )
        if run.budget is not None:  # what an earlier DAG run, or the tries before a fresh start, spent is not counted
            run.budget.earlier = run.budget.resumed = Spent()
        _load_kept(run, kept)
        return
    run.entries, run.unverified = loaded.entries, loaded.unverified
    writer.numbers = StepNumbers(loaded.entries.values())
    if any(entry.recorded_at is None for entry in loaded.entries.values()):
        # Release 0.1.0 wrote this cache: key the attempt as it did, so that its steps replay.
        run.keys.use_release_0_1_0_keys()
    run.divergence = Divergence.of(loaded.entries)
    run.stats.bytes_read, run.stats.entries_skipped = loaded.bytes_read, len(loaded.skipped)
    log.info(
        "Durable: found %s recorded by earlier attempts (%d bytes read)",
        plural(sum(entry.is_step for entry in loaded.entries.values()), "step"),
        loaded.bytes_read,
    )


def _load_kept(run: AttemptOwner, kept: CallsKept) -> None:
    """The attempt goes on with the calls in doubt a deletion kept, as if the cache held only them."""
    run.entries, run.unverified = dict(kept.entries), dict(kept.unverified)
    run.writer.numbers = StepNumbers(kept.entries.values())


def _not_discarded(why: str, location: str, reason: str, log: Any) -> None:
    if why:
        log.error(
            "Durable: %s, but the cache at %s could not be read to discard it (%s); delete it by hand to start over",
            why,
            location,
            reason,
        )
