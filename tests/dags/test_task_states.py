"""The task instance states the cache commands show and act on, read from a real metadata DB.

``cache list`` and ``cache gc`` ask for the states of every cache at once: a few queries, however many
caches, and a cache whose ids were too long for a path segment (stored shortened) still finds its
task instance.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.helpers.airflow_run import run_dag

from airflow_pydantic_ai.cache_tools import task_states
from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.storage.catalog import CacheSummary

pytestmark = pytest.mark.usefixtures("airflow_db")

# Longer than a path segment (200 characters): stored as a readable start and a digest.
LONG_DAG_ID = f"states_{uuid.uuid4().hex[:8]}_" + "x" * 220
SHORT_DAG_ID = f"states_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def run_ids() -> dict[str, str]:
    """One finished DAG run per dag id: ``ok`` succeeded, ``boom`` failed, ``square`` mapped over two values."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG, task

    def boom() -> None:
        raise RuntimeError("fails on purpose")

    runs = {}
    for dag_id in (LONG_DAG_ID, SHORT_DAG_ID):
        with DAG(dag_id, schedule=None) as dag:
            PythonOperator(task_id="ok", python_callable=lambda: None)
            PythonOperator(task_id="boom", python_callable=boom)

            @task
            def square(x: int) -> int:
                return x * x

            square.expand(x=[1, 2])

        runs[dag_id] = run_dag(dag).run_id
    return runs


@pytest.fixture
def queries() -> Iterator[list[str]]:
    """The SQL statements the metadata DB receives while the test runs."""
    from airflow import settings
    from sqlalchemy import event

    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(settings.engine, "before_cursor_execute", record)
    yield statements
    event.remove(settings.engine, "before_cursor_execute", record)


def _cache(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> CacheSummary:
    identity = TaskIdentity(dag_id, run_id, task_id, map_index)
    segments = tuple(identity.segments())
    return CacheSummary(
        segments=(segments[0], segments[1], segments[2], segments[3]),
        identity=TaskIdentity.from_segments(segments),
        entries=1,
        model_steps=1,
        tool_steps=0,
        size=1,
        last_written=None,
        root="unused",
        location="unused",
    )


def test_states_of_many_caches_come_in_two_queries_also_for_shortened_ids(
    run_ids: dict[str, str], queries: list[str]
) -> None:
    long_run, short_run = run_ids[LONG_DAG_ID], run_ids[SHORT_DAG_ID]
    expected = {
        _cache(LONG_DAG_ID, long_run, "ok"): "success",
        _cache(LONG_DAG_ID, long_run, "boom"): "failed",
        _cache(LONG_DAG_ID, long_run, "square", 1): "success",
        _cache(LONG_DAG_ID, long_run, "square", 7): task_states.NO_TASK_INSTANCE,
        _cache(LONG_DAG_ID, "deleted_run", "ok"): task_states.MISSING,
        _cache(SHORT_DAG_ID, short_run, "boom"): "failed",
        _cache(SHORT_DAG_ID, short_run, "square", 0): "success",
        _cache(SHORT_DAG_ID, short_run, "gone"): task_states.NO_TASK_INSTANCE,
        _cache(SHORT_DAG_ID, "deleted_run", "ok"): task_states.MISSING,
    }
    assert next(iter(expected)).identity is None  # the long dag id really is stored shortened

    states = task_states.states_of(expected)

    assert states == {cache.segments: state for cache, state in expected.items()}
    assert len(queries) == 2, queries


def test_states_of_a_thousand_runs_come_in_a_few_queries(run_ids: dict[str, str], queries: list[str]) -> None:
    caches = [_cache(SHORT_DAG_ID, run_ids[SHORT_DAG_ID], "ok")]
    caches += [_cache(SHORT_DAG_ID, f"deleted_run_{number}", "ok") for number in range(999)]

    states = task_states.states_of(caches)

    assert states[caches[0].segments] == "success"
    assert [states[cache.segments] for cache in caches[1:]] == [task_states.MISSING] * 999
    assert len(queries) == 6, queries  # runs and task instances, 400 runs per query


def test_state_of_one_task_instance(run_ids: dict[str, str]) -> None:
    run_id = run_ids[SHORT_DAG_ID]

    assert task_states.state_of(TaskIdentity(SHORT_DAG_ID, run_id, "boom", -1)) == "failed"
    assert task_states.state_of(TaskIdentity(SHORT_DAG_ID, run_id, "square", 1)) == "success"
    assert task_states.state_of(TaskIdentity(SHORT_DAG_ID, run_id, "gone", -1)) == task_states.NO_TASK_INSTANCE
    assert task_states.state_of(TaskIdentity(SHORT_DAG_ID, "deleted_run", "ok", -1)) == task_states.MISSING
