"""One try of a batched durable agent in a process of its own, to be killed at a chosen point (issue 38).

``python -m tests.helpers.batch_try JOB_JSON`` (cwd and PYTHONPATH = the repo root) runs one attempt of a durable
agent on a ``file://`` cache, as ``tests.helpers.durable.DurableHarness`` does (``DurableRun.open``, then
``run_agent`` inside ``ending()``), with pydantic-ai's ``BatchModelRequests`` on the real ``openai`` or
``anthropic`` SDK against a local batch server (``tests/helpers/batch_servers.py``, in the test's process).

The agent asks the model once, calls the ``lookup`` tool (which appends ``tool ATTEMPT`` to ``job["marker"]``: its
side effect), and asks the model again: two model requests, so two batches when nothing is submitted twice.

``job["kill_at"]`` makes the process SIGKILL itself (a real crash: no ``finally``, no flush) at the first:

- ``before-submission``: the first request is about to be submitted (``ModelStep.before_live``);
- ``after-submission``: its ticket is recorded (``PendingRequest.submitted`` returned);
- ``during-wait``: pydantic-ai checks the batch's status (the batch is in progress);
- ``after-result``: the first model step's response is recorded (``ModelStep.record`` returned).

``job["background"]``: OpenAI's background mode (``openai_background=True``) instead of a batch.

A kill while the result downloads is made by the test (``server.hold_results()``, then SIGKILL once the server
counts the download as started). The result (output, the log lines) is written as JSON to ``job["result"]``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

POINTS = ("before-submission", "after-submission", "during-wait", "after-result")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _model(job: dict[str, Any]) -> Any:
    from tests.helpers.batch_wire import API_KEY

    if job["provider"] == "openai":
        from pydantic_ai.models.openai import OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIResponsesModel("gpt-4o", provider=OpenAIProvider(base_url=job["base_url"], api_key=API_KEY))
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(base_url=job["base_url"], api_key=API_KEY))


def _kill_at(point: str | None) -> None:
    """Hook the kill point into the classes it lives in (this process only)."""
    if point is None:
        return
    from airflow_pydantic_ai.durable.steps import model_step, pending_step

    if point == "before-submission":
        before_live = model_step.ModelStep.before_live

        def killed_before_live(self: Any) -> None:
            _die()
            before_live(self)

        model_step.ModelStep.before_live = killed_before_live  # type: ignore[method-assign]
    elif point == "after-submission":
        submitted = pending_step.PendingRequest.submitted.__func__  # type: ignore[attr-defined]

        def submitted_then_killed(cls: Any, *args: Any, **kwargs: Any) -> Any:
            submitted(cls, *args, **kwargs)
            _die()

        pending_step.PendingRequest.submitted = classmethod(submitted_then_killed)  # type: ignore[method-assign,assignment]
    elif point == "during-wait":
        for model_class in _model_classes():
            status = model_class.batch_status

            async def killed_status(self: Any, batch: Any, status: Any = status) -> Any:
                _die()
                return await status(self, batch)

            model_class.batch_status = killed_status  # type: ignore[method-assign]
    elif point == "after-result":
        record = model_step.ModelStep.record

        def recorded_then_killed(self: Any, *args: Any, **kwargs: Any) -> None:
            record(self, *args, **kwargs)
            _die()

        model_step.ModelStep.record = recorded_then_killed  # type: ignore[method-assign]
    elif point != "during-download":
        raise ValueError(f"unknown kill point {point!r}: one of {POINTS} or during-download")


def _model_classes() -> list[Any]:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIResponsesModel

    return [OpenAIResponsesModel, AnthropicModel]


def run(job: dict[str, Any]) -> None:
    from datetime import timedelta

    import fsspec
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import BatchModelRequests
    from tests.helpers.durable import RecordingLog, task_identity

    from airflow_pydantic_ai.durable import AttemptOptions, DurableRun, StepStore, run_agent

    _kill_at(job.get("kill_at"))
    if job.get("background"):
        # OpenAI's background mode instead of a batch: pydantic-ai polls every 2 s; 0.05 s here.
        from pydantic_ai.models.openai import _responses_model

        _responses_model._OPENAI_BACKGROUND_POLL_INTERVAL = 0.05  # type: ignore[attr-defined]
        agent = Agent(_model(job), name="long", model_settings={"openai_background": True})  # type: ignore[typeddict-unknown-key]
    else:
        batching = BatchModelRequests(
            max_wait=timedelta(seconds=0.05),
            poll_interval=timedelta(seconds=0.05),
            max_poll_interval=timedelta(seconds=0.2),
            max_resubmissions=int(job.get("max_resubmissions", 1)),
        )
        agent = Agent(_model(job), name="nightly", capabilities=[batching])
    attempt = int(job["attempt"])

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up."""
        with open(job["marker"], "a") as marker:
            marker.write(f"tool {attempt}\n")
        return f"found {q}"

    base = job["base"]
    log = RecordingLog()
    store = StepStore.for_task(fsspec.filesystem("file"), base, f"file://{base}", task_identity(), warn=log.warning)
    durable_run = DurableRun.open(store, attempt=attempt, log=log, options=AttemptOptions())
    result: dict[str, Any] = {"output": None, "error": None}
    try:
        with durable_run.ending():
            result["output"] = run_agent(durable_run, agent, "look it up").output
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
    result["log"] = log.texts
    Path(job["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
