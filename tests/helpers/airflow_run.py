"""Run a DAG defined inside a test with ``dag.test()`` and inspect the result.

Requires the ``airflow_db`` fixture (a migrated metadata DB).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG


def make_dag(dag_id: str, retries: int = 1, **default_args: Any) -> DAG:
    """A DAG for one ``dag.test()`` run: no schedule, ``retries`` tries after the first with no delay between
    them (``default_args`` adds to or overrides those). Use it as ``with make_dag("my_dag") as dag:``."""
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        default_args={"retries": retries, "retry_delay": timedelta(0), **default_args},
    )


def current_try() -> int:
    """The try number of the task instance running now (call it inside a task or a tool: 1 on the first try)."""
    from airflow.sdk import get_current_context

    return get_current_context()["ti"].try_number


def sync_dag(dag: DAG) -> None:
    """Store ``dag`` (serialized DAG + version) in the metadata DB under the ``dags-folder`` bundle.

    ``dag.test()`` only syncs DAGs it finds in bundle folders; one defined in a test
    function must be written explicitly or ``dag.test()`` finds no DagVersion.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from tests.helpers.compat import dagbag_api

    DagBag, sync_bag_to_db = dagbag_api()
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def run_dag(dag: DAG, **test_kwargs: Any) -> DagRun:
    """Store ``dag`` and run it once in-process with ``dag.test()``; return the DagRun.

    ``dag.test()`` does not raise when a task fails: assert on ``dr.state``. Retries run
    inside this call (use ``retry_delay=timedelta(0)``), in this same process.
    """
    sync_dag(dag)
    return dag.test(**test_kwargs)


def task_states(dr: DagRun) -> dict[tuple[str, int], tuple[str | None, int]]:
    """``{(task_id, map_index): (state, try_number)}`` for every task instance of ``dr``.

    ``try_number`` is 1-based: the number of the last try that ran (2 after one retry).
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state, TaskInstance.try_number)
            .where(TaskInstance.dag_id == dr.dag_id, TaskInstance.run_id == dr.run_id)
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ).all()
    return {
        (task_id, map_index): (str(state) if state is not None else None, try_number)
        for task_id, map_index, state, try_number in rows
    }


_MISSING = object()


def xcom_value(
    dr: DagRun, task_id: str, map_index: int = -1, key: str = "return_value", default: Any = _MISSING
) -> Any:
    """The (deserialized) XCom ``key`` pushed by ``task_id``/``map_index`` in ``dr``.

    Raises ``KeyError`` when there is none, unless ``default`` is given.

    Values are decoded the way a task would read them (the Task SDK XCom backend, i.e.
    ``airflow.sdk.serde``): ``XComModel.deserialize_value`` would return tuples and other
    serde-encoded values nested in a dict as raw ``{"__classname__": ...}`` dicts.
    """
    from airflow.models.xcom import XComModel
    from airflow.sdk.execution_time.xcom import XCom
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dr.dag_id,
                XComModel.run_id == dr.run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == map_index,
                XComModel.key == key,
            )
        ).one_or_none()
        if row is None:
            if default is _MISSING:
                raise KeyError(f"no XCom {key!r} for {dr.dag_id}.{task_id}[{map_index}] in {dr.run_id}")
            return default
        return XCom.deserialize_value(row)


def clear_and_rerun(dag: DAG, dr: DagRun, task_id: str, map_index: int = -1) -> tuple[str | None, int]:
    """Clear a finished task instance of ``dr`` (as the UI or ``airflow tasks clear`` do), then run its next
    try in this process as the scheduler would: the try number goes up by one. Returns (state, try_number).

    The DAG run is kept (``dag.test()`` would delete it and create a new one with the same run_id).
    """
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    query = _current_try(dr, task_id, map_index)
    previous_try = clear_task(dr, task_id, map_index)
    with create_session() as session:
        ti = session.scalars(query).one()
        if ti.try_number == previous_try:  # Airflow 3.1-3.3: the scheduler adds one when it queues the try
            ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        _run_task(ti=ti, task=dag.task_dict[task_id])
    with create_session() as session:
        ti = session.scalars(query).one()
        return (str(ti.state) if ti.state is not None else None, ti.try_number)


def clear_task(dr: DagRun, task_id: str, map_index: int = -1) -> int:
    """Clear a finished task instance of ``dr`` (as the UI or ``airflow tasks clear`` do) and nothing more:
    it waits to be scheduled. Returns the try number it had before the clear."""
    from airflow.models.taskinstance import clear_task_instances
    from airflow.utils.session import create_session

    with create_session() as session:
        cleared = session.scalars(_current_try(dr, task_id, map_index)).one()
        previous_try = int(cleared.try_number)
        clear_task_instances([cleared], session, dag_run_state=False)
    return previous_try


def _current_try(dr: DagRun, task_id: str, map_index: int) -> Any:
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    query = select(TaskInstance).where(
        TaskInstance.dag_id == dr.dag_id,
        TaskInstance.run_id == dr.run_id,
        TaskInstance.task_id == task_id,
        TaskInstance.map_index == map_index,
    )
    if hasattr(TaskInstance, "working_set"):
        # Airflow 3.4 archives the cleared attempt and creates its successor (the next try number).
        query = query.where(TaskInstance.working_set.is_(True))
    return query
