"""What a durable cache costs on S3, counted on the wire (botocore's events) against the local moto server.

A replay of a cache of any length reads it in at most (tries that wrote it + 2) requests: one LIST, the
packs, and the single entries of a try that ended without packing (killed). The try's own bookkeeping
(start probe, per-try note, recorded output) is a constant, the same at every N. Recording stays one PUT
per step, without a GET or a LIST per step; deleting the cache after success is a few batched requests.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits
from tests.helpers.durable import RecordingLog, task_identity
from tests.helpers.s3 import S3Bucket, S3Server

from airflow_pydantic_ai.durable import Attempt, AttemptOptions, StepStore, run_agent

pytestmark = pytest.mark.s3
READS = ("ListObjectsV2", "ListObjects", "GetObject", "HeadObject")


def build_agent(steps: int, fail_at: int | None = None) -> Agent[Any, str]:
    """``steps`` sequential tool calls, then an answer; the call number ``fail_at`` raises (this try fails there)."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(part, ToolReturnPart) for message in messages for part in message.parts)
        if done < steps:
            return ModelResponse(parts=[ToolCallPart("work", {"step": done}, tool_call_id=f"call-{done}")])
        return ModelResponse(parts=[TextPart(f"done {steps}")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def work(step: int) -> str:
        """One step of work."""
        if step == fail_at:
            raise ConnectionError("the service is down")
        return f"result {step} " + "x" * 1000

    return agent


class Attempts:
    """Tries of one task instance on a bucket, each with its requests counted apart."""

    def __init__(self, server: S3Server, bucket: S3Bucket, name: str) -> None:
        self.fs, self.sent = server.counting_filesystem()
        self.bucket, self.identity = bucket, task_identity("requests_dag", name)
        self.attempt = 0

    def store(self) -> StepStore:
        return StepStore.for_task(self.fs, f"{self.bucket.name}/cache", f"s3://{self.bucket.name}/cache", self.identity)

    def run(self, steps: int, *, fail_at: int | None = None, fail_after: bool = False, killed: bool = False) -> Any:
        """One try as the operator makes it (probe, load, run, record the output, finish after success);
        ``fail_after``: the run finished and the try failed after it (an XCom push); ``killed``: no ending."""
        self.attempt += 1
        self.sent.clear()
        log = RecordingLog()
        run = Attempt.open(self.store(), attempt=self.attempt, log=log, options=AttemptOptions(probe=True))
        limits = UsageLimits(request_limit=None)
        try:
            if killed:
                run_agent(run, build_agent(steps, fail_at), "go", usage_limits=limits)
                return run
            with run.ending():
                result = run_agent(run, build_agent(steps, fail_at), "go", usage_limits=limits)
                run.record_output(result.output)
                if fail_after:
                    raise ConnectionError("the XCom push failed")
        except ConnectionError:
            return run
        run.finish()
        return run


def replay_requests(server: S3Server, bucket: S3Bucket, steps: int) -> tuple[Counter[str], Counter[str], Any]:
    attempts = Attempts(server, bucket, f"replay_{steps}")
    first = attempts.run(steps, fail_after=True)
    assert first.stats.executed.total == 2 * steps + 1 and first.writer.not_persisted == 0
    recording = Counter(attempts.sent)
    second = attempts.run(steps)
    assert second.stats.replayed.total == 2 * steps + 1 and second.stats.executed.total == 0, second.stats.summary()
    assert attempts.bucket.list_keys("cache/") == [], "the cache is deleted after success"
    return recording, Counter(attempts.sent), second


def test_a_replay_costs_a_constant_number_of_requests_whatever_its_length(s3_server, s3_bucket):
    counts = {steps: replay_requests(s3_server, s3_bucket, steps) for steps in (5, 60)}

    for steps, (recording, replay, _) in counts.items():
        # Recording: one PUT per step, plus the output, the probe, the per-try note and the pack; no GET.
        assert recording["PutObject"] == (2 * steps + 1) + 4, recording
        assert recording["GetObject"] == 0, recording
        # The replay reads one LIST, the pack and the recorded output (never packed): 1 try wrote the cache,
        # so at most 1 + 2 requests.
        assert replay["GetObject"] == 2, replay
        assert sum(replay[op] for op in READS) - 1 <= 1 + 2, replay  # less the cleanup's LIST
        # Its own writes: the probe, the recorded output, the per-try note.
        assert replay["PutObject"] == 3, replay
        # Cleanup after success: batched, never one DELETE per step (the single DELETE is the start probe's).
        assert replay["DeleteObject"] == 1 and replay["DeleteObjects"] <= 2, replay
    assert counts[5][1] == counts[60][1], "the replay's requests do not grow with the number of steps"
    recording = {steps: counts[steps][0] - Counter(PutObject=2 * steps + 1) for steps in counts}
    assert recording[5] == recording[60], "recording costs one PUT per step and nothing else per step"


def test_a_cache_written_by_a_packed_try_and_a_killed_try_is_read_in_tries_plus_two(s3_server, s3_bucket):
    attempts = Attempts(s3_server, s3_bucket, "two_tries")
    attempts.run(30, fail_at=10)  # fails at call 10: 11 model answers and 10 calls, packed into one object
    killed = attempts.run(30, fail_at=20, killed=True)  # replays those, records more singly, then dies
    unpacked = len(killed.writer.written)
    assert unpacked == 20

    third = attempts.run(30)

    assert third.stats.replayed.total == 21 + unpacked and third.stats.executed.total == 2 * 30 + 1 - 21 - unpacked
    assert attempts.sent["GetObject"] == 1 + unpacked, "the pack and the killed try's singles, nothing else"
    assert attempts.sent["ListObjectsV2"] == 2, attempts.sent  # the load and the cleanup


def test_recording_is_one_put_per_step_without_a_get_or_list_per_step(s3_server, s3_bucket):
    sent = {}
    for steps in (10, 40):
        attempts = Attempts(s3_server, s3_bucket, f"recording_{steps}")
        run = attempts.run(steps)
        assert run.stats.executed.total == 2 * steps + 1
        assert attempts.sent["PutObject"] == 2 * steps + 1 + 3, attempts.sent  # and the output, probe, note
        assert attempts.sent["GetObject"] == 0 and attempts.sent["DeleteObjects"] <= 2, attempts.sent
        sent[steps] = attempts.sent - Counter(PutObject=2 * steps + 1)
    assert sent[10] == sent[40], "nothing but the PUT of each step grows with the number of steps"


class _Killed(BaseException):
    """The worker dies here (nothing after it runs: not even ``finish``'s error handling)."""


class _KillAfterDeletes:
    """An S3 filesystem that dies after its ``rm`` call number ``after`` (a batched delete went through)."""

    def __init__(self, real: Any, after: int) -> None:
        self._real, self._after, self.calls = real, after, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def rm(self, paths: Any, **kwargs: Any) -> Any:
        result = self._real.rm(paths, **kwargs)
        self.calls += 1
        if self.calls == self._after:
            raise _Killed
        return result


@pytest.mark.parametrize("killed_after", [0, 1, 2])
def test_a_batched_cleanup_cut_short_leaves_the_recorded_output_for_the_retry(s3_server, s3_bucket, killed_after):
    """The success window on S3: the cleanup is two batched deletes (packs and steps, then the result entry
    and the notes); killed before, between or after them, the retry returns the recorded output or finds
    nothing at all, and never half a cache without its output."""
    attempts = Attempts(s3_server, s3_bucket, f"window_{killed_after}")
    attempts.run(20, fail_at=10)  # a failed try: its entries are packed
    store = attempts.store()
    run = Attempt.open(store, attempt=2, log=RecordingLog())
    result = run_agent(run, build_agent(20), "go", usage_limits=UsageLimits(request_limit=None))
    run.record_output(result.output)
    if killed_after:
        store.fs = _KillAfterDeletes(store.fs, killed_after)
        with pytest.raises(_Killed):
            run.finish()
    left = [key.rsplit("/", 1)[-1] for key in s3_bucket.list_keys("cache/")]

    retry = Attempt.open(attempts.store(), attempt=3, log=RecordingLog())
    recorded = retry.recorded_output()

    if killed_after == 2:
        assert left == [] and recorded is None, left  # nothing left, and no step either: a fresh start
    else:
        assert "result-output.json" in left, left
        assert recorded is not None and recorded.value == "done 20", "the retry returns the output, calls nothing"
    if killed_after == 1:
        assert not any(name.endswith((".pack", ".json")) and name != "result-output.json" for name in left), left
