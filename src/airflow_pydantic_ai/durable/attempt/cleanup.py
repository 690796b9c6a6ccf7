"""Deleting a task instance's cache, and what a failed try leaves behind.

Deleting after success removes the steps newest first and the result entry last (``StepStore.clear``),
so a deletion cut short leaves the result, or the oldest steps of the chain. A failure to delete never
fails the task: it is one ERROR line naming what to do. A cache left by an earlier DAG run with the
same ids is deleted with one WARNING saying what it held; so is the cache of a try that starts over (a clear
with ``on_clear = fresh``, ``durable_mode = record``). Every one of these deletions keeps the calls in doubt
(``CallsKept``, ``clear_keeping_calls_in_doubt``): an at-most-once call a try started and never finished stays in
doubt until a person resolves it or forgets it with ``cache rm --forget-calls-in-doubt``. A failed try removes
only the empty folders it created itself. A try that ends without success packs what it saw
(``pack_for_next_try``), so that the next one reads a few objects instead of one per step.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from airflow_pydantic_ai.durable.attempt.writer import TryOutlook
from airflow_pydantic_ai.durable.errors import describe_error
from airflow_pydantic_ai.durable.reporting.stats import TaskLogger
from airflow_pydantic_ai.durable.side_effects.doubt import CallLedger
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.durable.wording import call_label, plural

__all__ = [
    "CallsKept",
    "clear_keeping_calls_in_doubt",
    "delete_after_success",
    "discard",
    "discard_earlier_run",
    "pack_for_next_try",
    "tidy_failed_try",
    "warn_calls_kept",
]


_RESOLVE_PLACEHOLDER = "airflow pydantic-ai cache resolve DAG RUN TASK"
"""Where the attempt was given no ``cache resolve`` command (a test, a notebook)."""


@dataclass(frozen=True)
class CallsKept:
    """What deleting a cache keeps of it: the start marks of its calls in doubt (an at-most-once call a try started
    and never finished) and their answers, so that the call stays in doubt after the deletion."""

    entries: dict[str, StepEntry] = field(default_factory=dict)
    """The marks and answers that could be read, by entry name (an attempt that goes on after the deletion loads
    them as its cache)."""
    unverified: dict[str, str] = field(default_factory=dict)
    """Start marks that exist but cannot be verified (name -> why): kept as stored where they are single entries."""

    @classmethod
    def of(
        cls, entries: Mapping[str, StepEntry], unverified: Mapping[str, str], finished: Collection[str] = ()
    ) -> CallsKept:
        """The calls in doubt of a cache whose loaded ``entries`` and ``unverified`` marks are given: each start mark
        with no tool entry in the cache nor among ``finished`` (written by the attempt that deletes), and its
        answer."""
        kept: dict[str, StepEntry] = {}
        damaged: dict[str, str] = {}
        for standing in CallLedger(entries, unverified, finished).open_calls():  # side_effects/doubt.py decides
            if standing.mark is None:
                damaged[standing.mark_name] = standing.unverified
                continue
            kept[standing.mark.name] = standing.mark
            if standing.answer is not None:
                kept[standing.answer.name] = standing.answer
        return cls(kept, damaged)

    def __bool__(self) -> bool:
        return bool(self.entries or self.unverified)

    @property
    def labels(self) -> list[str]:
        """Each kept call by name: ``tool charge_card (call c1)``, or a mark's name when it cannot be verified."""
        marks = [entry for entry in self.entries.values() if entry.step_role == "started"]
        return [call_label("tool", entry.label, entry.call_id) for entry in marks] + [
            f"{name} (cannot be verified)" for name in self.unverified
        ]

    def stored(self, store: StepStore) -> dict[str, bytes]:
        """Entry name -> the bytes to write back: the marks and answers encoded again (from a pack too), a mark that
        cannot be verified as it is stored (one inside a pack cannot be kept: its bytes cannot be told apart)."""
        kept = {name: store.encode(entry) for name, entry in self.entries.items()}
        for name, data in store.read_entries(list(self.unverified)).items():
            if isinstance(data, bytes):
                kept[name] = data
        return kept


def clear_keeping_calls_in_doubt(
    store: StepStore, kept: CallsKept, log: TaskLogger, newest_first: Sequence[str] = ()
) -> bool:
    """Delete the cache at ``store`` (``StepStore.clear``), then write ``kept`` back as single entries, so that a call
    in doubt stays in doubt: a later try that calls it again asks, fails or reruns as ``on_unknown_outcome`` says.

    The one way every deletion of a whole cache by a task goes: the success cleanup, a clear that starts over, a
    ``durable_mode = record`` try, an earlier DAG run's cache. Raises what reading the marks or deleting raised (then
    nothing was deleted, or the marks are still there); returns False, with an ERROR line, when the marks could not
    be written back."""
    stored = kept.stored(store) if kept else {}
    store.clear(newest_first)
    try:
        for name, data in stored.items():
            store.write(name, data)
    except Exception as error:
        log.error(
            "Durable: deleted the cache at %s but could not write back the start marks of %s (%s): their calls are "
            "no longer in doubt for a later try; check them before clearing the task",
            store.location,
            ", ".join(kept.labels),
            describe_error(error),
        )
        return False
    return True


def warn_calls_kept(log: TaskLogger, done: str, kept: CallsKept, resolve_command: str, why_unknown: str = "") -> None:
    """The WARNING of a deletion that kept calls in doubt: ``done`` (what was deleted), each kept call, and the ways
    on (``cache resolve``, or ``cache rm --forget-calls-in-doubt``)."""
    labels = kept.labels
    log.warning(
        "Durable: %s, but kept the start marks of %s an earlier try started and never finished: %s. %s, so each stays "
        "in doubt: a try that calls it again asks, fails or runs it again as on_unknown_outcome says. Check, then "
        "resolve each (%s --call REF --happened --result ... | --happened --no-result | --rerun | --fail), or delete "
        "them with cache rm ... --forget-calls-in-doubt",
        done,
        plural(len(labels), "at-most-once call"),
        ", ".join(labels),
        why_unknown or "Whether they happened is unknown",
        resolve_command or _RESOLVE_PLACEHOLDER,
    )


def delete_after_success(
    store: StepStore,
    entries: Mapping[str, StepEntry],
    written: Sequence[str],
    log: TaskLogger,
    *,
    unverified: Mapping[str, str] | None = None,
    resolve_command: str = "",
) -> None:
    """Delete the cache: the entries this attempt ``written`` and those it found, newest first.

    Issue 35: the start marks of at-most-once calls an earlier try started and never finished that this try never
    reached (its path went elsewhere: a step replayed differently, the code changed) are kept, with their answers,
    written back as single entries after the deletion, and a WARNING names each: the success does not say whether
    their side effect happened. ``cache list`` shows the cache; ``cache rm --forget-calls-in-doubt`` deletes it.
    ``unverified``: start marks that exist but could not be verified (kept as stored when they are single entries).
    """
    kept = CallsKept.of(entries, unverified or {}, written)
    recorded = sorted(
        (entry for entry in entries.values() if entry.name not in written),
        key=lambda entry: (entry.recorded_at or 0.0, entry.attempt, entry.step),
    )
    newest_first = [*reversed([entry.name for entry in recorded] + list(written))]
    try:
        if not clear_keeping_calls_in_doubt(store, kept, log, newest_first):
            return
    except Exception as error:
        log.error(
            "Durable: task succeeded but its cache at %s could not be deleted (%s); delete it by hand, "
            "or let a bucket lifecycle rule expire it",
            store.location,
            describe_error(error),
        )
        return
    if not kept:
        log.info("Durable: task succeeded; deleted the cache at %s", store.location)
        return
    warn_calls_kept(
        log,
        f"task succeeded; deleted the cache at {store.location}",
        kept,
        resolve_command,
        why_unknown="No try reached or resolved them, and the success does not say whether they happened",
    )


def discard(
    store: StepStore,
    entries: Mapping[str, StepEntry],
    unverified: Mapping[str, str],
    log: TaskLogger,
    *,
    why: str,
    resolve_command: str = "",
) -> CallsKept:
    """Delete a cache this attempt does not replay (``why``: ``cleared with on_clear=fresh``, ``durable_mode =
    record``, or an earlier DAG run's), but its calls in doubt; returns them, for the attempt to load as its cache
    (a live call of one of them is then asked about, failed or run again as ``on_unknown_outcome`` says). A
    deletion that fails never fails the task: one ERROR line, and the attempt ignores what it could not delete."""
    kept = CallsKept.of(entries, unverified)
    try:
        existed = store.exists()
        if existed and not clear_keeping_calls_in_doubt(store, kept, log):
            return kept
    except Exception as error:
        log.error(
            "Durable: %s, but the cache at %s could not be discarded (%s); this try ignores its steps: delete it "
            "by hand to start over",
            why,
            store.location,
            describe_error(error),
        )
        return kept
    if not existed:
        log.info("Durable: %s: there was no cache to discard", why)
    elif kept:
        warn_calls_kept(
            log, f"{why}: discarded the cache at {store.location}; every step runs live", kept, resolve_command
        )
    else:
        log.info("Durable: %s: the cache was discarded; every step runs live", why)
    return kept


def discard_earlier_run(
    store: StepStore,
    entries: Mapping[str, StepEntry],
    unverified: Mapping[str, str],
    attempt: int,
    log: TaskLogger,
    *,
    resolve_command: str = "",
) -> CallsKept:
    """The cache was left by an earlier DAG run with the same ids: say what it held, and delete it but its calls in
    doubt, which this run loads (returned): the new run may make the same call, with the same idempotency key."""
    tries = sorted({entry.attempt for entry in entries.values()})
    stamps = sorted(entry.recorded_at for entry in entries.values() if entry.recorded_at is not None)
    if stamps:
        first, last = (_utc(stamp) for stamp in (stamps[0], stamps[-1]))
        written = f"written {first}" if first == last else f"written from {first} to {last}"
    else:
        written = "written by release 0.1.0, time unknown"
    log.warning(
        "Durable: the cache at %s was left by an earlier run with the same ids, since deleted (%s "
        "by %s %s, %s); this is try %d of a new run, so it is not replayed, and it is deleted",
        store.location,
        plural(sum(entry.is_step for entry in entries.values()), "step"),
        "try" if len(tries) == 1 else "tries",
        ", ".join(map(str, tries)),
        written,
        attempt,
    )
    kept = CallsKept.of(entries, unverified)
    try:
        if clear_keeping_calls_in_doubt(store, kept, log) and kept:
            warn_calls_kept(log, f"deleted the earlier run's cache at {store.location}", kept, resolve_command)
    except Exception as error:
        log.error(
            "Durable: could not delete %s (%s); its steps are ignored by this run",
            store.location,
            describe_error(error),
        )
    return kept


def pack_for_next_try(store: StepStore, attempt: int, log: TaskLogger, *, reachable: bool = True) -> None:
    """A try ends without success (failed, or parked for a person): pack what it saw into one object, so that
    the next try reads the cache in a few requests (``StepStore.pack``). Never fails the try: an error is
    one WARNING line, and the entries stay where they were (a retry reads them one by one)."""
    if not reachable:
        return
    try:
        name = store.pack(attempt)
    except Exception as error:
        log.warning(
            "Durable: could not pack the cache at %s for the next try (%s); it reads the entries one by one",
            store.location,
            describe_error(error),
        )
        return
    if name is not None:
        log.debug("Durable: packed the cache at %s into %s for the next try", store.location, name)


def tidy_failed_try(store: StepStore, outlook: TryOutlook, log: TaskLogger) -> None:
    """Remove the folders a failed try created and left empty; on the last try, say the cache is kept."""
    try:
        store.remove_empty_folders()
        # Whether anything is kept matters for the last try's log line only (on S3 it costs three requests).
        kept = not outlook.retry_coming and store.exists()
    except Exception as error:
        log.debug("Durable: could not tidy %s: %s", store.location, describe_error(error))
        return
    if not kept:
        return
    how = f"rm -r '{store.root}' on this worker" if store.is_local else "delete that prefix"
    if outlook.delete_hint:
        how = f"run {outlook.delete_hint} ({how})"
    log.info(
        "Durable: no retry is coming, so the cache at %s is kept: clearing the task later resumes from it. "
        "To start over instead, %s (or let a lifecycle rule expire it)",
        store.location,
        how,
    )


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
