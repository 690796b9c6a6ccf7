"""The task's output, recorded before the XCom push, so that a retry after a lost worker returns it as is.

One ``result`` entry per task instance (``result-output.json``), with the same guarantees as a step
(checksum, owner binding, encryption; never written when it holds a registered secret). Only the try
right after the one that recorded it may return it, and never the first try of a DAG run or the first
after a clear: an older result entry can only come from a zombie try, or from a success whose
deletion was cut short.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.attempt.writer import StepWriter, TryOutlook
from airflow_pydantic_ai.durable.encoding.codec import UnsupportedValue, decode_value, encode_value
from airflow_pydantic_ai.durable.reporting.stats import TaskLogger
from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY, RESULT_KEY, StepEntry

__all__ = ["RecordedOutput", "find_recorded_output", "output_entry", "record_output"]


@dataclass(frozen=True)
class RecordedOutput:
    """The output an earlier try pushed to XCom before it was killed, found in the cache."""

    value: Any
    attempt: int


def output_entry(value: Any, *, attempt: int, step: int) -> StepEntry:
    """The entry holding ``value``; raises ``UnsupportedValue`` when it cannot be encoded exactly."""
    return StepEntry(
        kind="result",
        key=RESULT_KEY,
        step=step,
        attempt=attempt,
        label="output",
        payload={"value": encode_value(value)},
        role="result",
        recorded_at=time.time(),
    )


def record_output(writer: StepWriter, value: Any, *, attempt: int, step: int) -> None:
    """Store the output about to be pushed to XCom, so that a retry after a crash returns it as is.

    Not stored (with a warning) when it holds a registered secret or cannot be encoded exactly: a
    retry then replays the recorded steps to rebuild it.
    """
    what = "the task's output"
    try:
        entry = output_entry(value, attempt=attempt, step=step)
    except UnsupportedValue as error:
        writer.skipped()
        writer.log.warning("Durable: %s is not cached (%s); a retry replays the steps instead", what, error)
        return
    writer.persist(entry, what, on_secret="it is not cached; a retry replays the steps instead")


def find_recorded_output(
    entries: Mapping[str, StepEntry], *, attempt: int, outlook: TryOutlook, location: str, log: TaskLogger
) -> RecordedOutput | None:
    """The output the previous try recorded before it was killed, if ``entries`` hold it and this try may take it."""
    entry = entries.get(RESULT_ENTRY)
    if entry is None:
        return None
    where = f"{location}{entry.name}"
    if not outlook.takes_recorded_output:
        # A clear asks for a new run: the output is what a success left behind (its deletion was cut short).
        log.warning(
            "Durable: ignoring the output recorded by try %d in %s: this is the first try since the DAG run "
            "started or the task was cleared, so the agent runs again (unchanged steps replay)",
            entry.attempt,
            where,
        )
        return None
    if entry.attempt != attempt - 1:
        log.warning(
            "Durable: ignoring the output recorded by try %d in %s: only the try right after it may "
            "return it (this is try %d); the run replays its steps instead",
            entry.attempt,
            where,
            attempt,
        )
        return None
    try:
        value = decode_value(entry.payload["value"])
    except Exception as error:
        log.warning("Durable: cache entry %s cannot be rebuilt (%s); the run replays its steps instead", where, error)
        return None
    log.info(
        "Durable: try %d already produced this task's output, but its success was not recorded (the "
        "worker was lost); returning that output without calling the model or any tool",
        entry.attempt,
    )
    return RecordedOutput(value=value, attempt=entry.attempt)
