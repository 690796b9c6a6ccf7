"""A retry replays what an earlier try recorded: no model asked and no tool run twice, the same output, streams
and parallel tools alike; replayed steps cost no tokens and do not count against usage limits.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import counting_agent

from airflow_pydantic_ai.durable import Attempt, DurableCapability


def test_retry_replays_unchanged_steps(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls, fail_on={"notify"})
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather report")
    first = harness.logs[-1]
    assert first.summary() == (
        "Durable: replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (1 model, 2 tool)"
    )
    result, _run, log = harness.run(agent, "weather report")
    assert log.summary() == (
        "Durable: replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)"
    )
    assert calls == {"lookup": 1, "notify": 2}
    assert "sunny" in result.output
    assert not log.at("warning")


def test_full_replay_returns_same_output_without_calling_anything(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    first, _, _ = harness.run(agent, "weather report")
    second, run, _log = harness.run(agent, "weather report")
    assert second.output == first.output
    assert calls == {"lookup": 1, "notify": 1}
    assert run.stats.replayed.model == 2 and run.stats.replayed.tool == 2 and run.stats.executed.total == 0
    assert run.stats.saved_input_tokens == first.usage.input_tokens
    # Replayed steps cost no tokens in the second run's usage.
    assert second.usage.input_tokens == 0


def _parallel_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("slow_then_fast", {"n": n}, tool_call_id=f"call-{n}") for n in range(4)]
        )
    return ModelResponse(parts=[TextPart("done")])


def test_parallel_tools_finishing_in_reverse_order_all_replay(harness):
    finished: list[int] = []
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    async def slow_then_fast(n: int) -> int:
        await asyncio.sleep(0.05 * (4 - n))  # call 0 finishes last
        finished.append(n)
        return n * 10

    agent: Agent[Any, Any] = Agent(FunctionModel(_parallel_model), toolsets=[toolset])
    harness.run(agent, "go")
    assert finished == [3, 2, 1, 0]
    _, run, _log = harness.run(agent, "go")
    assert finished == [3, 2, 1, 0], "no tool ran again"
    assert run.stats.replayed.tool == 4 and run.stats.replayed.model == 2 and run.stats.executed.total == 0


class Forecast(BaseModel):
    city: str
    celsius: float


def test_structured_output_replays_identically(harness):
    agent: Agent[Any, Forecast] = Agent(
        TestModel(custom_output_args={"city": "Oslo", "celsius": 3.5}), output_type=Forecast
    )
    first, _, _ = harness.run(agent, "forecast")
    second, run, _ = harness.run(agent, "forecast")
    assert second.output == first.output == Forecast(city="Oslo", celsius=3.5)
    assert run.stats.replayed.model == 1 and run.stats.executed.total == 0


async def _stream_fn(messages: list[ModelMessage], info: AgentInfo):
    if len(messages) == 1:
        yield {0: DeltaToolCall(name="lookup", json_args='{"city": "Oslo"}', tool_call_id="c1")}
    else:
        yield "it is "
        yield "sunny"


def test_streaming_records_live_and_replays_as_completed_stream(harness):
    calls: dict[str, int] = {}
    agent: Agent[Any, Any] = Agent(FunctionModel(stream_function=_stream_fn))

    @agent.tool_plain
    def lookup(city: str) -> str:
        calls[city] = calls.get(city, 0) + 1
        return "sunny"

    async def stream_once() -> tuple[str, Attempt]:
        run, _log = harness.open()
        chunks: list[str] = []
        async with agent.run_stream("weather?", capabilities=[DurableCapability(run)]) as result:
            async for text in result.stream_text(delta=True):
                chunks.append(text)
        run.log_summary()
        return "".join(chunks), run

    first, run1 = asyncio.run(stream_once())
    second, run2 = asyncio.run(stream_once())
    assert first == second == "it is sunny"
    assert run1.stats.executed.model == 2 and run2.stats.replayed.model == 2 and run2.stats.executed.total == 0
    assert calls == {"Oslo": 1}


def test_model_retry_from_a_tool_is_replayed_as_a_retry(harness):
    calls = {"n": 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool_returns = [m for m in messages if any(p.part_kind in ("tool-return", "retry-prompt") for p in m.parts)]
        if len(tool_returns) < 2:
            return ModelResponse(
                parts=[ToolCallPart("check", {"value": len(tool_returns)}, tool_call_id=f"c{len(tool_returns)}")]
            )
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[Any, Any] = Agent(FunctionModel(model))

    @agent.tool_plain(retries=3)
    def check(value: int) -> str:
        calls["n"] += 1
        if value == 0:
            raise ModelRetry("value must be positive")
        return "fine"

    harness.run(agent, "go")
    _, run, _ = harness.run(agent, "go")
    assert calls["n"] == 2
    assert run.stats.replayed.tool == 2 and run.stats.executed.total == 0


def test_replayed_retries_do_not_lift_the_tool_calls_limit(harness):
    """pydantic-ai counts only successful tool calls; a replayed ModelRetry must not make room for live ones."""

    class ProviderDown(Exception):
        pass

    attempt = {"n": 1}
    live: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answered = sum(isinstance(message, ModelResponse) for message in messages)
        if answered == 0:
            return ModelResponse(parts=[ToolCallPart("flaky", {}, tool_call_id="f")])
        if attempt["n"] == 1 and answered >= 2:
            raise ProviderDown("provider down")
        if answered <= 3:
            return ModelResponse(parts=[ToolCallPart("act", {"x": answered}, tool_call_id=f"a{answered}")])
        return ModelResponse(parts=[TextPart("final")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def act(x: int) -> str:
        live.append(x)
        return "ok"

    @agent.tool_plain
    def flaky() -> str:
        raise ModelRetry("again")

    limits = UsageLimits(tool_calls_limit=1)
    run, _ = harness.open()
    with pytest.raises(ProviderDown):
        agent.run_sync("go", capabilities=[DurableCapability(run)], usage_limits=run.first.usage_limits(limits))
    attempt["n"] = 2
    live.clear()
    run2, _ = harness.open()
    with pytest.raises(UsageLimitExceeded):
        agent.run_sync("go", capabilities=[DurableCapability(run2)], usage_limits=run2.first.usage_limits(limits))
    assert live == [2], "one live call allowed on the retry (act 1 replayed), and no more"


@requires_pydantic_ai("2.64", "the ModelFallback capability")
def test_an_answer_from_a_fallback_model_replays_when_the_primary_is_back(harness):
    """With the ModelFallback capability each model is wrapped on its own. Try 1: the primary is down,
    the backup answers and a card is charged; the task then fails. Try 2: the primary is back. The
    recorded step is the backup's answer to that same request, and the card must not be charged again."""
    from pydantic_ai.capabilities import ModelFallback
    from pydantic_ai.exceptions import ModelHTTPError

    class TaskFailsLater(Exception):
        pass

    charges: list[int] = []
    primary_up = {"value": False}

    def primary(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not primary_up["value"]:
            raise ModelHTTPError(503, "primary", "overloaded")
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10}, tool_call_id="from-primary")])
        return ModelResponse(parts=[TextPart("done")])

    def backup(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10}, tool_call_id="from-backup")])
        raise TaskFailsLater("something after the charge failed")

    agent: Agent[Any, str] = Agent(
        FunctionModel(primary, model_name="primary"),
        capabilities=[ModelFallback(FunctionModel(backup, model_name="backup"))],
    )

    @agent.tool_plain
    def charge(amount: int) -> str:
        charges.append(amount)
        return "charged"

    with pytest.raises(TaskFailsLater):
        harness.run(agent, "charge the card")
    primary_up["value"] = True
    result, run, log = harness.run(agent, "charge the card")
    assert result.output == "done"
    assert charges == [10], "the card was charged twice"
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (1, 1)
    assert not log.at("warning")


def test_replayed_steps_do_not_count_against_usage_limits(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    harness.run(agent, "weather report")
    run, _ = harness.open()
    # Two requests were recorded; a limit of one live request is enough for a full replay.
    result = agent.run_sync(
        "weather report",
        capabilities=[DurableCapability(run)],
        usage_limits=run.first.usage_limits(UsageLimits(request_limit=1, tool_calls_limit=1)),
    )
    assert run.stats.replayed.model == 2 and "sunny" in result.output
    run.store.clear()
    run3, _ = harness.open()
    with pytest.raises(UsageLimitExceeded):
        agent.run_sync(
            "weather report",
            capabilities=[DurableCapability(run3)],
            usage_limits=run3.first.usage_limits(UsageLimits(request_limit=1)),
        )


def test_user_agent_is_left_unmodified(harness):
    agent = counting_agent({})
    toolsets_before = list(agent.toolsets)
    harness.run(agent, "weather report")
    assert list(agent.toolsets) == toolsets_before
    assert isinstance(agent.model, TestModel)


def test_toolset_capability_tools_are_covered(harness):
    from pydantic_ai.capabilities import Toolset

    calls = {"n": 0}
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def side_effect() -> str:
        calls["n"] += 1
        return "done"

    agent: Agent[Any, Any] = Agent(TestModel(), capabilities=[Toolset(toolset)])
    harness.run(agent, "go")
    _, run, _ = harness.run(agent, "go")
    assert calls["n"] == 1 and run.stats.replayed.tool == 1
