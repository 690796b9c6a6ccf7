"""A cache written by release 0.1.0 (entries in ``tests/fixtures/cache_0_1_0``) replays with today's code."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.cache_fixture import FIXTURE, IDENTITY, replay_the_fixture
from tests.helpers.durable import RecordingLog, local_store

from airflow_pydantic_ai.durable import Attempt, DurableCapability, StepStore


def copy_fixture(base: Path) -> None:
    shutil.copytree(FIXTURE / "fixture_dag", base / "fixture_dag")


# The fixture was recorded under pydantic-ai-slim 2.68.0. Step keys digest pydantic-ai's own serialization of
# the messages, and 2.68 added fields to ModelResponse (``canonical_system``, ``model_id``) that 2.62 does not
# write, so under an older pydantic-ai the replayed response digests differently and the steps after it run
# live (never a wrong replay). docs/compatibility.rst states the limit.
def test_cache_written_by_0_1_0_replays_every_step(tmp_path: Path) -> None:
    copy_fixture(tmp_path)
    log = RecordingLog()
    replay_the_fixture(local_store(tmp_path, IDENTITY, warn=log.warning), log)


def test_a_0_1_0_cache_of_a_provider_that_stamps_its_answers_replays_every_step(tmp_path: Path) -> None:
    """0.1.0 digested ``provider_details['timestamp']`` (OpenAI's ``created`` second); a cache it wrote is keyed
    that way, so an attempt that loads one keys its steps the same way and replays them all."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    stamps = iter(range(1_800_000_000, 1_900_000_000, 7))
    calls: list[str] = []

    def stamped(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        created = datetime.fromtimestamp(next(stamps), tz=UTC)
        parts: list = [TextPart("done")] if len(messages) > 1 else [ToolCallPart("lookup", {}, tool_call_id="c1")]
        return ModelResponse(parts=parts, provider_details={"timestamp": created})

    agent: Agent[None, str] = Agent(FunctionModel(stamped))

    @agent.tool_plain
    def lookup() -> str:
        calls.append("lookup")
        return "found"

    def store() -> StepStore:
        return local_store(tmp_path, IDENTITY)

    first = Attempt.open(store(), attempt=1, log=RecordingLog())
    first.first.keys.use_release_0_1_0_keys()  # as 0.1.0 keyed them
    agent.run_sync("go", capabilities=[DurableCapability(first)])
    for entry in store().load().entries.values():  # as 0.1.0 wrote them: no recorded_at
        store().put(replace(entry, recorded_at=None, role=None, call_id=None))

    log = RecordingLog()
    second = Attempt.open(store(), attempt=2, log=log)
    assert agent.run_sync("go", capabilities=[DurableCapability(second)]).output == "done"
    assert calls == ["lookup"]
    assert (second.stats.replayed.model, second.stats.replayed.tool, second.stats.executed.total) == (2, 1, 0)
