"""Under the CeleryExecutor a durable try whose cache is on S3 (the moto server) says nothing about reaching it:
every worker does. The local-cache half: ``tests/dags/test_local_cache_warning.py``."""

from __future__ import annotations

import uuid

import pytest
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.operator_runs import CALLS, make_dag, summaries, tools
from tests.helpers.s3 import S3Bucket

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("airflow_db")]


def test_an_s3_cache_under_celery_does_not_warn(
    s3_bucket: S3Bucket, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", s3_bucket.url("agent-cache"))
    CALLS.clear()
    with make_dag(f"s3_cache_under_celery_{uuid.uuid4().hex[:8]}") as dag:
        AgentOperator(task_id="triage", prompt="Triage ticket 42.", model_id="test", toolsets=[tools()], durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)]
    assert out.count(f"Durable: the cache of this task instance is {s3_bucket.url('agent-cache')}") == 2
    assert "local disk" not in out and "durable_cache_shared" not in out
