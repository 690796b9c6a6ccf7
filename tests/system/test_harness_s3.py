"""The test harness on the local moto S3 server: ObjectStoragePath in a real ``dag.test()`` task."""

from __future__ import annotations

import uuid

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.s3
def test_object_storage_path_on_moto_s3(s3_bucket):
    from airflow.sdk import DAG, ObjectStoragePath, task

    url_file = s3_bucket.url("x/y.json")
    url_dir = s3_bucket.url("x/")
    url_streamed = s3_bucket.url("x/streamed.bin")
    # ':' and '+' appear in run ids, which end up in keys.
    url_odd = s3_bucket.url("runs/manual__2025-01-01T00:00:00+00:00/a.json")

    with DAG(f"harness_s3_{uuid.uuid4().hex[:8]}", schedule=None) as dag:

        @task
        def roundtrip() -> dict:
            # The connection lookup happens in the constructor: build paths at run time.
            path = ObjectStoragePath(url_file)
            path.write_bytes(b'{"a": 1}')
            read_back = path.read_bytes()

            streamed = ObjectStoragePath(url_streamed)
            with streamed.open("wb") as f:
                f.write(b"part1-")
                f.write(b"part2")

            odd = ObjectStoragePath(url_odd)
            odd.write_bytes(b"odd")

            listing = sorted(p.name for p in ObjectStoragePath(url_dir).iterdir())
            return {
                "read_back": read_back.decode(),
                "listing": listing,
                "odd": odd.read_bytes().decode(),
                "exists": odd.exists(),
            }

        roundtrip()

    dr = run_dag(dag)

    assert dr.state == "success", task_states(dr)
    assert xcom_value(dr, "roundtrip") == {
        "read_back": '{"a": 1}',
        "listing": ["streamed.bin", "y.json"],
        "odd": "odd",
        "exists": True,
    }
    assert s3_bucket.list_keys() == [
        "runs/manual__2025-01-01T00:00:00+00:00/a.json",
        "x/streamed.bin",
        "x/y.json",
    ]
    assert s3_bucket.read("x/y.json") == b'{"a": 1}'
    assert s3_bucket.read("x/streamed.bin") == b"part1-part2"
