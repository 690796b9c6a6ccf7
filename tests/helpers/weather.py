"""The weather agents that tests in several modules share: ``flaky_agent`` (the durable report, metrics and
telemetry tests) and ``agent_failing_once`` (the budget across tries, in the unit and dags tiers).

Each model function is named ``_model`` on purpose: pydantic-ai names a FunctionModel after its function
(``function:_model:``), and the tests pin messages that carry that name.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

__all__ = ["agent_failing_once", "flaky_agent"]


def flaky_agent(fail_first: list[bool], instrument: InstrumentationSettings | None = None) -> Agent[Any, str]:
    """Asks for ``lookup``, then answers ``sunny``; request N reports 100*N input and 10*N output tokens.
    ``lookup`` fails (ConnectionError) once per item in ``fail_first``; ``instrument`` turns on telemetry."""

    def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests = sum(isinstance(message, ModelResponse) for message in messages) + 1
        usage = RequestUsage(input_tokens=100 * requests, output_tokens=10 * requests)
        if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Paris"}, tool_call_id="c1")], usage=usage)
        return ModelResponse(parts=[TextPart("sunny")], usage=usage)

    agent: Agent[Any, str] = Agent(FunctionModel(_model))
    if instrument is not None:
        agent.instrument = instrument

    @agent.tool_plain
    def lookup(city: str) -> str:
        if fail_first:
            fail_first.pop()
            raise ConnectionError("weather API down")
        return f"{city}: sunny"

    return agent


def agent_failing_once(sent: list[str]) -> Agent[Any, str]:
    """``lookup``, then ``notify`` (which appends to ``sent`` and fails on its first call), then the answer
    ``done``; every request reports 100 input and 10 output tokens."""

    def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [part.tool_name for m in messages for part in m.parts if isinstance(part, ToolReturnPart)]
        usage = RequestUsage(input_tokens=100, output_tokens=10)
        if not returned:
            return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Paris"}, tool_call_id="c1")], usage=usage)
        if returned == ["lookup"]:
            return ModelResponse(parts=[ToolCallPart("notify", {"text": "sunny"}, tool_call_id="c2")], usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    agent: Agent[Any, str] = Agent(FunctionModel(_model))

    @agent.tool_plain
    def lookup(city: str) -> str:
        return f"{city}: sunny"

    @agent.tool_plain
    def notify(text: str) -> str:
        sent.append(text)
        if len(sent) == 1:
            raise ConnectionError("chat API down")
        return "sent"

    return agent
