"""A durable try whose cache is on the worker's own disk, under each ``[core] executor``: under one that runs tasks
on several hosts, each try warns once, at its start, that a retry elsewhere would not see the cache.

Real ``dag.test()`` runs with the executor set as a deployment sets it (``AIRFLOW__CORE__EXECUTOR``; ``dag.test()``
itself runs the tries in this process whatever the setting) and ``durable_cache_path`` unset, so the cache is the
default ``file://$AIRFLOW_HOME/pydantic_ai/durable_cache``. The same try on S3 under Celery:
``tests/system/test_local_cache_warning_s3.py``; every executor spelling: ``tests/unit/test_cache_reach.py``.
"""

from __future__ import annotations

import uuid

import pytest
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.operator_runs import CALLS, make_dag, summaries, tools

pytestmark = pytest.mark.usefixtures("airflow_db")

WARNING = "is on this worker's local disk, and the executor"


def _run_a_try_that_fails_then_succeeds(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The operator's two tries (the first fails in a tool) under the current config; the task log of both."""
    from airflow_pydantic_ai.operators.agent import AgentOperator

    monkeypatch.delenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", raising=False)
    CALLS.clear()
    with make_dag(f"local_cache_warning_{uuid.uuid4().hex[:8]}") as dag:
        AgentOperator(task_id="triage", prompt="Triage ticket 42.", model_id="test", toolsets=[tools()], durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)], "the retry replays as without the warning"
    return out


@pytest.mark.parametrize("executor", ["CeleryExecutor", "KubernetesExecutor"])
def test_a_local_cache_under_a_distributed_executor_warns_at_the_start_of_each_try(
    executor: str, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.tries.settings import default_cache_path

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)

    out = _run_a_try_that_fails_then_succeeds(capfd, monkeypatch)

    lines = out.splitlines()
    warnings = [index for index, line in enumerate(lines) if WARNING in line]
    assert len(warnings) == 2, "one WARNING per try"
    for index in warnings:
        line = lines[index]
        assert "[warning" in line
        assert f"the cache file://{default_cache_path()}/" in line
        assert f"the executor {executor} runs tasks on several hosts" in line
        assert "a retry that runs on another worker will not see this cache" in line
        assert "Set [pydantic_ai] durable_cache_path to storage every worker reaches" in line
        assert "set [pydantic_ai] durable_cache_shared = True to silence this warning" in line
        # At the start of the try: right after the line naming the cache, before any step.
        assert "Durable: the cache of this task instance is" in lines[index - 1]
        assert "Durable: found" in lines[index + 1]


def test_a_local_cache_under_the_local_executor_does_not_warn(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")

    out = _run_a_try_that_fails_then_succeeds(capfd, monkeypatch)

    assert out.count("Durable: the cache of this task instance is") == 2
    assert WARNING not in out


def test_a_local_cache_declared_shared_does_not_warn_under_celery(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_SHARED", "True")

    out = _run_a_try_that_fails_then_succeeds(capfd, monkeypatch)

    assert out.count("Durable: the cache of this task instance is") == 2
    assert WARNING not in out
