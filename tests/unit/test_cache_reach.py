"""A local durable cache under an executor that runs tasks on several hosts: the decision from ``[core] executor``
in every spelling Airflow accepts, and the one WARNING a try logs at its start (``cache_reach.py``).

The whole try, run by ``dag.test()`` under each executor setting, is in ``tests/dags/test_local_cache_warning.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import s3fs
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable import StepStore
from airflow_pydantic_ai.durable.errors import DurableConfigError
from airflow_pydantic_ai.tries.cache_reach import (
    configured_executors,
    executor_on_several_hosts,
    warn_when_a_retry_may_miss_the_cache,
)
from airflow_pydantic_ai.tries.settings import cache_declared_shared


@pytest.mark.parametrize(
    "config",
    [
        "CeleryExecutor",
        "KubernetesExecutor",
        "CeleryKubernetesExecutor",
        "LocalKubernetesExecutor",
        "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
        "airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor",
        "airflow.providers.edge3.executors.EdgeExecutor",
        "edge:airflow.providers.edge3.executors.edge_executor.EdgeExecutor",
        "airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor",
        "my_company.executors.HomeGrownExecutor",  # unknown: counted as distributed (see the docstring)
        " CeleryExecutor , LocalExecutor ",
        "celery:CeleryExecutor,LocalExecutor",
        "CeleryExecutor;team_a=LocalExecutor",
        "LocalExecutor;team_a=KubernetesExecutor,LocalExecutor",  # a team's default runs on several hosts
    ],
)
def test_executors_that_run_tasks_on_several_hosts(config: str) -> None:
    assert executor_on_several_hosts(config) is not None


@pytest.mark.parametrize(
    "config",
    [
        "LocalExecutor",
        "SequentialExecutor",
        "DebugExecutor",
        "airflow.executors.local_executor.LocalExecutor",
        "my_local:LocalExecutor",
        "my_local:airflow.executors.local_executor.LocalExecutor",
        "",  # Airflow's own default, LocalExecutor
        "LocalExecutor,CeleryExecutor",  # a task that names no executor runs on the first, the default
        "LocalExecutor;team_a=LocalExecutor,CeleryExecutor",
    ],
)
def test_executors_that_run_tasks_on_one_host(config: str) -> None:
    assert executor_on_several_hosts(config) is None


def test_a_task_that_names_its_executor_is_judged_by_that_executor() -> None:
    config = "LocalExecutor,celery:airflow.providers.celery.executors.celery_executor.CeleryExecutor"

    assert (
        executor_on_several_hosts(config, "celery")
        == "celery:airflow.providers.celery.executors.celery_executor.CeleryExecutor"
    )
    assert executor_on_several_hosts(config, "CeleryExecutor") is not None
    assert executor_on_several_hosts(config, "airflow.providers.celery.executors.celery_executor.CeleryExecutor")
    assert executor_on_several_hosts(config, "LocalExecutor") is None
    assert executor_on_several_hosts("CeleryExecutor,LocalExecutor", "LocalExecutor") is None
    # A name no entry matches (Airflow refuses to run it): every entry counts.
    assert executor_on_several_hosts("LocalExecutor,CeleryExecutor", "NoSuchExecutor") == "CeleryExecutor"


def test_configured_executors_read_aliases_module_paths_and_team_lists() -> None:
    executors = configured_executors("LocalExecutor, celery:my.module.CeleryExecutor;team_a=KubernetesExecutor")

    assert [(e.spelling, e.alias, e.class_name, e.default) for e in executors] == [
        ("LocalExecutor", None, "LocalExecutor", True),
        ("celery:my.module.CeleryExecutor", "celery", "CeleryExecutor", False),
        ("KubernetesExecutor", None, "KubernetesExecutor", True),
    ]


def _store(tmp_path: Path) -> StepStore:
    return local_store(tmp_path / "cache", task_identity())


def _s3_store() -> StepStore:
    # No request is made: the store is only asked whether its filesystem is local.
    fs = s3fs.S3FileSystem(anon=True, skip_instance_cache=True)
    return StepStore.for_task(fs, "bucket/cache", "s3://bucket/cache", task_identity())


def test_a_local_cache_under_celery_logs_one_warning_naming_both_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    log = RecordingLog()

    warned = warn_when_a_retry_may_miss_the_cache(_store(tmp_path), shared=False, task=None, log=log)

    [warning] = log.at("warning")
    assert warned == "CeleryExecutor"
    assert log.lines == [("warning", warning)]
    assert "executor CeleryExecutor runs tasks on several hosts" in warning
    assert f"file://{tmp_path / 'cache'}" in warning
    assert "a retry that runs on another worker will not see this cache" in warning
    assert "[pydantic_ai] durable_cache_path" in warning and "s3://conn_id@bucket/prefix" in warning
    assert "[pydantic_ai] durable_cache_shared = True" in warning


@pytest.mark.parametrize("executor", ["LocalExecutor", "my_local:LocalExecutor"])
def test_a_local_cache_under_a_single_host_executor_logs_nothing(
    executor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    log = RecordingLog()

    assert warn_when_a_retry_may_miss_the_cache(_store(tmp_path), shared=False, task=None, log=log) is None
    assert log.lines == []


def test_a_cache_declared_shared_or_on_object_storage_logs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "KubernetesExecutor")
    log = RecordingLog()

    assert warn_when_a_retry_may_miss_the_cache(_store(tmp_path), shared=True, task=None, log=log) is None
    assert warn_when_a_retry_may_miss_the_cache(_s3_store(), shared=False, task=None, log=log) is None
    assert log.lines == []


def test_the_task_executor_argument_decides_in_a_hybrid_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor,CeleryExecutor")
    log = RecordingLog()

    on_local = warn_when_a_retry_may_miss_the_cache(
        _store(tmp_path), shared=False, task=SimpleNamespace(executor=None), log=log
    )
    on_celery = warn_when_a_retry_may_miss_the_cache(
        _store(tmp_path), shared=False, task=SimpleNamespace(executor="CeleryExecutor"), log=log
    )

    assert (on_local, on_celery) == (None, "CeleryExecutor")
    assert len(log.at("warning")) == 1


def test_durable_cache_shared_is_read_as_a_boolean(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_declared_shared() is False
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_SHARED", "True")
    assert cache_declared_shared() is True
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_SHARED", "every worker")
    with pytest.raises(DurableConfigError, match=r"\[pydantic_ai\] durable_cache_shared must be True or False"):
        cache_declared_shared()
