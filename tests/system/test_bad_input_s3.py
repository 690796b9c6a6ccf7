"""A bucket name S3 refuses, under a real ``dag.test()`` run against the local moto S3 server."""

from __future__ import annotations

import pytest
from tests.helpers.airflow_run import run_dag
from tests.helpers.bad_config import (
    ERRORS,
    assert_failed_at_start,
    recording_dag,
    reset,  # noqa: F401 - an autouse fixture: imported, it applies here
)

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.s3
def test_an_invalid_bucket_name_is_a_configuration_error_not_an_outage(s3_bucket, monkeypatch, capfd):
    """S3 refuses the name before sending anything: no amount of waiting or retrying fixes that."""
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"s3://{s3_bucket.CONN_ID}@Bad_Bucket!/cache")
    dr = run_dag(recording_dag("bad_input_bucket_name", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path", "cannot write to", "bucket name")
    assert "unreachable" not in ERRORS["agent"]
