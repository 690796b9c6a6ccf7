"""``tool_checkpoint()`` (issue 29): a tool saves what it needs to resume as soon as it has it, and the same call
reads it back on a later try.

A try "cut off" is one whose tool raises a ``BaseException`` that is not an ``Exception`` and that dies there
(``killed=True``: no ``ending``, nothing packed), as in ``test_at_most_once.py``. The SIGKILL trials are in
``tests/system``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, stored_entries, tool_returns

from airflow_pydantic_ai import DurableCapability, tool_checkpoint
from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import CheckpointRefused, ToolCheckpoint


class CutOff(BaseException):
    """The worker died while the tool ran."""


def _asking(tool: str, args: dict[str, Any]) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id="c1")])

    return FunctionModel(model)


def _job_runner(submitted: list[str], polls: list[str], *, cut_off_polls: int = 1) -> Agent[None, str]:
    """``run_report`` submits a job once per call (``submitted``), saves its id, then polls it; the first
    ``cut_off_polls`` polls are cut off."""
    agent: Agent[None, str] = Agent(_asking("run_report", {"month": "2026-11"}))

    @agent.tool_plain
    def run_report(month: str) -> str:
        checkpoint = tool_checkpoint()
        job_id = checkpoint.get("job_id")
        if job_id is None:
            job_id = f"job-{len(submitted) + 1}"
            submitted.append(job_id)
            assert checkpoint.save("job_id", job_id)
        polls.append(job_id)
        if len(polls) <= cut_off_polls:
            raise CutOff
        return f"report {month} from {job_id}"

    return agent


def test_a_resumed_call_reconnects_to_its_job_instead_of_submitting_again(harness: DurableHarness) -> None:
    submitted: list[str] = []
    polls: list[str] = []
    agent = _job_runner(submitted, polls)
    with pytest.raises(CutOff):
        harness.run(agent, "monthly report", killed=True)

    result, _, log = harness.run(agent, "monthly report")

    assert submitted == ["job-1"]
    assert polls == ["job-1", "job-1"]
    assert result.output == "done: report 2026-11 from job-1"
    assert any("resumes from checkpoint 'job_id', saved by try 1" in line for line in log.at("info"))


def test_a_checkpoint_survives_a_failed_try_and_its_pack(harness: DurableHarness) -> None:
    submitted: list[str] = []
    saved: list[bool] = []
    agent: Agent[None, str] = Agent(_asking("upload", {"name": "big.csv"}))

    @agent.tool_plain
    def upload(name: str) -> str:
        checkpoint = tool_checkpoint()
        parts = checkpoint.get("parts", 0)
        while parts < 3:
            parts += 1
            submitted.append(f"part {parts}")
            saved.append(checkpoint.save("parts", parts))  # saving again replaces it
            if len(submitted) == 2:
                raise ConnectionError("the connection dropped")  # the tool failed on its own: the try fails
        return f"uploaded {name} in {parts} parts"

    with pytest.raises(ConnectionError):
        harness.run(agent, "upload it")
    assert list(harness.root.glob("*.pack")), "the failed try packed its entries"
    result, _, _ = harness.run(agent, "upload it")

    assert submitted == ["part 1", "part 2", "part 3"]
    assert all(saved)
    assert result.output == "done: uploaded big.csv in 3 parts"


def test_the_newest_save_wins_over_a_packed_copy(harness: DurableHarness) -> None:
    seen: list[Any] = []
    agent: Agent[None, str] = Agent(_asking("count", {}))

    @agent.tool_plain
    def count() -> str:
        checkpoint = tool_checkpoint()
        seen.append(checkpoint.get("n"))
        checkpoint.save("n", len(seen))
        if len(seen) == 1:
            raise ConnectionError("failed on its own")  # try 1 fails and packs n=1
        if len(seen) == 2:
            raise CutOff  # try 2 saves n=2 as a single entry and dies
        return "counted"

    with pytest.raises(ConnectionError):
        harness.run(agent, "count")
    with pytest.raises(CutOff):
        harness.run(agent, "count", killed=True)
    harness.run(agent, "count")

    assert seen == [None, 1, 2]


@dataclass(frozen=True)
class Upload:
    url: str
    parts: tuple[int, ...]


class JobState(BaseModel):
    job_id: str
    submitted_at: dt.datetime
    cost: Decimal


VALUES: dict[str, Any] = {
    "text": "job-1",
    "number": 7,
    "none": None,
    "nested": {"ids": ["a", "b"], "done": False, "ratio": 0.5},
    "tuple": (1, "two"),
    "bytes": b"\x00\xffpart",
    "when": dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC),
    "decimal": Decimal("12.50"),
    "dataclass": Upload("s3://bucket/key", (1, 2, 3)),
    "model": JobState(job_id="j", submitted_at=dt.datetime(2026, 11, 28, tzinfo=dt.UTC), cost=Decimal("0.1")),
}


def _saver(found: dict[str, Any], values: dict[str, Any]) -> Agent[None, str]:
    """A tool that reads every name of ``values`` (into ``found``), saves them all, and is cut off once."""
    agent: Agent[None, str] = Agent(_asking("work", {}))

    @agent.tool_plain
    def work() -> str:
        checkpoint = tool_checkpoint()
        first_try = not found
        found.update({name: checkpoint.get(name, "missing") for name in values})
        if first_try:
            for name, value in values.items():
                checkpoint.save(name, value)
            raise CutOff
        return "worked"

    return agent


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_values_of_many_types_come_back_exactly(harness: DurableHarness, encrypted: bool) -> None:
    if encrypted:
        from cryptography.fernet import Fernet

        harness.cipher = Fernet(Fernet.generate_key())
    found: dict[str, Any] = {}
    agent = _saver(found, VALUES)
    with pytest.raises(CutOff):
        harness.run(agent, "work", killed=True)
    assert found == dict.fromkeys(VALUES, "missing")
    found.clear()
    found["started"] = True  # not the first try any more

    harness.run(agent, "work")

    for name, value in VALUES.items():
        assert found[name] == value and type(found[name]) is type(value), name
    checkpoints = stored_entries(harness.root, "checkpoint-*")
    assert len(checkpoints) == len(VALUES)
    if encrypted:
        assert all(b"job-1" not in data and b"s3://bucket" not in data for data in checkpoints.values())


def test_a_value_that_cannot_come_back_identical_is_refused(harness: DurableHarness) -> None:
    agent: Agent[None, str] = Agent(_asking("work", {}))

    @agent.tool_plain
    def work() -> str:
        tool_checkpoint().save("handle", object())
        return "worked"

    with pytest.raises(CheckpointRefused, match=r"save\('handle', \.\.\.\) in tool work .*save what the tool needs"):
        harness.run(agent, "work")
    assert not stored_entries(harness.root, "checkpoint-*")
    assert issubclass(CheckpointRefused, DurableError) and issubclass(CheckpointRefused, ValueError)


def test_a_value_holding_a_secret_is_refused_and_never_stored(harness: DurableHarness) -> None:
    agent: Agent[None, str] = Agent(_asking("work", {}))

    @agent.tool_plain
    def work() -> str:
        tool_checkpoint().save("session", {"token": "hunter2-token"})
        return "worked"

    masker = lambda text: text.replace("hunter2-token", "***")  # noqa: E731 (Airflow's secrets masker)
    with pytest.raises(CheckpointRefused, match=r"registered as secret.*save a reference instead"):
        harness.run(agent, "work", run_options={"redact": masker})
    assert not stored_entries(harness.root, "checkpoint-*")
    assert not any(b"hunter2" in data for data in stored_entries(harness.root).values())


def test_a_checkpoint_the_store_cannot_take_is_kept_for_the_try_and_save_says_so(
    harness: DurableHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.durable import StepStore

    write = StepStore.write

    def failing(store: StepStore, name: str, data: bytes) -> None:
        if name.startswith("checkpoint-"):
            raise OSError("disk full")
        write(store, name, data)

    monkeypatch.setattr(StepStore, "write", failing)
    results: list[Any] = []
    agent: Agent[None, str] = Agent(_asking("work", {}))

    @agent.tool_plain
    def work() -> str:
        checkpoint = tool_checkpoint()
        results.append(checkpoint.save("job_id", "job-9"))
        results.append(checkpoint.get("job_id"))
        return "worked"

    _, _, log = harness.run(agent, "work")

    assert results == [False, "job-9"]
    assert any("could not store checkpoint 'job_id' of tool work" in line for line in log.at("error"))
    assert any("kept for this try only" in line for line in log.at("warning"))


def test_checkpoints_are_companions_and_go_with_the_cache_after_success(harness: DurableHarness) -> None:
    submitted: list[str] = []
    polls: list[str] = []
    agent = _job_runner(submitted, polls)
    with pytest.raises(CutOff):
        harness.run(agent, "monthly report", killed=True)

    reader = CacheReader(harness.store())
    assert [info.kind for info in reader.steps()] == ["model"], "a checkpoint takes no step number"
    assert [(entry.kind, entry.payload["name"]) for entry in reader.companions()] == [("checkpoint", "job_id")]

    _, run, _ = harness.run(agent, "monthly report")
    run.finish()  # what the success callback does

    assert not stored_entries(harness.base), "the checkpoint went with the cache"


def test_another_call_starts_empty(harness: DurableHarness) -> None:
    submitted: list[str] = []
    polls: list[str] = []
    with pytest.raises(CutOff):
        harness.run(_job_runner(submitted, polls), "monthly report", killed=True)
    other: Agent[None, str] = Agent(_asking("run_report", {"month": "2026-12"}))  # other arguments: another call
    found: list[Any] = []

    @other.tool_plain
    def run_report(month: str) -> str:
        found.append(tool_checkpoint().get("job_id"))
        return "ok"

    result, _, _ = harness.run(other, "the December report")  # another prompt: the model step runs live

    assert found == [None]
    assert result.output == "done: ok"


def test_outside_an_attempt_checkpoints_live_in_memory_for_the_call() -> None:
    found: list[Any] = []

    def agent(*capabilities: Any) -> Agent[None, str]:
        made: Agent[None, str] = Agent(_asking("work", {}), capabilities=list(capabilities))

        @made.tool_plain
        def work() -> str:
            found.append(tool_checkpoint().get("job_id"))
            found.append(tool_checkpoint().save("job_id", "job-1"))
            found.append(tool_checkpoint().get("job_id"))
            return "worked"

        return made

    durable = agent(DurableCapability())
    durable.run_sync("work")
    durable.run_sync("work")

    assert found == [None, False, "job-1"] * 2, "kept for the call, across tool_checkpoint() calls; not stored"


def test_outside_any_tool_call_a_checkpoint_keeps_its_own_values() -> None:
    checkpoint = tool_checkpoint()
    assert isinstance(checkpoint, ToolCheckpoint)
    assert checkpoint.save("n", 1) is False
    assert checkpoint.get("n") == 1 and checkpoint.get("m", "none") == "none"
    assert tool_checkpoint().get("n") is None
    with pytest.raises(CheckpointRefused):
        checkpoint.save("handle", object())
