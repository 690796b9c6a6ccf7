"""The object store going away mid-run: the run goes on live and says what was not persisted."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import RecordingLog, task_identity

from airflow_pydantic_ai.durable import Attempt, AttemptOptions, DurableCapability, DurableStorageError, StepStore

STEPS = 4


@pytest.fixture
def outage_s3(monkeypatch):
    """A moto server of this test's own (it gets stopped), a bucket, and the filesystem Airflow gives
    for an AWS connection to it: the production path, with the clients' default retries and timeouts."""
    import boto3
    from airflow.sdk import ObjectStoragePath
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    bucket = f"outage-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ).create_bucket(Bucket=bucket)
    # Airflow caches a filesystem per connection id for the whole process: one id per test.
    conn_id = f"outage_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", _aws_connection(endpoint))
    base = ObjectStoragePath(f"s3://{conn_id}@{bucket}/cache")
    state = {"running": True}

    def stop() -> None:
        if state["running"]:
            server.stop()
            state["running"] = False

    yield base, stop
    stop()


@pytest.fixture
def black_hole(monkeypatch):
    """An endpoint that accepts connections and never answers: the worst outage for a client."""
    from airflow.sdk import ObjectStoragePath

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stopping.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    conn_id = f"hole_{uuid.uuid4().hex[:8]}"
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", _aws_connection(endpoint))
    yield ObjectStoragePath(f"s3://{conn_id}@bucket/cache")
    stopping.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def _aws_connection(endpoint: str) -> str:
    return json.dumps(
        {
            "conn_type": "aws",
            "login": "x",
            "password": "x",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )


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


def _store(base: Any, log: RecordingLog, timeout: float = 1.0) -> StepStore:
    return StepStore.for_task(base.fs, base.path, str(base), task_identity(), warn=log.warning, timeout=timeout)


def test_outage_mid_run_goes_on_live_and_counts_unpersisted_steps(outage_s3):
    base, stop = outage_s3
    log, calls = RecordingLog(), []
    run = Attempt.open(_store(base, log), attempt=1, log=log)
    result = _agent(stop_after_step=1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    run.log_summary()
    run.finish()

    assert result.output == "finished"
    assert calls == [0, 1, 2, 3]
    # Stored before the outage: steps 1-3 (model, tool work, model). Every later step is reported, once each:
    # the first two as failed writes, the rest as skipped while the store is unreachable.
    failed = [text for text in log.at("error") if text.startswith("Durable: could not store")]
    skipped = [text for text in log.at("error") if text.startswith("Durable: did not store")]
    assert len(failed) == 2 and len(skipped) == 4
    assert run.writer.not_persisted == 9 - 3
    assert any("tool work" in text for text in failed + skipped)
    assert any(re.search(r"store step \d+: model ", text) for text in failed + skipped)
    assert any("is unreachable (2 writes failed in a row" in text for text in log.at("error"))
    texts = log.texts
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 9 new steps (5 model, 4 tool)" in texts
    assert "Durable: 6 steps of this attempt were not persisted and will run again on a retry" in texts
    assert any("could not be deleted" in text for text in log.at("error")), "a failed clean-up is reported, not raised"


def test_outage_with_fail_mode_fails_the_attempt(outage_s3):
    base, stop = outage_s3
    log, calls = RecordingLog(), []
    run = Attempt.open(_store(base, log), attempt=1, log=log, options=AttemptOptions(storage_errors="fail"))
    with pytest.raises(DurableStorageError, match="durable_storage_errors = warn"):
        _agent(stop_after_step=0, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert calls == [0]


def test_unreachable_store_at_start_runs_everything_live(outage_s3):
    base, stop = outage_s3
    stop()
    log, calls = RecordingLog(), []
    run = Attempt.open(_store(base, log), attempt=2, log=log)
    result = _agent(stop_after_step=-1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert result.output == "finished" and calls == [0, 1, 2, 3]
    assert any("could not read the cache" in text for text in log.at("error"))


def test_a_failed_start_probe_skips_loading_and_writing(outage_s3):
    """The probe at the start already found the store unreachable: no step waits for a timeout again."""
    base, stop = outage_s3
    stop()
    log, calls = RecordingLog(), []
    run = Attempt.open(_store(base, log), attempt=2, log=log, options=AttemptOptions(probe=True))
    result = _agent(stop_after_step=-1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert result.output == "finished" and calls == [0, 1, 2, 3]
    assert run.writer.not_persisted == 9
    assert not [text for text in log.at("error") if text.startswith("Durable: could not store")], "no write was tried"
    assert len([text for text in log.at("error") if text.startswith("Durable: did not store")]) == 9


def test_writes_are_tried_again_once_the_store_may_be_back(outage_s3):
    base, stop = outage_s3
    log, calls = RecordingLog(), []
    run = Attempt.open(_store(base, log), attempt=1, log=log)
    run.writer.backoff.retry_after = 0.0  # the back-off is over at once: every write is tried
    _agent(stop_after_step=1, stop=stop, calls=calls).run_sync("go", capabilities=[DurableCapability(run)])
    assert len([text for text in log.at("error") if text.startswith("Durable: could not store")]) == 6


def test_an_endpoint_that_never_answers_costs_the_timeout_not_the_clients_retries(black_hole):
    """botocore (60 s read timeout, 5 attempts) under s3fs (5 retries) would wait ~25 minutes per write."""
    log, calls = RecordingLog(), []
    store = _store(black_hole, log, timeout=1.0)
    started = time.monotonic()
    run = Attempt.open(store, attempt=1, log=log)
    result = _agent(stop_after_step=-1, stop=lambda: None, calls=calls).run_sync(
        "go", capabilities=[DurableCapability(run)]
    )
    elapsed = time.monotonic() - started
    assert result.output == "finished" and calls == [0, 1, 2, 3]
    assert any("could not read the cache" in text and "TimeoutError" in text for text in log.at("error"))
    failed = [text for text in log.at("error") if text.startswith("Durable: could not store")]
    assert len(failed) == 2 and all("TimeoutError" in text for text in failed)
    assert run.writer.not_persisted == 9
    # A hang guard, not a speed test: one load and two writes, each bounded by the 1 s timeout.
    assert elapsed < 60, f"{elapsed:.0f} s"
