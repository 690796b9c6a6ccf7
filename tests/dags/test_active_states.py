"""No cache is deleted under an active task instance: the view's two buttons, ``cache rm`` and ``cache gc``.

A task instance waiting for a person's approval is ``awaiting_input`` on Airflow 3.3 and ``deferred`` on
3.1/3.2; deleting its cache then, and approving, would run the recorded model step live again (a billed
call). Each active state is set on a real task instance in the metadata DB; the view's app answers
through FastAPI's test client (the caller given through FastAPI's dependency override, Airflow's own
auth manager deciding), the commands run in-process as ``airflow pydantic-ai cache`` runs them.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.airflow_run import make_dag, run_dag
from tests.helpers.durable import local_store
from tests.helpers.view import view_client, view_query

from airflow_pydantic_ai.cache_tools import task_states
from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.storage.entry import StepEntry

pytestmark = pytest.mark.usefixtures("airflow_db")

# Written out, not read from the code under test: each must be refused.
ACTIVE = ["awaiting_input", "deferred", "queued", "scheduled", "running", "up_for_reschedule", "restarting"]


def _known(state: str) -> str:
    from airflow.utils.state import TaskInstanceState

    if state not in {known.value for known in TaskInstanceState}:
        pytest.skip(f"this Airflow has no {state} state (awaiting_input is new in 3.3)")
    return state


@pytest.fixture(scope="module")
def identity() -> TaskIdentity:
    """A real task instance (a finished DAG run of one task) whose state each test sets."""
    from airflow.providers.standard.operators.python import PythonOperator

    with make_dag(f"active_{uuid.uuid4().hex[:8]}", retries=0) as dag:
        PythonOperator(task_id="agent", python_callable=lambda: None)
    dr = run_dag(dag)
    return TaskIdentity(dag.dag_id, dr.run_id, "agent", -1)


@pytest.fixture
def cache(identity: TaskIdentity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two recorded steps of ``identity`` under the configured base."""
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    store = local_store(base, identity)
    store.put(StepEntry(kind="model", key="a" * 64, step=1, attempt=1, label="test", payload={"response": {}}))
    store.put(StepEntry(kind="result", key="output", step=1, attempt=1, label="", payload={"value": 1}))
    yield Path(store.root)
    _set_state(identity, "success")


def _set_state(identity: TaskIdentity, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.dag_id == identity.dag_id,
                TaskInstance.run_id == identity.run_id,
                TaskInstance.task_id == identity.task_id,
            )
            .values(state=state)
        )


def _entries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if not path.name.startswith("."))


def test_every_airflow_state_is_active_deletable_or_waits_for_a_retry() -> None:
    from airflow.utils.state import TaskInstanceState

    # A state Airflow adds later must be placed on purpose (until then gc keeps its caches).
    runs_again = {"up_for_retry"}
    for state in TaskInstanceState:
        places = [state.value in task_states.ACTIVE_STATES, state.value in task_states.DELETABLE_STATES]
        places.append(state.value in runs_again)
        assert places.count(True) == 1, f"{state.value} is in {places.count(True)} sets"
    assert not task_states.ACTIVE_STATES & task_states.DELETABLE_STATES
    assert "deferred" in task_states.ACTIVE_STATES
    if "awaiting_input" in {state.value for state in TaskInstanceState}:  # Airflow 3.3
        assert "awaiting_input" in task_states.ACTIVE_STATES


def _rm_args(identity: TaskIdentity, **overrides: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "dag_id": identity.dag_id,
        "run_id": identity.run_id,
        "task_id": identity.task_id,
        "map_index": identity.map_index,
        "from_step": None,
        "dry_run": False,
        "yes": True,
        "force": False,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("state", ACTIVE)
def test_cache_rm_and_gc_keep_the_cache_of_an_active_task_instance(
    state: str, identity: TaskIdentity, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_pydantic_ai.cli.cache_command import cache_gc, cache_rm

    _set_state(identity, _known(state))
    with pytest.raises(SystemExit) as refused:
        cache_rm(_rm_args(identity))
    with pytest.raises(SystemExit) as refused_from_step:
        cache_rm(_rm_args(identity, from_step=1))
    cache_gc(argparse.Namespace(older_than=None, dry_run=False, yes=True, output="json"))

    assert f"is {state}" in str(refused.value.code) and "--force" in str(refused.value.code)
    assert f"is {state}" in str(refused_from_step.value.code)
    assert _entries(cache) == ["model-" + "a" * 64 + ".json", "result-output.json"]
    assert "Nothing to delete" in capsys.readouterr().err


@pytest.mark.parametrize("state", ["failed", "success"])
def test_gc_deletes_a_finished_task_instances_cache_whatever_its_entry_kinds(
    state: str, identity: TaskIdentity, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_pydantic_ai.cli.cache_command import cache_gc

    for name in _entries(cache):
        if name.startswith("model-"):
            (cache / name).unlink()  # what a deletion cut short after success leaves: the result entry only
    _set_state(identity, state)

    cache_gc(argparse.Namespace(older_than=None, dry_run=False, yes=True, output="json"))

    assert not cache.exists() or _entries(cache) == []
    assert "Deleted 1 cache" in capsys.readouterr().err


@pytest.fixture
def view() -> Any:
    return view_client()


@pytest.mark.parametrize("state", ACTIVE)
def test_the_views_buttons_are_refused_while_the_task_instance_is_active(
    state: str, identity: TaskIdentity, cache: Path, view: Any
) -> None:
    query = view_query(identity)
    _set_state(identity, _known(state))

    page = view.get(f"/?{query}")
    answers = [
        view.get(f"/confirm?{query}&action=delete"),
        view.get(f"/confirm?{query}&action=fork&step=1"),
        view.post(f"/delete?{query}", headers={"authorization": "Bearer x"}),
        view.post(f"/fork?{query}&step=1", headers={"authorization": "Bearer x"}),
    ]

    assert page.status_code == 200, page.text
    assert "deleting is refused" in page.text and "Delete cache" not in page.text
    for answer in answers:
        assert answer.status_code == 409, (answer.request.url, answer.status_code, answer.text[:300])
        assert f"The task instance is {state}" in answer.text
    assert len(_entries(cache)) == 2
