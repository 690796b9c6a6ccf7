"""What the metadata database says about the task instances that own caches.

``list`` shows each cache's task instance state, ``gc`` deletes only the caches no task instance will
read again, and ``rm`` refuses while a try is running: all three ask here. Caches are matched to task
instances by their path segments, so an id that was too long and is stored shortened still finds its
task instance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from airflow_pydantic_ai.durable.catalog import CacheSummary
from airflow_pydantic_ai.durable.identity import TaskIdentity, id_segment, is_shortened

__all__ = [
    "DELETABLE_STATES",
    "IN_FLIGHT_STATES",
    "MISSING",
    "NO_TASK_INSTANCE",
    "state_of",
    "states_of",
]

MISSING = "missing"
"""The DAG run no longer exists."""
NO_TASK_INSTANCE = "no task instance"
"""The DAG run exists but has no such task instance (yet): kept by ``gc``."""
NO_STATE = "none"
"""A task instance without a state: cleared, so it will be scheduled (and read its cache) again."""

DELETABLE_STATES = frozenset({"success", "failed", "removed", "skipped", "upstream_failed", MISSING})
"""States whose task instance will not read its cache again (``failed`` is final: a pending retry is
``up_for_retry``). Anything else (queued, scheduled, running, deferred, up for retry, up for
reschedule, awaiting input, restarting, no state, unknown) keeps its cache."""
IN_FLIGHT_STATES = frozenset({"queued", "running", "restarting", "deferred"})
"""A try is on its way or running and may be writing into its cache."""


def _key(identity: TaskIdentity) -> tuple[str, ...]:
    return tuple(identity.segments())


def state_of(identity: TaskIdentity) -> str:
    """The state of one task instance: its state, :data:`NO_STATE`, :data:`NO_TASK_INSTANCE` or :data:`MISSING`."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.execute(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == identity.dag_id,
                TaskInstance.run_id == identity.run_id,
                TaskInstance.task_id == identity.task_id,
                TaskInstance.map_index == identity.map_index,
            )
        ).first()
        if found is not None:
            return _state_name(found[0])
        run = session.execute(
            select(DagRun.id).where(DagRun.dag_id == identity.dag_id, DagRun.run_id == identity.run_id)
        ).first()
    return NO_TASK_INSTANCE if run is not None else MISSING


def states_of(caches: Iterable[CacheSummary]) -> dict[tuple[str, ...], str]:
    """Cache segments -> the state of its task instance, for many caches in a few queries."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    caches = list(caches)
    if not caches:
        return {}
    dag_conditions = _run_conditions(DagRun.dag_id, DagRun.run_id, caches)
    task_conditions = _run_conditions(TaskInstance.dag_id, TaskInstance.run_id, caches)
    states: dict[tuple[str, ...], str] = {}
    runs: set[tuple[str, str]] = set()
    with create_session() as session:
        for chunk in _chunks(dag_conditions, 200):
            for dag_id, run_id in session.execute(select(DagRun.dag_id, DagRun.run_id).where(or_(*chunk))):
                runs.add((id_segment(dag_id), id_segment(run_id)))
        for chunk in _chunks(task_conditions, 200):
            rows = session.execute(
                select(
                    TaskInstance.dag_id,
                    TaskInstance.run_id,
                    TaskInstance.task_id,
                    TaskInstance.map_index,
                    TaskInstance.state,
                ).where(or_(*chunk))
            )
            for dag_id, run_id, task_id, map_index, state in rows:
                states[_key(TaskIdentity(dag_id, run_id, task_id, map_index))] = _state_name(state)
    result: dict[tuple[str, ...], str] = {}
    for cache in caches:
        if cache.segments in states:
            result[cache.segments] = states[cache.segments]
        elif (cache.segments[0], cache.segments[1]) in runs:
            result[cache.segments] = NO_TASK_INSTANCE
        else:
            result[cache.segments] = MISSING
    return result


def _run_conditions(dag_column: Any, run_column: Any, caches: list[CacheSummary]) -> list[Any]:
    """One condition per DAG run that owns a cache; a shortened id matches the ids starting with its start."""
    from sqlalchemy import and_

    pairs = sorted({(cache.segments[0], cache.segments[1]) for cache in caches})
    return [and_(_id_condition(dag_column, dag), _id_condition(run_column, run)) for dag, run in pairs]


def _id_condition(column: Any, segment: str) -> Any:
    if is_shortened(segment):
        return column.startswith(unquote(segment.split("%%", 1)[0]), autoescape=True)
    return column == unquote(segment)


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _state_name(state: object) -> str:
    if state is None:
        return NO_STATE
    return str(getattr(state, "value", state))
