"""``airflow pydantic-ai cache export|verify``: turn a kept cache into a test fixture; check an edit replays.

``export DAG RUN TASK DEST`` writes one task instance's recorded steps as the task's fixture in the folder
``DEST`` (``durable/storage/fixtures.py``: readable JSON, no run id, registered secrets masked). A cache is
there to export when its task failed, or when a ``record`` run kept it (``durable_keep_cache=True``).

``verify DAG [RUN] [TASK] [--fixtures FOLDER]`` replays each agent task's kept cache (of run ``RUN``) or fixture
against the DAG's current code with no live call (``verify.py``) and prints, per task, "replays cleanly"
or the first step that diverges and why. Exit code 0 when every task verified replays cleanly, 1 otherwise.
"""

from __future__ import annotations

import os
from typing import Any

from airflow_pydantic_ai.cli.cache_shared import _configured, _describe, _identity, _open, _user_errors, _UserError
from airflow_pydantic_ai.cli.spellings import verify_target

__all__ = ["cache_export", "cache_verify"]


@_configured
def cache_export(args: Any) -> None:
    """Write a task instance's kept cache as a fixture (the task's file in folder ``args.dest``)."""
    from airflow_pydantic_ai.durable.read import write_fixture
    from airflow_pydantic_ai.tries.modes import mask

    with _user_errors():
        identity = _identity(args)
        entries = _open(identity).reader.entries()
        steps = sum(entry.is_step for entry in entries)
        if not steps:
            raise _UserError(f"the durable cache of {_describe(identity)} holds no readable step to export")
        path = write_fixture(args.dest, identity, entries, mask=mask)
        print(
            f"Exported {steps} steps of {_describe(identity)} to {path} ({path.stat().st_size} bytes). "
            f"Replay them with durable_fixtures={os.fspath(args.dest)!r} or the pytest plugin's durable_replay."
        )


@_configured
def cache_verify(args: Any) -> None:
    """Replay each agent task's kept cache or fixture against the current code of the DAG; exit 1 on a divergence."""
    with _user_errors():
        verify_target(args)
        if (args.run_id is None) == (args.fixtures is None):
            raise _UserError("give the run whose kept caches to verify (RUN_ID) or a fixture folder (--fixtures)")
        dag = _dag(args.dag_id, args.subdir)
        tasks = _agent_tasks(dag, args.task_id)
        verdicts = [_verify(dag, task, args) for task in tasks]
    for verdict in verdicts:
        print(verdict.line(dag.dag_id))
    if any(verdict.outcome != "clean" for verdict in verdicts):
        raise SystemExit(1)


def _dag(dag_id: str, subdir: str | None) -> Any:
    from airflow.configuration import conf

    from airflow_pydantic_ai import _compat

    folder = subdir or conf.get("core", "dags_folder")
    dags, errors = _compat.load_dags(os.path.expanduser(folder))
    if dag_id not in dags:
        problems = f"; import errors: {errors}" if errors else ""
        raise _UserError(f"no DAG {dag_id!r} in {folder} (give the file or folder with --subdir){problems}")
    return dags[dag_id]


def _agent_tasks(dag: Any, task_id: str | None) -> list[Any]:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    tasks = [task for task in dag.tasks if isinstance(task, AgentOperator)]
    if task_id is not None:
        tasks = [task for task in tasks if task.task_id == task_id]
        if not tasks:
            raise _UserError(f"{dag.dag_id} has no agent task {task_id!r}")
    if not tasks:
        raise _UserError(f"{dag.dag_id} has no agent task (AgentOperator, @task.pydantic_ai)")
    return tasks


def _verify(dag: Any, task: Any, args: Any) -> Any:
    import tempfile

    from airflow_pydantic_ai.cli.cache_shared import _base
    from airflow_pydantic_ai.durable import TaskIdentity
    from airflow_pydantic_ai.durable.errors import FixtureError
    from airflow_pydantic_ai.durable.read import read_fixture
    from airflow_pydantic_ai.testing.verify import Verdict, verify_task

    if args.fixtures is None:
        identity = TaskIdentity(dag.dag_id, args.run_id, task.task_id, args.map_index)
        store = _base().store_for(identity, warn=lambda message: None)
        return verify_task(dag, task, store, None, f"the kept cache at {store.location}", run_id=args.run_id)
    try:
        fixture = read_fixture(args.fixtures, dag.dag_id, task.task_id, args.map_index)
    except FixtureError as error:
        return Verdict(task.task_id, "error", str(error))
    with tempfile.TemporaryDirectory(prefix="pydantic-ai-verify-") as empty:
        from airflow_pydantic_ai.tries.settings import open_cache_base

        base = open_cache_base(f"file://{empty}")
        store = base.store_for(TaskIdentity(dag.dag_id, "verify", task.task_id, args.map_index))
        return verify_task(dag, task, store, fixture.entries, f"the fixture {fixture.path}")
