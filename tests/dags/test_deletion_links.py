"""Issue 35 (8), the edges: ``cache gc`` goes on past a cache it refuses, and ``cache rm --from-step`` refuses a link.

Two finished task instances of a real DAG run; the folder of one task is a symbolic link to files elsewhere. ``gc``
deletes the other cache, names the refused one on stderr and exits non-zero; ``rm --from-step`` through the link
deletes nothing. The commands run in-process as ``airflow pydantic-ai cache`` runs them.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.airflow_run import make_dag, run_dag
from tests.helpers.durable import local_store

from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.storage.entry import StepEntry

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture(scope="module")
def identities() -> tuple[TaskIdentity, TaskIdentity]:
    """Two task instances of one finished (successful) DAG run."""
    from airflow.providers.standard.operators.python import PythonOperator

    with make_dag(f"links_{uuid.uuid4().hex[:8]}", retries=0) as dag:
        PythonOperator(task_id="linked", python_callable=lambda: None)
        PythonOperator(task_id="plain", python_callable=lambda: None)
    dr = run_dag(dag)
    assert dr.state == "success"
    return TaskIdentity(dag.dag_id, dr.run_id, "linked", -1), TaskIdentity(dag.dag_id, dr.run_id, "plain", -1)


def _record(base: Path, identity: TaskIdentity, steps: int = 2) -> Path:
    store = local_store(base, identity)
    for step in range(1, steps + 1):
        store.put(StepEntry(kind="tool", key=f"k{step}", step=step, attempt=1, label="lookup", payload={"n": step}))
    return Path(store.root)


def _linked_cache(base: Path, identity: TaskIdentity, elsewhere: Path) -> Path:
    """``identity``'s cache whose task folder is a symbolic link to ``elsewhere``, with two steps and a file there
    the cache never wrote."""
    task_folder = Path(local_store(base, identity).root).parent
    task_folder.parent.mkdir(parents=True, exist_ok=True)
    elsewhere.mkdir()
    task_folder.symlink_to(elsewhere, target_is_directory=True)
    root = _record(base, identity)
    (root / "precious.txt").write_text("keep me")
    return root


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_gc_deletes_the_other_caches_names_the_refused_one_and_fails(
    identities: tuple[TaskIdentity, TaskIdentity],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow_pydantic_ai.cli import cache_command

    linked, plain = identities
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    linked_root = _record(base, linked)
    plain_root = _record(base, plain)
    elsewhere = tmp_path / "elsewhere"
    listing = cache_command._catalog

    def listed_then_linked(found_in: Any) -> Any:
        # gc's listing never walks into a linked folder: the link appears between the listing and the deletion
        # (someone moved the task's folder away and linked it back), and "linked" sorts first.
        caches = listing(found_in)
        linked_root.parent.rename(elsewhere)
        linked_root.parent.symlink_to(elsewhere, target_is_directory=True)
        (linked_root / "precious.txt").write_text("keep me")
        return caches

    monkeypatch.setattr(cache_command, "_catalog", listed_then_linked)

    with pytest.raises(SystemExit) as failed:
        cache_command.cache_gc(argparse.Namespace(older_than=None, dry_run=False, yes=True, output="table"))

    out, err = capsys.readouterr()
    assert not plain_root.exists() or _names(plain_root) == [], "the cache after the refused one is deleted"
    assert len(_names(elsewhere / "-1")) == 3, "nothing behind the link is deleted"
    assert "error: kept file://" in err and "/linked/" in err and "is a symbolic link" in err, err
    assert "Deleted 1 cache" in out, out
    assert "1 cache refused" in str(failed.value.code)


def test_rm_from_step_refuses_a_cache_reached_through_a_link(
    identities: tuple[TaskIdentity, TaskIdentity], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.cli.cache_command import cache_rm

    linked, _ = identities
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    root = _linked_cache(base, linked, tmp_path / "elsewhere")
    kept = _names(root)
    args = argparse.Namespace(
        dag_id=linked.dag_id,
        run_id=linked.run_id,
        task_id=linked.task_id,
        map_index=linked.map_index,
        from_step=1,
        dry_run=False,
        yes=True,
        force=False,
    )

    with pytest.raises(SystemExit) as refused:
        cache_rm(args)

    assert "is a symbolic link" in str(refused.value.code) and "nothing was deleted" in str(refused.value.code)
    assert _names(root) == kept


def test_the_views_fork_refuses_a_cache_reached_through_a_link(
    identities: tuple[TaskIdentity, TaskIdentity], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.view import view_client, view_query

    linked, _ = identities
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    root = _linked_cache(base, linked, tmp_path / "elsewhere")
    kept = _names(root)

    answer = view_client().post(f"/fork?{view_query(linked)}&step=1", headers={"authorization": "Bearer x"})

    assert answer.status_code == 409, answer.text[:300]
    assert "is a symbolic link" in answer.text
    assert _names(root) == kept
