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

from airflow_pydantic_ai.durable import CacheSummary, TaskIdentity, id_segment, is_shortened

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


_RUNS_PER_QUERY = 400
"""DAG runs per query: at most two bound parameters each, under SQLite's oldest limit (999)."""


def _key(identity: TaskIdentity) -> tuple[str, ...]:
    return tuple(identity.segments())


def _tables() -> tuple[Any, Any]:
    """Airflow's ``task_instance`` and ``dag_run`` tables.

    The queries select columns of the tables, not attributes of the ORM classes: an ORM attribute
    makes SQLAlchemy configure every mapper of Airflow's models first, which costs more than the
    queries themselves (about 0.7 s of ``cache list``'s start on a 2-core machine).
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance

    return TaskInstance.__table__, DagRun.__table__


def state_of(identity: TaskIdentity) -> str:
    """The state of one task instance: its state, :data:`NO_STATE`, :data:`NO_TASK_INSTANCE` or :data:`MISSING`."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    task_instance, dag_run = _tables()
    with create_session() as session:
        found = session.execute(
            select(task_instance.c.state).where(
                task_instance.c.dag_id == identity.dag_id,
                task_instance.c.run_id == identity.run_id,
                task_instance.c.task_id == identity.task_id,
                task_instance.c.map_index == identity.map_index,
            )
        ).first()
        if found is not None:
            return _state_name(found[0])
        run = session.execute(
            select(dag_run.c.id).where(dag_run.c.dag_id == identity.dag_id, dag_run.c.run_id == identity.run_id)
        ).first()
    return NO_TASK_INSTANCE if run is not None else MISSING


def states_of(caches: Iterable[CacheSummary]) -> dict[tuple[str, ...], str]:
    """Cache segments -> the state of its task instance, for many caches in a few queries.

    Two queries per 400 DAG runs that own caches (the runs that exist, and their task instances):
    six for 1,000 caches of 1,000 runs.
    """
    from airflow.utils.session import create_session
    from sqlalchemy import select

    caches = list(caches)
    if not caches:
        return {}
    task_instance, dag_run = _tables()
    pairs = sorted({(cache.segments[0], cache.segments[1]) for cache in caches})
    states: dict[tuple[str, ...], str] = {}
    runs: set[tuple[str, str]] = set()
    with create_session() as session:
        for chunk in _chunks(pairs, _RUNS_PER_QUERY):
            found_runs = select(dag_run.c.dag_id, dag_run.c.run_id).where(_of_runs(dag_run, chunk))
            for dag_id, run_id in session.execute(found_runs):
                runs.add((id_segment(dag_id), id_segment(run_id)))
            found_tasks = select(
                task_instance.c.dag_id,
                task_instance.c.run_id,
                task_instance.c.task_id,
                task_instance.c.map_index,
                task_instance.c.state,
            ).where(_of_runs(task_instance, chunk))
            for dag_id, run_id, task_id, map_index, state in session.execute(found_tasks):
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


def _of_runs(table: Any, pairs: list[tuple[str, str]]) -> Any:
    """The rows of ``table`` that belong to these DAG runs (path segments of dag and run ids).

    Per dag, its run ids in one ``IN`` list (one condition per run costs SQLAlchemy more to build
    than the query costs the database); a shortened id matches the ids starting with its start.
    """
    from sqlalchemy import and_, or_

    run_ids: dict[str, list[str]] = {}
    shortened = []
    for dag, run in pairs:
        if is_shortened(dag) or is_shortened(run):
            shortened.append(and_(_id_condition(table.c.dag_id, dag), _id_condition(table.c.run_id, run)))
        else:
            run_ids.setdefault(unquote(dag), []).append(unquote(run))
    return or_(
        *(and_(table.c.dag_id == dag_id, table.c.run_id.in_(runs)) for dag_id, runs in run_ids.items()), *shortened
    )


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
