"""How the embedding side (the Airflow side of a durable try) drives an attempt: one value to open it, one
block to run agents in it, one call to note how it ended.

:class:`AttemptSettings` holds every argument of :meth:`DurableRun.open` but the store, so the Airflow side
hands over one value instead of a dozen loose names; :func:`attempt_block` makes the attempt current for the
agent runs inside a block and keeps replayed steps out of exported telemetry; :func:`note_ending` writes
beside the cache how a try that raised ended (for the UI view). The engine knows nothing of Airflow: the
secrets masker, the wait test and the identity stamped on spans come in as plain values.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.durable.steps.run import DurableRun
    from airflow_pydantic_ai.durable.steps.stats import TaskLogger
    from airflow_pydantic_ai.durable.steps.writer import StorageErrors
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["AttemptSettings", "attempt_block", "note_ending"]


@dataclass(frozen=True)
class AttemptSettings:
    """Everything an attempt is opened with but its store (see :meth:`DurableRun.open` for each field)."""

    attempt: int
    """The try number that writes this attempt's entries."""
    log: TaskLogger
    redact: Callable[[str], Any] | None = None
    """A secrets masker: a payload holding a value it would hide is not recorded. None: nothing is secret."""
    storage_errors: StorageErrors = "warn"
    probe: bool = False
    takes_recorded_output: bool = True
    belongs: Callable[[Collection[int]], bool] | None = None
    retry_coming: bool = True
    delete_hint: str = ""
    span_attributes: Mapping[str, str | int] | None = None
    budget: UsageLimits | None = None
    """Usage limits counted across the tries of the task instance; None: counted per try only."""

    def open(self, store: StepStore) -> DurableRun:
        """Load ``store``'s cache and start the attempt."""
        from airflow_pydantic_ai.durable.steps.run import DurableRun
        from airflow_pydantic_ai.durable.steps.writer import no_secrets, secret_check

        return DurableRun.open(
            store,
            attempt=self.attempt,
            log=self.log,
            contains_secret=no_secrets if self.redact is None else secret_check(self.redact),
            storage_errors=self.storage_errors,
            probe=self.probe,
            takes_recorded_output=self.takes_recorded_output,
            belongs=self.belongs,
            retry_coming=self.retry_coming,
            delete_hint=self.delete_hint,
            span_attributes=self.span_attributes,
            budget=self.budget,
        )


@contextmanager
def attempt_block(run: DurableRun) -> Iterator[None]:
    """Inside the block, every agent run carrying the durable capability is a run of attempt ``run``; its
    summary line ends the block whatever happens, and replayed steps stay out of exported telemetry."""
    from airflow_pydantic_ai.durable.steps.nesting import attempt_scope
    from airflow_pydantic_ai.durable.steps.telemetry import telemetry_scope

    with run.ending(), attempt_scope(run), telemetry_scope():
        yield


def note_ending(
    run: DurableRun, error: BaseException, *, waiting_for: str, redact: Callable[[Any], Any], warn: Callable[..., Any]
) -> None:
    """Note beside the cache how a try that raised ``error`` ended: a wait for a person (``waiting_for``
    says which; empty when it is no wait) or a failure (class and message, masked by ``redact``).

    Nothing is noted when the attempt finished or left no cache behind; a storage error is logged through
    ``warn``, never raised.
    """
    from airflow_pydantic_ai.durable.storage.attempts import TryEnding, record_ending

    if run.finished or not (run.entries or run.writer.written):
        return
    if waiting_for:
        ending = TryEnding(attempt=run.attempt, how="waiting", message=waiting_for)
    else:
        ending = TryEnding.failed(run.attempt, error, redact)
    record_ending(run.store, ending, warn=warn)
