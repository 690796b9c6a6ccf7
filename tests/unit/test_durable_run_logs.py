"""What a durable run logs: the summary through a standard ``logging.Logger``, and never the prompt at INFO.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

import logging

import fsspec
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import counting_agent

from airflow_pydantic_ai.durable import Attempt, DurableCapability, StepStore


def test_logs_never_contain_the_prompt_at_info(harness):
    secret_prompt = "the launch code is 0000-hunter2"
    harness.run(counting_agent({}), secret_prompt)
    assert not any("hunter2" in line for _, line in harness.logs[-1].lines)


def test_python_logging_logger_works(harness, caplog):
    caplog.set_level(logging.INFO)
    log = logging.getLogger("durable-test")
    store = StepStore.for_task(fsspec.filesystem("file"), harness.base, "file://x", harness.identity, warn=log.warning)
    run = Attempt.open(store, attempt=1, log=log)
    Agent(TestModel()).run_sync("hi", capabilities=[DurableCapability(run)])
    run.log_summary()
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 1 new steps (1 model, 0 tool)" in caplog.text
