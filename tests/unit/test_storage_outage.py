"""The object store going away mid-run: the run goes on live and says what was not persisted."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.durable import DurableCapability, DurableRun, DurableStorageError, StepStore, TaskIdentity

STEPS = 4


@pytest.fixture
def outage_s3():
    """A moto server of this test's own (it gets stopped), a bucket, and an s3fs filesystem on it."""
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"outage-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ).create_bucket(Bucket=bucket)
    fs = s3fs.S3FileSystem(
        key="x",
        secret="x",
        skip_instance_cache=True,
        client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
        config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": 1, "read_timeout": 2},
    )
    fs.retries = 1  # s3fs's own retry loop; one try is enough to see the failure
    state = {"running": True}

    def stop() -> None:
        if state["running"]:
            server.stop()
            state["running"] = False

    yield fs, bucket, stop
    stop()


def _agent(stop_after_step: int, stop: Any, calls: list[int]) -> Agent[Any, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for message in messages if any(part.part_kind == "tool-return" for part in message.parts))
        if done < STEPS:
            return ModelResponse(parts=[ToolCallPart("work", {"step": done}, tool_call_id=f"c{done}")])
        return ModelResponse(parts=[TextPart("finished")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def work(step: int) -> str:
        calls.append(step)
        if step == stop_after_step:
            stop()
        return f"result {step}"

    return agent


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _add(self, level: str, msg: str, *args: Any) -> None:
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("info", msg, *args)

    def warning(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("warning", msg, *args)

    def error(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("error", msg, *args)

    def debug(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("debug", msg, *args)


def _store(fs: Any, bucket: str, log: Log) -> StepStore:
    identity = TaskIdentity("dag", "manual__2026-11-22T04:00:00+00:00", "task")
    return StepStore.for_task(fs, f"{bucket}/cache", f"s3://{bucket}/cache", identity, warn=log.warning)


def test_outage_mid_run_goes_on_live_and_counts_unpersisted_steps(outage_s3):
    fs, bucket, stop = outage_s3
    log, calls = Log(), []
    run = DurableRun.open(_store(fs, bucket, log), attempt=1, log=log)
    result = _agent(stop_after_step=1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    run.log_summary()
    run.finish()

    assert result.output == "finished"
    assert calls == [0, 1, 2, 3]
    # Stored before the outage: model step 1, tool 0, model step 2. Everything from tool 1 on failed.
    errors = [text for level, text in log.lines if level == "error"]
    failed_writes = [text for text in errors if text.startswith("Durable: could not store")]
    assert len(failed_writes) == run.not_persisted == 9 - 3
    assert any("tool work" in text for text in failed_writes) and any("model step" in text for text in failed_writes)
    texts = [text for _, text in log.lines]
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 9 new steps (5 model, 4 tool)" in texts
    assert "Durable: 6 steps of this attempt were not persisted and will run again on a retry" in texts
    assert any("could not be deleted" in text for text in errors), "a failed clean-up is reported, not raised"


def test_outage_with_fail_mode_fails_the_attempt(outage_s3):
    fs, bucket, stop = outage_s3
    log, calls = Log(), []
    run = DurableRun.open(_store(fs, bucket, log), attempt=1, log=log, storage_errors="fail")
    with pytest.raises(DurableStorageError, match="durable_storage_errors = warn"):
        _agent(stop_after_step=0, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert calls == [0]


def test_unreachable_store_at_start_runs_everything_live(outage_s3):
    fs, bucket, stop = outage_s3
    stop()
    log, calls = Log(), []
    run = DurableRun.open(_store(fs, bucket, log), attempt=2, log=log)
    result = _agent(stop_after_step=-1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert result.output == "finished" and calls == [0, 1, 2, 3]
    assert any(level == "error" and "could not read the cache" in text for level, text in log.lines)
