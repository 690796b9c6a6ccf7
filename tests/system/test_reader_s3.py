"""The read side of a cache on the local moto S3 server: sizes and times come from the listing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from tests.helpers.cache_fixture import IDENTITY
from tests.helpers.durable import RecordingLog

from airflow_pydantic_ai.durable import Attempt, DurableCapability, StepStore
from airflow_pydantic_ai.durable.storage.reader import CacheReader


@pytest.mark.s3
def test_reader_on_s3_lists_sizes_and_times_from_the_listing(s3_bucket: Any) -> None:
    from airflow.sdk import ObjectStoragePath

    base = ObjectStoragePath(s3_bucket.url("agent-cache"))
    store = StepStore.for_task(base.fs, base.path, str(base), IDENTITY)
    log = RecordingLog()
    run = Attempt.open(store, attempt=1, log=log)
    Agent(TestModel(), output_type=str).run_sync("hello", capabilities=[DurableCapability(run)])
    reader = CacheReader(store)

    steps = reader.steps()

    assert [step.kind for step in steps] == ["model"]
    assert steps[0].recorded_at is not None
    assert steps[0].size == len(s3_bucket.read(s3_bucket.list_keys()[0]))
    assert reader.delete_all() == 1
    assert s3_bucket.list_keys() == []
