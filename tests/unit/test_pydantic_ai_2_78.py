"""What pydantic-ai 2.69-2.78 brought, where it meets a durable run: ``Tool(durable=False)``, the new response
fields (``duration``, ``request_timestamp``) kept through the cache."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import DurableHarness, tool_returns

from airflow_pydantic_ai.durable import live_tool
from airflow_pydantic_ai.durable.encoding.codec import decode_response, encode_response

CALLS: Counter[str] = Counter()


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    CALLS["model"] += 1
    if not any(isinstance(message, ModelResponse) for message in messages):
        return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, "a"), ToolCallPart("clock", {}, "b")])
    return ModelResponse(parts=[TextPart(" | ".join(str(part.content) for part in tool_returns(messages)))])


def lookup(q: str) -> str:
    """Look something up."""
    CALLS["lookup"] += 1
    return f"found {q}"


def clock() -> str:
    """The time."""
    CALLS["clock"] += 1
    return f"tick {CALLS['clock']}"


def _agent(spelling: str) -> Agent[None, str]:
    if spelling == "live_tool()":
        return Agent(FunctionModel(_model), name="a", tools=[lookup, Tool(clock, metadata=live_tool())])
    if spelling == "Tool(durable=False)":
        return Agent(FunctionModel(_model), name="a", tools=[lookup, Tool(clock, durable=False)])  # type: ignore[call-arg]
    if spelling == "FunctionToolset(durable=False)":
        toolset = FunctionToolset([clock], durable=False)  # type: ignore[call-arg]
        return Agent(FunctionModel(_model), name="a", tools=[lookup], toolsets=[toolset])
    agent = Agent(FunctionModel(_model), name="a", tools=[lookup])
    agent.tool_plain(durable=False)(clock)  # type: ignore[call-overload]
    return agent


@requires_pydantic_ai("2.78", "Tool(durable=False)")
@pytest.mark.parametrize(
    "spelling", ["live_tool()", "Tool(durable=False)", "FunctionToolset(durable=False)", "tool_plain(durable=False)"]
)
def test_pydantic_ais_durable_false_runs_the_tool_live_on_every_try_as_live_tool_does(
    harness: DurableHarness, spelling: str
) -> None:
    CALLS.clear()
    first, _, _ = harness.run(_agent(spelling), "go", killed=True)
    second, _, log = harness.run(_agent(spelling), "go")
    # The model steps and lookup replay; the clock runs on each try, and its new answer reaches the model.
    assert Counter({"model": 3, "lookup": 1, "clock": 2}) == CALLS
    assert first.output == "found x | tick 1" and second.output == "found x | tick 2"
    assert any("clock" in line and "live" in line for line in log.at("info")), log.at("info")


def test_a_response_keeps_its_duration_and_request_timestamp_through_the_cache() -> None:
    sent = dt.datetime(2026, 12, 6, 20, 0, 0, 123456, tzinfo=dt.UTC)
    fields: dict[str, Any] = {}
    if "duration" in ModelResponse.__dataclass_fields__:  # pydantic-ai 2.78; not on 2.62-2.68
        fields = {"duration": dt.timedelta(seconds=1, microseconds=5), "request_timestamp": sent}
    response = ModelResponse(
        parts=[ToolCallPart("lookup", {"q": "x"}, "a"), TextPart("hi")],
        model_name="m",
        timestamp=sent + dt.timedelta(seconds=1),
        provider_details={"finish_reason": "stop"},
        **fields,
    )
    replayed = decode_response(encode_response(response))
    for name in ModelResponse.__dataclass_fields__:
        if name != "usage":  # a replayed step costs nothing
            assert getattr(replayed, name) == getattr(response, name), name
