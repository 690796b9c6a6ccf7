"""The ends of an attempt: what a try that did not succeed leaves for the next, the summary, the report.

Every attempt ends through :func:`ending` (around everything it does after it was opened): a try that ends
without success packs what it saw for the next try, a failed one tidies up, and whatever happens the summary
line, the report and the per-try note are written (:func:`log_summary`). :func:`forget_what_failed` forgets
the answer a run failed on when its retries ran out (a tombstone first, then the deletions), so that the next
try asks again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_pydantic_ai.durable.attempt.cleanup import tidy_failed_try
from airflow_pydantic_ai.durable.attempt.last_answer import LastAnswer
from airflow_pydantic_ai.durable.errors import describe_error
from airflow_pydantic_ai.durable.reporting.report import AttemptOutcome, DurableReport
from airflow_pydantic_ai.durable.storage.notes import AttemptRecord, record_attempt
from airflow_pydantic_ai.durable.storage.tombstone import Mark, tombstone

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = ["AttemptEnd", "ending", "forget_what_failed", "log_summary", "report_of"]


@dataclass
class AttemptEnd:
    """How an attempt ended, as its report and the note beside its cache say."""

    outcome: AttemptOutcome = "running"
    """How the attempt ended (set by :func:`ending`)."""
    waiting_for: str = "a person"
    """Whom a try that stopped to wait waits for: a person, or the provider (a batch or background request)."""
    finished: bool = False
    """The attempt deleted its cache after the success (``Attempt.finish``)."""
    readers: list[Callable[[DurableReport], None]] = field(default_factory=list)
    """Given the report once the attempt ended (``Attempt.when_ended``)."""


@contextmanager
def ending(run: Attempt, *, waits: Callable[[BaseException], bool]) -> Iterator[Attempt]:
    """Around everything an attempt does after it was opened: a try that ends without success packs what it
    saw; a failure tidies up (not a ``waits`` one: a try that stops to wait for a person has not failed), and
    the summary is logged whatever happens."""
    try:
        yield run
        run.end.outcome = "succeeded"
    except BaseException as error:
        run.pack_for_next_try()
        run.end.outcome = "waiting" if waits(error) else "failed"
        if run.end.outcome == "failed":  # remove the folders it left empty; on the last try, say the cache is kept
            tidy_failed_try(run.store, run.outlook, run.log)
        raise
    finally:
        log_summary(run)


def forget_what_failed(run: AgentRun) -> None:
    """The run ended in ``UnexpectedModelBehavior`` (retries exhausted): remove what made it fail.

    That is the last model answer of this attempt together with every retry outcome its calls drew
    (a tool's or an output function's ``ModelRetry``, a ``ToolRetryError``), recorded or replayed:
    replaying any of them would fail the retry the same way, even when the cause was transient. What
    the run got past stays: earlier answers and retries, and the answer's calls that returned. When a
    call of that answer raised an exception that is never recorded, that call ended the run, and
    nothing is removed.

    A tombstone naming each of them, with the copy it forgets (``storage/tombstone.py``), is written first, in
    one atomic write; only then are they deleted. The tombstone is what forgets them: a copy that a kill leaves
    in an old pack, or that a zombie try packs again later, is ignored by every later load, while the answer
    the next try records under the same name is used. The deletions only tidy up (one that fails is a WARNING).
    When the tombstone cannot be written, nothing is deleted (one ERROR): deleting without it could leave a
    copy behind that a later try replays anyway, while keeping everything has one predictable cost, the next
    try replays the failed answer and fails the same way, wasting that try but doing nothing wrong.
    """
    names = run.last_answer.to_forget
    if not names:
        return
    attempt = run.attempt
    now = time.time()
    # The copy this attempt loaded or recorded; a name it holds no entry of (never stored) is forgotten up to now.
    marks = {
        name: Mark.of(attempt.entries[name]) if name in attempt.entries else Mark(attempt.try_number, now)
        for name in names
    }
    try:
        attempt.store.put(tombstone(marks, attempt=attempt.try_number, step=run.last_answer.number, recorded_at=now))
    except Exception as error:
        attempt.log.error(
            "Durable: could not forget %s (its tombstone could not be written to %s: %s), so nothing was removed "
            "and the next try replays it and fails the same way. To have the model asked again, delete the cache "
            "before the next try (%s)",
            run.last_answer.describe(),
            attempt.store.location,
            describe_error(error),
            attempt.outlook.delete_hint or "airflow pydantic-ai cache rm, with --from-step to keep the steps before it",
        )
        run.last_answer = LastAnswer(number=run.last_answer.number)  # said once, however many hooks see it
        return
    for name in names:
        attempt.entries.pop(name, None)
        attempt.writer.numbers.discard(name)
        try:
            attempt.store.remove(name)
        except Exception as error:
            attempt.log.warning(
                "Durable: could not delete %s%s (%s); its tombstone already keeps later tries from replaying it",
                attempt.store.location,
                name,
                describe_error(error),
            )
    who = "a retry" if attempt.outlook.retry_coming else "a later try (after a clear)"
    attempt.log.info(
        "Durable: the run%s failed on %s; removed from the cache so %s asks again instead of replaying it",
        run.who,
        run.last_answer.describe(),
        who,
    )
    run.last_answer = LastAnswer(number=run.last_answer.number)  # forgotten once, however many hooks see it


def report_of(run: Attempt) -> DurableReport:
    """The attempt's durable report (as it stands: final once :func:`ending` is over)."""
    return DurableReport(
        try_number=run.try_number,
        outcome=run.end.outcome,
        accounting=run.stats.accounting,
        not_persisted=run.writer.not_persisted,
        changed=tuple(run.first.divergence.changed_components),
        cache_location=run.store.location,
        cache_deleted=run.end.outcome == "succeeded",
        waiting_for=run.end.waiting_for,
    )


def log_summary(run: Attempt) -> None:
    """The summary line at INFO, then what the replay saved and what was not persisted; the report to its
    readers; the per-try note the view shows."""
    report = report_of(run)  # issue 22: the report line right after the summary, then to its readers
    run.stats.log(
        run.log,
        not_persisted=run.writer.not_persisted,
        what_next=run.outlook.what_next("will run again on a retry"),
        report_line=report.log_line(),
    )
    for read in run.end.readers:
        read(report)
    # A finished run deleted its cache, and a try that found and stored nothing has no cache to
    # describe: either way, leave nothing behind.
    if not run.end.finished and (run.entries or run.writer.written):
        record = AttemptRecord(run.try_number, run.stats.summary(), tuple(run.first.divergence.changes))
        record_attempt(run.store, record, warn=run.log.warning)
