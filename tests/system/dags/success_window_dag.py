"""The DAG that tests/system/test_success_window.py copies into a fresh dags folder.

Not a test module: the real dag-processor parses it and the LocalExecutor runs its tasks. Each task
runs the same two-tool durable agent and, on its first try only, SIGKILLs its own task process at
one point of the success window (named by its task id):

- before Airflow has stored the success (a retry follows): ``after_output_recorded`` (the output is
  in the cache, not yet in XCom), ``after_xcom_push``, ``before_return`` (``execute`` has finished);
- after Airflow has stored the success (no retry): ``mid_deletion`` (the success callback has deleted
  3 entries), ``after_deletion`` (the callback has deleted the cache).

``SUCCESS_WINDOW_MARKER`` names a file the model and the tool append ``<model|tool> <task> <try> <pid>``
to whenever they really run.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, get_current_context
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.durable.attempt.attempt import Attempt
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.operators.agent import AgentOperator

DAG_ID = "durable_success_window"
BEFORE_SUCCESS = ("after_output_recorded", "after_xcom_push", "before_return")
AFTER_SUCCESS = ("mid_deletion", "after_deletion")
STEPS = 2
DELETED_BEFORE_KILL = 3


class _Kill:
    point: str | None = None  # armed on a task's first try only
    deleted = 0


def _maybe_kill(point: str) -> None:
    if _Kill.point == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _mark(kind: str) -> None:
    ti = get_current_context()["ti"]
    with open(os.environ["SUCCESS_WINDOW_MARKER"], "a") as handle:
        handle.write(f"{kind} {ti.task_id} {ti.try_number} {os.getpid()}\n")


def work(step: int) -> str:
    """One step of work with a side effect."""
    _mark("tool")
    return f"done-{step}"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    _mark("model")
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if len(returns) < STEPS:
        return ModelResponse(parts=[ToolCallPart("work", {"step": len(returns)}, tool_call_id=f"c{len(returns)}")])
    return ModelResponse(parts=[TextPart("final: " + "|".join(str(part.content) for part in returns))])


_record_output, _finish, _remove_objects = Attempt.record_output, Attempt.finish, StepStore._remove_objects


def _record_output_then_maybe_kill(self: Attempt, value: Any) -> None:
    _record_output(self, value)
    _maybe_kill("after_output_recorded")


def _finish_then_maybe_kill(self: Attempt) -> None:
    _finish(self)
    _maybe_kill("after_deletion")


def _remove_then_maybe_kill(self: StepStore, names: Any) -> None:
    # Every deletion of the cache goes through ``_remove_objects`` (one by one on a local disk, as here).
    for name in names:
        _remove_objects(self, [name])
        _Kill.deleted += 1
        if _Kill.deleted == DELETED_BEFORE_KILL:
            _maybe_kill("mid_deletion")


Attempt.record_output = _record_output_then_maybe_kill  # type: ignore[method-assign]
Attempt.finish = _finish_then_maybe_kill  # type: ignore[method-assign]
StepStore._remove_objects = _remove_then_maybe_kill  # type: ignore[method-assign]


class KilledOnce(AgentOperator):
    """An AgentOperator whose first try kills its own process at the point named by its task id."""

    def execute(self, context: Any) -> Any:
        _Kill.point = self.task_id if context["ti"].try_number == 1 else None
        output = super().execute(context)
        _maybe_kill("before_return")
        return output

    def _delete_cache_after_success(self, run: Attempt) -> None:
        _maybe_kill("after_xcom_push")
        super()._delete_cache_after_success(run)


with DAG(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    for point in (*BEFORE_SUCCESS, *AFTER_SUCCESS):
        KilledOnce(
            task_id=point,
            prompt="Do the work.",
            agent=Agent(FunctionModel(answer), tools=[work]),
            durable=True,
            retries=1,
            retry_delay=timedelta(seconds=0),
        )
