"""How the embedding side (the Airflow side of a durable try) drives an attempt it opened (with one
:class:`~airflow_pydantic_ai.durable.attempt.opening.AttemptOptions` value): one block to run agents in it,
one call to note how it ended.

:func:`attempt_block` makes the attempt current for the agent runs inside a block and keeps replayed steps
out of exported telemetry; :func:`note_ending` writes beside the cache how a try that raised ended (for the
UI view). The engine knows nothing of Airflow: the secrets masker and the wait test come in as plain values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = ["attempt_block", "note_ending"]


@contextmanager
def attempt_block(run: Attempt) -> Iterator[None]:
    """Inside the block, every agent run carrying the durable capability is a run of attempt ``run``; its
    summary line ends the block whatever happens, and replayed steps stay out of exported telemetry."""
    from airflow_pydantic_ai.durable.attempt.nesting import attempt_scope
    from airflow_pydantic_ai.durable.reporting.telemetry import telemetry_scope

    with run.ending(), attempt_scope(run), telemetry_scope():
        yield


def note_ending(
    run: Attempt, error: BaseException, *, waiting_for: str, redact: Callable[[Any], Any], warn: Callable[..., Any]
) -> None:
    """Note beside the cache how a try that raised ``error`` ended: a wait for a person (``waiting_for``
    says which; empty when it is no wait) or a failure (class and message, masked by ``redact``).

    Nothing is noted when the attempt finished or left no cache behind; a storage error is logged through
    ``warn``, never raised.
    """
    from airflow_pydantic_ai.durable.storage.notes import TryEnding, record_ending

    if run.end.finished or not (run.entries or run.writer.written):
        return
    if waiting_for:
        ending = TryEnding(attempt=run.try_number, how="waiting", message=waiting_for)
    else:
        ending = TryEnding.failed(run.try_number, error, redact)
    record_ending(run.store, ending, warn=warn)
