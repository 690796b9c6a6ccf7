"""Durable AgentOperator tasks with bad configuration, and how a test checks that they failed at their start.

Each task's exception is recorded by the operator subclass below: Airflow 3.1's ``dag.test()`` leaves
``context["exception"]`` out of the failure callback's context, so a callback cannot see it there.
Used by tests/dags/test_bad_input.py and tests/system/test_bad_input_s3.py; a test module imports the
``reset`` fixture (autouse) to start each test with empty records and a default cache path.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import make_dag, task_states

CALLS: Counter[str] = Counter()


ERRORS: dict[str, str] = {}


FIX_HINT = "file:///absolute/folder"


def counting_agent(task_id: str) -> Agent[Any, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS[f"{task_id}:model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("side_effect", {}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def side_effect() -> str:
        CALLS[f"{task_id}:tool"] += 1
        return "done"

    return agent


def recording_operator() -> type:
    """``AgentOperator`` that records the exception its ``execute`` raises in ``ERRORS``, by task id."""
    from airflow_pydantic_ai.operators.agent import AgentOperator

    class RecordingAgentOperator(AgentOperator):
        def execute(self, context: Any) -> Any:
            try:
                return super().execute(context)
            except Exception as error:
                ERRORS[self.task_id] = f"{type(error).__name__}: {error}"
                raise

    return RecordingAgentOperator


@pytest.fixture(autouse=True)
def reset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    CALLS.clear()
    ERRORS.clear()
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path / 'default-cache'}")
    monkeypatch.delenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS", raising=False)


def recording_dag(dag_id: str, tasks: dict[str, str | None], retries: int = 0):
    """One durable AgentOperator per entry: task_id -> durable_cache_path override (None: the config)."""

    operator = recording_operator()
    with make_dag(dag_id, retries=retries) as dag:
        for task_id, override in tasks.items():
            operator(
                task_id=task_id,
                prompt="Do the thing once.",
                agent=counting_agent(task_id),
                durable=True,
                durable_cache_path=override,
            )
    return dag


@contextlib.contextmanager
def immutable(folder: Path):
    """A folder that even root cannot write into (``chattr +i``); skips where that is not possible."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not available: cannot make a folder root cannot write to")
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not supported here ({done.stderr.strip()}); root can write anywhere else")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def assert_failed_at_start(dr: Any, out: str, task_id: str, *needles: str) -> None:
    assert task_states(dr)[(task_id, -1)] == ("failed", 1)
    assert CALLS[f"{task_id}:model"] == 0 and CALLS[f"{task_id}:tool"] == 0, "nothing ran before the check"
    error = ERRORS.get(task_id, "")
    for needle in needles:
        assert needle in error, f"{task_id}: {needle!r} not in {error!r}"
    assert "DurableConfigError" in error, error
    # The attempt failed before any step: it still reports, with nothing replayed or executed.
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 0 new steps (0 model, 0 tool)" in out
