"""What the metadata database says about the task instances that own caches, and what each state allows.

One set of *active* states for everything that deletes (the view's "Delete cache" and "Run live from
this step", ``cache rm``, ``cache gc``): a task instance in one of them has a try running, about to start,
or waiting to resume (a deferred task, one awaiting a person's input, one up for reschedule), and that
try reads its cache; deleting under it re-runs recorded steps live (billed model calls, repeated side
effects). ``gc`` deletes only caches whose task instance is in a final state.

The view reads its task instance's row here (:func:`task_row`), ``list`` and ``gc`` ask for the states of
many caches at once (:func:`states_of`). Caches are matched to task instances by their path segments,
so an id that was too long and is stored shortened still finds its task instance. Inside an Airflow 3.4
loop a task instance is found by its region (``region_id`` and ``region_index``, as Airflow keys it), so
each iteration's cache gets its own iteration's state; only the current try's row counts (3.4 keeps
archived tries beside it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.read import CacheSummary, id_segment, is_shortened, parse_place

__all__ = [
    "ACTIVE_STATES",
    "DELETABLE_STATES",
    "MISSING",
    "NO_TASK_INSTANCE",
    "TaskRow",
    "Waiting",
    "is_active",
    "state_of",
    "states_of",
    "task_row",
    "waiting_for",
]

MISSING = "missing"
"""The DAG run no longer exists."""
NO_TASK_INSTANCE = "no task instance"
"""The DAG run exists but has no such task instance (yet): kept by ``gc``."""
NO_STATE = "none"
"""A task instance without a state: cleared, so it will be scheduled (and read its cache) again."""

ACTIVE_STATES = frozenset(
    {
        "queued",
        "scheduled",
        "running",
        "restarting",
        "deferred",  # waits for a trigger (an approval on Airflow 3.1/3.2), then resumes and reads the cache
        "awaiting_input",  # Airflow 3.3: waits for a person's answer, then resumes and reads the cache
        "up_for_reschedule",
    }
)
"""A try runs, is about to start, or waits to resume: its cache must not be deleted (view, ``rm``, ``gc``)."""

DELETABLE_STATES = frozenset({"success", "failed", "removed", "skipped", "upstream_failed", MISSING})
"""States whose task instance will not read its cache again (``failed`` is final: a pending retry is
``up_for_retry``): what ``gc`` deletes. Anything else (the active states, up for retry, no state, no
task instance yet, a state this release does not know) keeps its cache."""


def is_active(state: str | None) -> bool:
    """Whether a task instance in ``state`` has a try running, about to start or waiting to resume."""
    return state in ACTIVE_STATES


@dataclass(frozen=True)
class TaskRow:
    """What the view shows of a task instance: its state (None: no state), latest try and operator (as
    Airflow's UI names it: ``@task.pydantic_ai`` for the decorator)."""

    state: str | None
    try_number: int
    operator: str


_RUNS_PER_QUERY = 400
"""DAG runs per query: at most two bound parameters each, under SQLite's oldest limit (999)."""


_OUTSIDE_ANY_REGION = uuid.UUID(int=0)
"""Airflow 3.4's ``region_id`` of a task instance outside any region."""


def _ti_keys(dag_id: str, run_id: str, task_id: str, region_id: Any, index: int) -> list[tuple[Any, ...]]:
    """A task instance as caches are matched: id segments, region (``""``: none), index.

    A cache without a region (outside any loop) matches by map index alone: on Airflow 3.4 the expansion
    of a mapped task is a region too, though its cache keeps the plain layout. A loop's cache matches by
    its region as well.
    """
    ids = (id_segment(dag_id), id_segment(run_id), id_segment(task_id))
    keys: list[tuple[Any, ...]] = [(*ids, "", int(index))]
    if region_id is not None and uuid.UUID(str(region_id)) != _OUTSIDE_ANY_REGION:
        keys.append((*ids, str(uuid.UUID(str(region_id))), int(index)))
    return keys


def _cache_key(segments: tuple[str, ...]) -> tuple[Any, ...]:
    map_index, region = parse_place(segments[3])
    if region is None:
        return (*segments[:3], "", map_index)
    return (*segments[:3], region.id, region.index)


def _current_tries(task_instance: Any) -> list[Any]:
    """Airflow 3.4 keeps each archived try of a task instance beside the current one (``working_set``)."""
    return [task_instance.c.working_set.is_(True)] if "working_set" in task_instance.c else []


def _place_columns(task_instance: Any) -> tuple[Any, Any]:
    """``(region_id, index)`` columns: Airflow 3.4 stores ``region_index`` (its ``map_index`` is an alias of it)
    and ``region_id``; older releases have ``map_index`` and no region."""
    if "region_index" in task_instance.c:
        return task_instance.c.region_id, task_instance.c.region_index
    return None, task_instance.c.map_index


def _tables() -> tuple[Any, Any]:
    """Airflow's ``task_instance`` and ``dag_run`` tables.

    The queries select columns of the tables, not attributes of the ORM classes: an ORM attribute
    makes SQLAlchemy configure every mapper of Airflow's models first, which costs more than the
    queries themselves (about 0.7 s of ``cache list``'s start on a 2-core machine).
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance

    return TaskInstance.__table__, DagRun.__table__


def task_row(identity: TaskIdentity) -> TaskRow | None:
    """The task instance's row (the one query both the view and ``rm`` ask); None when there is none."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return _task_row(session, identity)


def _row_where(task_instance: Any, identity: TaskIdentity) -> list[Any] | None:
    """The conditions that find the task instance's current try; None where it cannot exist (a loop's cache read
    where Airflow has no loops)."""
    region_column, index_column = _place_columns(task_instance)
    where = [
        task_instance.c.dag_id == identity.dag_id,
        task_instance.c.run_id == identity.run_id,
        task_instance.c.task_id == identity.task_id,
        index_column == (identity.region.index if identity.region is not None else identity.map_index),
        *_current_tries(task_instance),
    ]
    if identity.region is not None:
        if region_column is None:
            return None
        where.append(region_column == uuid.UUID(identity.region.id))
    return where


def _task_row(session: Any, identity: TaskIdentity) -> TaskRow | None:
    from sqlalchemy import select

    task_instance, _ = _tables()
    where = _row_where(task_instance, identity)
    if where is None:
        return None  # a loop's cache, read where Airflow has no loops
    found = session.execute(
        select(
            task_instance.c.state,
            task_instance.c.try_number,
            task_instance.c.custom_operator_name,
            task_instance.c.operator,
        ).where(*where)
    ).first()
    if found is None:
        return None
    state, try_number, custom_name, operator = found
    return TaskRow(
        state=None if state is None else _state_name(state),
        try_number=int(try_number or 0),
        operator=custom_name or operator or "",  # "@task.pydantic_ai", not the decorator's operator class
    )


def state_of(identity: TaskIdentity) -> str:
    """The state of one task instance: its state, :data:`NO_STATE`, :data:`NO_TASK_INSTANCE` or :data:`MISSING`."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    _, dag_run = _tables()
    with create_session() as session:
        row = _task_row(session, identity)
        if row is not None:
            return row.state or NO_STATE
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
    from sqlalchemy import null, select

    caches = list(caches)
    if not caches:
        return {}
    task_instance, dag_run = _tables()
    region_column, index_column = _place_columns(task_instance)
    pairs = sorted({(cache.segments[0], cache.segments[1]) for cache in caches})
    states: dict[tuple[Any, ...], str] = {}
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
                region_column if region_column is not None else null(),
                index_column,
                task_instance.c.state,
            ).where(_of_runs(task_instance, chunk), *_current_tries(task_instance))
            for dag_id, run_id, task_id, region_id, index, state in session.execute(found_tasks):
                for key in _ti_keys(dag_id, run_id, task_id, region_id, index):
                    states[key] = _state_name(state)
    result: dict[tuple[str, ...], str] = {}
    for cache in caches:
        key = _cache_key(cache.segments)
        if key in states:
            result[cache.segments] = states[key]
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


@dataclass(frozen=True)
class Waiting:
    """What a task instance that waits for a person (``awaiting_input`` or ``deferred``) asked about."""

    doubts: frozenset[str]
    """The refs of the calls in doubt its question asks about (empty: it asks for approvals)."""
    has_timeout: bool
    """Whether the wait ends at a time (the task's ``approval_timeout``)."""


def waiting_for(identity: TaskIdentity) -> Waiting:
    """What the task instance's pending question asks about (the arguments it resumes with) and whether it times
    out; nothing asked where it does not wait."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    task_instance, _ = _tables()
    where = _row_where(task_instance, identity)
    if where is None:
        return Waiting(frozenset(), False)
    with create_session() as session:
        found = session.execute(
            select(task_instance.c.next_kwargs, task_instance.c.trigger_timeout).where(*where)
        ).first()
    if found is None:
        return Waiting(frozenset(), False)
    kwargs = found.next_kwargs
    while isinstance(kwargs, dict) and "__var" in kwargs:  # kept serialized by some releases
        kwargs = kwargs["__var"]
    doubts = kwargs.get("doubts") if isinstance(kwargs, dict) else None
    if isinstance(kwargs, dict) and isinstance(kwargs.get("doubt"), dict):  # a try parked by release 0.2.0
        doubts = [kwargs["doubt"]]
    refs = set()
    for item in doubts if isinstance(doubts, list) else []:
        while isinstance(item, dict) and "__var" in item:
            item = item["__var"]
        if isinstance(item, dict) and item.get("ref"):
            refs.add(str(item["ref"]))
    return Waiting(frozenset(refs), found.trigger_timeout is not None)
