"""Which try of its task instance is running: the first, a retry, a cleared try, a resumed or rescheduled
one, or a try of a DAG run created again with an earlier run's id. Decided here, from what Airflow
tells the running task, and nowhere else on the Airflow side.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai import _compat

__all__ = [
    "ThisTry",
    "cache_belongs_to_this_dag_run",
    "first_try_of_a_series",
    "is_cleared_try",
    "retries_an_earlier_try",
]


def retries_an_earlier_try(ti: Any) -> bool:
    """Whether this try is Airflow's automatic retry of an earlier try of the same series.

    A series starts with the DAG run, and again with each clear: Airflow then sets ``max_tries`` to the
    last try number plus the task's ``retries``, so the first try of a series is the one where
    ``max_tries == try_number - 1 + retries``. Only a retry may return an output recorded by the try
    before it (that try finished, but Airflow never stored its success); a clear asks for a new run.
    When the numbers cannot be read, any try after the first counts as a retry.
    """
    try:
        try_number = int(ti.try_number)
    except (AttributeError, TypeError, ValueError):
        return False
    first = first_try_of_a_series(ti)
    return try_number > 1 and (first is None or not first)


def first_try_of_a_series(ti: Any) -> bool | None:
    """Whether this try starts a series (the DAG run's first, or the first after a clear); None when unknown.

    Airflow sets ``max_tries`` to the last try number plus the task's ``retries`` when a series starts,
    and leaves it alone on a retry.
    """
    try:
        try_number, max_tries, retries = int(ti.try_number), int(ti.max_tries), int(ti.task.retries or 0)
    except (AttributeError, TypeError, ValueError):
        return None
    return max_tries == try_number - 1 + retries


@dataclass(frozen=True)
class ThisTry:
    """What Airflow tells a running task about its place in its DAG run's history."""

    try_number: int
    resuming: bool = False
    """Resuming from a deferral, a human-input wait or a reschedule: the same try as the one that started,
    which may have recorded steps already (Airflow counts none of these as a new try)."""

    @classmethod
    def of(cls, ti: Any, *, resuming: bool = False, reschedules: int = 0) -> ThisTry:
        """``resuming``: the caller knows it resumes (the operator's approval callback does).

        ``reschedules``: how often Airflow rescheduled this try so far (the context's
        ``task_reschedule_count``, counted per try by the server): a retry policy's ``RESCHEDULE`` (3.4), a
        task raising ``AirflowRescheduleException``, a startup reschedule. A rescheduled try runs again
        under the same try number, after its earlier runs may have recorded steps.
        """
        return cls(
            try_number=int(getattr(ti, "try_number", 0) or 0),
            resuming=resuming or _compat.resumes_after_deferral(ti) or reschedules > 0,
        )


def cache_belongs_to_this_dag_run(tries: Collection[int], this_try: ThisTry) -> bool:
    """Whether a task instance's existing cache was written by this DAG run, not an earlier one with its run_id.

    A DAG run deleted and created again (a person, the REST API, the scheduler re-creating a deleted
    interval, ``dag.test()`` given an existing logical date) starts its task instances from try 1, and
    nothing in the task context tells the two runs apart otherwise. Airflow numbers tries so that every
    try of a task instance starts with a higher number than the tries before it: a retry, a clear of
    the task or of the run (the scheduler adds one to the try number), a retry on another worker. So a
    try can only find steps recorded by tries numbered below its own, or by itself when it resumes
    from a deferral, a human-input wait or a reschedule (which keeps the try number). Any other entry
    written by a try numbered the same or higher (every entry, on a first try 1) was written by an
    earlier run.

    ``tries``: the try numbers that wrote the entries found.
    """
    latest_own_try = this_try.try_number if this_try.resuming else this_try.try_number - 1
    return all(attempt <= latest_own_try for attempt in tries)


def is_cleared_try(ti: Any) -> bool:
    """Whether this try is the first of a series a clear started (not try 1, not a retry).

    Airflow sets ``max_tries = try_number - 1 + retries`` on a clear, and leaves it on a retry. When the
    numbers cannot be read, no try counts as cleared (nothing is discarded).
    """
    try:
        try_number = int(ti.try_number)
    except (AttributeError, TypeError, ValueError):
        return False
    return try_number > 1 and first_try_of_a_series(ti) is True
