"""The pytest plugin (entry point ``pytest11``, read through ``airflow_pydantic_ai.testing``): test an agent DAG
in CI with no LLM, from recorded fixtures.

The ``durable_replay`` fixture runs a DAG, or one of its tasks, with ``dag.test()``; every agent task
(``AgentOperator``, ``@task.pydantic_ai``) runs in ``durable_mode = replay`` from a fixture folder: no
model request and no tool side effect, and a prompt, tool or model changed without recording again fails
the task naming what changed. ``pytest --durable-record`` runs the same tests live
(``durable_mode = record``) and rewrites the fixtures::

    DAG_FILE = Path(__file__).parents[1] / "my_agent_dag.py"
    FIXTURES = Path(__file__).parent / "fixtures" / "my_agent_dag"

    def test_triage(durable_replay):
        result = durable_replay(DAG_FILE, task_id="triage", fixtures=FIXTURES)
        assert result.state == "success"
        assert result.xcom["priority"] == "high"

The plugin imports nothing of Airflow until a test uses the fixture, so it costs nothing in other test
sessions. The test session needs an Airflow home of its own (``AIRFLOW_HOME`` set before Airflow is
imported, e.g. in ``conftest.py``); the plugin creates the metadata DB's tables there if it has none.
Each test's durable cache is a folder under the test's ``tmp_path``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_pydantic_ai.testing import ReplayFailed

__all__ = ["DurableReplay", "DurableTestResult", "ReplayFailed", "durable_replay", "pytest_addoption"]

REPORT_KEY = "durable_report"
"""The XCom key of a durable task's report, returned when the task pushed one."""
_RECORD_OPTION = "--durable-record"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("airflow-pydantic-ai", "airflow-pydantic-ai durable fixtures")
    group.addoption(
        _RECORD_OPTION,
        action="store_true",
        default=False,
        help="Run agent tasks live (durable_mode = record) and rewrite their fixtures, instead of replaying them",
    )


@dataclass(frozen=True)
class DurableTestResult:
    """What one ``dag.test()`` run of the agent tasks left: the run's state and each agent task's XComs."""

    state: str
    run_id: str
    task_id: str | None
    xcoms: dict[str, Any] = field(default_factory=dict)
    """Each agent task's return value, by task id."""
    reports: dict[str, Any] = field(default_factory=dict)
    """Each agent task's ``durable_report`` XCom, by task id, for the tasks that pushed one."""

    @property
    def xcom(self) -> Any:
        """The return value of the one task run (``task_id=``), or of the DAG's only agent task."""
        return self.xcoms[self._one_task()]

    @property
    def report(self) -> Any:
        """The ``durable_report`` of that task, or None."""
        return self.reports.get(self._one_task())

    def _one_task(self) -> str:
        if self.task_id is not None:
            return self.task_id
        if len(self.xcoms) == 1:
            return next(iter(self.xcoms))
        raise ValueError(f"this run has {len(self.xcoms)} agent tasks ({', '.join(self.xcoms)}); read .xcoms[task_id]")


@dataclass
class DurableReplay:
    """Runs agent DAGs in replay mode (or record mode, with ``--durable-record``) from fixture folders."""

    record: bool
    cache_base: Path
    """The durable cache base of the test (a folder of its own)."""

    @property
    def mode(self) -> str:
        return "record" if self.record else "replay"

    def __call__(
        self,
        dag: Any,
        task_id: str | None = None,
        *,
        fixtures: str | os.PathLike[str],
        dag_id: str | None = None,
        live_tools: Collection[str] = (),
        run_conf: dict[str, Any] | None = None,
    ) -> DurableTestResult:
        """Run ``dag`` (a DAG, or the file that defines it) or only its task ``task_id`` with ``dag.test()``.

        Raises :class:`ReplayFailed` (an ``AssertionError``) when an agent task had a step that was not
        recorded: its message names the step, what changed and the prompt's diff.

        :param fixtures: The fixture folder of this DAG (one file per agent task).
        :param dag_id: Which DAG of the file, when it defines several.
        :param live_tools: Tools that run live even in replay mode (pure functions under test).
        :param run_conf: The DAG run's ``conf``.
        """
        from airflow_pydantic_ai import _compat

        _compat.ensure_metadata_db()
        whole = _load(dag, dag_id)
        target = whole.partial_subset(task_ids=[task_id], include_upstream=False) if task_id else whole
        agents = [task for task in target.tasks if _is_agent_task(task)]
        if not agents:
            raise ValueError(f"{target.dag_id} has no agent task (AgentOperator, @task.pydantic_ai) to run")
        from airflow_pydantic_ai.tries.modes import listening_for_replay_misses

        misses: list[str] = []
        with (
            _agent_tasks_in_mode(agents, self.mode, Path(fixtures), live_tools),
            listening_for_replay_misses(lambda task, message: misses.append(f"task {task}: {message}")),
        ):
            _compat.store_dag(target)
            dag_run = target.test(run_conf=run_conf)
        if misses:
            raise ReplayFailed("\n\n".join(misses))
        xcoms: dict[str, Any] = {}
        reports: dict[str, Any] = {}
        for task in agents:
            xcoms[task.task_id] = _compat.read_xcom(target.dag_id, dag_run.run_id, task.task_id, "return_value")
            report = _compat.read_xcom(target.dag_id, dag_run.run_id, task.task_id, REPORT_KEY)
            if report is not None:
                reports[task.task_id] = report
        return DurableTestResult(
            state=str(dag_run.state), run_id=dag_run.run_id, task_id=task_id, xcoms=xcoms, reports=reports
        )


@pytest.fixture
def durable_replay(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DurableReplay:
    """Run an agent DAG, or one task, in replay mode from a fixture folder (record mode with ``--durable-record``)."""
    cache = tmp_path / "durable-cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{cache}")
    return DurableReplay(record=bool(request.config.getoption(_RECORD_OPTION)), cache_base=cache)


def _load(dag: Any, dag_id: str | None) -> Any:
    if not isinstance(dag, (str, os.PathLike)):
        return dag
    from airflow_pydantic_ai import _compat

    dags, errors = _compat.load_dags(os.fspath(dag))
    if errors:
        raise ValueError(f"{os.fspath(dag)} does not import: {errors}")
    if dag_id is not None:
        if dag_id not in dags:
            raise ValueError(f"{os.fspath(dag)} defines no DAG {dag_id!r} (it defines {', '.join(sorted(dags))})")
        return dags[dag_id]
    if len(dags) != 1:
        raise ValueError(f"{os.fspath(dag)} defines {len(dags)} DAGs ({', '.join(sorted(dags))}); pass dag_id=")
    return next(iter(dags.values()))


def _is_agent_task(task: Any) -> bool:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    return isinstance(task, AgentOperator)


_ARGUMENTS = ("durable_mode", "durable_fixtures", "durable_live_tools")


@contextmanager
def _agent_tasks_in_mode(tasks: list[Any], mode: str, fixtures: Path, live_tools: Collection[str]) -> Iterator[None]:
    """Set the mode and the fixture folder on the agent tasks for one run; put their own values back after."""
    values = {"durable_mode": mode, "durable_fixtures": str(fixtures), "durable_live_tools": tuple(live_tools)}
    saved = [{name: getattr(task, name) for name in _ARGUMENTS} for task in tasks]
    try:
        for task in tasks:
            for name, value in values.items():
                setattr(task, name, value)
        yield
    finally:
        for task, own in zip(tasks, saved, strict=True):
            for name, value in own.items():
                setattr(task, name, value)
