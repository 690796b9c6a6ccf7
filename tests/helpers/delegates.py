"""The delegation agents that the nested-run tests and the report test share: ``outer_agent`` asks for
``delegate`` calls, each of which runs ``helper_agent`` (a durable delegate with two tools of its own); both
count what really ran in ``calls`` (a test clears it first)."""

from __future__ import annotations

from collections import Counter

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import tool_returns

from airflow_pydantic_ai.durable import DurableCapability

__all__ = ["calls", "first_prompt", "helper_agent", "outer_agent"]

calls: Counter[str] = Counter()


def first_prompt(messages: list[ModelMessage]) -> str:
    """The prompt a run started with (the last part of its first request)."""
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return str(first.parts[-1].content)  # type: ignore[union-attr]


def helper_agent(*, flaky: dict[str, int] | None = None) -> Agent[None, str]:
    """A delegate: asks for ``side_effect``, then ``check``, then answers; ``check`` fails while ``flaky`` says so."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["helper model"] += 1
        returns = tool_returns(messages)
        topic = first_prompt(messages)
        if not returns:
            return ModelResponse(parts=[ToolCallPart("side_effect", {"what": topic})])
        if returns[0].tool_name == "side_effect":
            return ModelResponse(parts=[ToolCallPart("check", {"what": topic})])
        filed = next(
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.tool_name == "side_effect"
        )
        return ModelResponse(parts=[TextPart(f"helped with {topic}: {filed}, {returns[0].content}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="helper", capabilities=[DurableCapability()])

    @agent.tool_plain
    def side_effect(what: str) -> str:
        calls[f"side_effect {what}"] += 1
        calls["side_effects"] += 1
        return f"filed {what} as #{calls['side_effects']}"  # a new ticket number each time it runs

    @agent.tool_plain
    def check(what: str) -> str:
        calls["check"] += 1
        if flaky and flaky.get("failures", 0) > 0:
            flaky["failures"] -= 1
            raise ConnectionError("status service down")
        return "ok"

    return agent


def outer_agent(helper: Agent[None, str], *, topics: list[list[str]]) -> Agent[None, str]:
    """Asks for ``delegate`` calls: one model answer per item of ``topics`` (parallel calls within an item)."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["outer model"] += 1
        answered = sum(1 for message in messages if isinstance(message, ModelResponse))
        if answered < len(topics):
            return ModelResponse(
                parts=[
                    ToolCallPart("delegate", {"topic": topic}, tool_call_id=f"c{answered}{i}")
                    for i, topic in enumerate(topics[answered])
                ]
            )
        return ModelResponse(parts=[TextPart(" | ".join(str(part.content) for part in tool_returns(messages)))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="outer")

    @agent.tool
    async def delegate(ctx: RunContext[None], topic: str) -> str:
        calls["delegate"] += 1
        result = await helper.run(topic, usage=ctx.usage)
        return result.output

    return agent
