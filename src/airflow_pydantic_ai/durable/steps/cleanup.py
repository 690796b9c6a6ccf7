"""Deleting a task instance's cache, and what a failed try leaves behind.

Deleting after success removes the steps newest first and the result entry last (``StepStore.clear``),
so a deletion cut short leaves the result, or the oldest steps of the chain. A failure to delete never
fails the task: it is one ERROR line naming what to do. A cache left by an earlier DAG run with the
same ids is deleted with one WARNING saying what it held; a failed try removes only the empty folders
it created itself. A try that ends without success packs what it saw (``pack_for_next_try``), so that
the next one reads a few objects instead of one per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from airflow_pydantic_ai.durable.errors import describe_error
from airflow_pydantic_ai.durable.steps.stats import TaskLogger
from airflow_pydantic_ai.durable.steps.writer import TryOutlook
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.durable.wording import call_label, plural

__all__ = ["delete_after_success", "discard_earlier_run", "pack_for_next_try", "tidy_failed_try"]


def delete_after_success(
    store: StepStore,
    entries: Mapping[str, StepEntry],
    written: Sequence[str],
    log: TaskLogger,
    *,
    unverified: Mapping[str, str] | None = None,
) -> None:
    """Delete the cache: the entries this attempt ``written`` and those it found, newest first.

    Issue 35: the start marks of at-most-once calls an earlier try started and never finished that this try never
    reached (its path went elsewhere: a step replayed differently, the code changed) are kept, with their answers,
    written back as single entries after the deletion, and a WARNING names each: the success does not say whether
    their side effect happened. ``cache list`` shows the cache; ``cache rm --forget-calls-in-doubt`` deletes it.
    ``unverified``: start marks that exist but could not be verified (kept as stored when they are single entries).
    """
    try:
        orphans = _orphaned_marks(store, entries, written, unverified or {})
    except Exception as error:  # never fails the task: the marks cannot be read back, say so
        log.warning("Durable: could not read the start marks to keep at %s (%s)", store.location, describe_error(error))
        orphans = {}
    recorded = sorted(
        (entry for entry in entries.values() if entry.name not in written),
        key=lambda entry: (entry.recorded_at or 0.0, entry.attempt, entry.step),
    )
    newest_first = [*reversed([entry.name for entry in recorded] + list(written))]
    try:
        store.clear(newest_first)
    except Exception as error:
        log.error(
            "Durable: task succeeded but its cache at %s could not be deleted (%s); delete it by hand, "
            "or let a bucket lifecycle rule expire it",
            store.location,
            describe_error(error),
        )
        return
    if not orphans:
        log.info("Durable: task succeeded; deleted the cache at %s", store.location)
        return
    try:
        for name, data in orphans.items():
            store.write(name, data)
    except Exception as error:
        log.error("Durable: could not keep the start marks at %s (%s)", store.location, describe_error(error))
        return
    labels = [_mark_label(name, entries) for name in orphans if name.startswith("started-")]
    log.warning(
        "Durable: task succeeded; deleted the cache at %s but kept the start marks of %s an earlier try started and "
        "never finished, which no try reached or resolved: %s. The success does not say whether they happened: "
        "check, then delete them with cache rm ... --forget-calls-in-doubt",
        store.location,
        plural(len(labels), "at-most-once call"),
        ", ".join(labels),
    )


def _orphaned_marks(
    store: StepStore, entries: Mapping[str, StepEntry], written: Sequence[str], unverified: Mapping[str, str]
) -> dict[str, bytes]:
    """Entry name -> stored bytes of each start mark whose call has no tool entry, and of its answer."""
    done = set(entries) | set(written)
    kept: dict[str, bytes] = {}
    for name, entry in entries.items():
        if entry.step_role != "started" or entry_name("tool", entry.key) in done:
            continue
        kept[name] = store.encode(entry)
        answer = entries.get(entry_name("resolution", entry.key))
        if answer is not None:
            kept[answer.name] = store.encode(answer)
    damaged = [
        name
        for name in unverified
        if name.startswith("started-") and name not in kept and f"tool-{name.removeprefix('started-')}" not in done
    ]
    for name, data in store.read_entries(damaged).items():
        if isinstance(data, bytes):  # a single entry, kept as it is; one inside a pack cannot be kept
            kept[name] = data
    return kept


def _mark_label(name: str, entries: Mapping[str, StepEntry]) -> str:
    entry = entries.get(name)
    if entry is None:
        return f"{name} (cannot be verified)"
    return call_label("tool", entry.label, entry.call_id)


def discard_earlier_run(store: StepStore, entries: Mapping[str, StepEntry], attempt: int, log: TaskLogger) -> None:
    """The cache was left by an earlier DAG run with the same ids: say what it held, and delete it."""
    tries = sorted({entry.attempt for entry in entries.values()})
    stamps = sorted(entry.recorded_at for entry in entries.values() if entry.recorded_at is not None)
    if stamps:
        first, last = (_utc(stamp) for stamp in (stamps[0], stamps[-1]))
        written = f"written {first}" if first == last else f"written from {first} to {last}"
    else:
        written = "written by release 0.1.0, time unknown"
    log.warning(
        "Durable: the cache at %s was left by an earlier run with the same ids, since deleted (%s "
        "by %s %s, %s%s); this is try %d of a new run, so it is not replayed, and it is deleted",
        store.location,
        plural(sum(entry.is_step for entry in entries.values()), "step"),
        "try" if len(tries) == 1 else "tries",
        ", ".join(map(str, tries)),
        written,
        _cut_off_calls(entries),
        attempt,
    )
    try:
        store.clear()
    except Exception as error:
        log.error(
            "Durable: could not delete %s (%s); its steps are ignored by this run",
            store.location,
            describe_error(error),
        )


def _cut_off_calls(entries: Mapping[str, StepEntry]) -> str:
    """``, and 1 at-most-once call cut off ...``: the calls whose start the cache holds without a result, which
    the new run runs again (a person reading the warning may know the side effect happened)."""
    cut_off = [
        entry
        for entry in entries.values()
        if entry.step_role == "started" and entry_name("tool", entry.key) not in entries
    ]
    if not cut_off:
        return ""
    calls = ", ".join(call_label("tool", entry.label, entry.call_id) for entry in cut_off)
    count = plural(len(cut_off), "at-most-once call")
    return f", and {count} a try started and never finished: {calls}, which this run may run again"


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
