"""The test harness itself: real metadata DB, real ``dag.test()`` (on moto S3: tests/system/test_harness_s3.py)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value

pytestmark = pytest.mark.usefixtures("airflow_db")

NO_DELAY = dt.timedelta(0)


def _dag_id(name: str) -> str:
    # Unique per test run so that repeated runs and DB state never collide.
    return f"harness_{name}_{uuid.uuid4().hex[:8]}"


def test_retry_then_success_runs_in_one_dag_test_call(capfd):
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    def flaky(ti):
        print(f"flaky: try {ti.try_number} of {ti.max_tries + 1}")
        if ti.try_number == 1:
            raise RuntimeError("first try fails on purpose")
        return {"try": ti.try_number}

    with DAG(_dag_id("retry"), schedule=None) as dag:
        PythonOperator(task_id="flaky", python_callable=flaky, retries=1, retry_delay=NO_DELAY)

    dr = run_dag(dag)

    assert dr.state == "success"
    assert task_states(dr) == {("flaky", -1): ("success", 2)}
    assert xcom_value(dr, "flaky") == {"try": 2}
    # Under dag.test() task output and task logs go to this process's stdout.
    out = capfd.readouterr().out
    assert "flaky: try 1 of 2" in out
    assert "flaky: try 2 of 2" in out
    assert "first try fails on purpose" in out


def test_always_failing_task_fails_the_run():
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    def boom():
        raise RuntimeError("always fails")

    with DAG(_dag_id("fail"), schedule=None) as dag:
        PythonOperator(task_id="boom", python_callable=boom)

    dr = run_dag(dag)

    assert dr.state == "failed"
    assert task_states(dr) == {("boom", -1): ("failed", 1)}
    with pytest.raises(KeyError):
        xcom_value(dr, "boom")


def test_mapped_task_has_one_xcom_per_map_index():
    from airflow.sdk import DAG, task

    with DAG(_dag_id("mapped"), schedule=None) as dag:

        @task
        def square(x: int) -> tuple[int, int]:
            return x, x * x

        square.expand(x=[1, 2, 3])

    dr = run_dag(dag)

    assert dr.state == "success"
    assert task_states(dr) == {("square", i): ("success", 1) for i in range(3)}
    # Tuples survive: xcom_value decodes with the Task SDK's serde, as a task would.
    assert [xcom_value(dr, "square", map_index=i) for i in range(3)] == [(1, 1), (2, 4), (3, 9)]
