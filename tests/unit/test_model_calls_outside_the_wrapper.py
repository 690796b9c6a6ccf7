"""Model calls that do not pass through the run's model wrapper: ``ctx.model`` in a tool is recorded and
replayed under the tool call's step; a capability's ``@durable_operation`` cannot be, and is named once per
attempt as live.

Real pydantic-ai agents (FunctionModel) with counters at the models; attempts as the operator makes them
(``run_agent`` through :class:`DurableHarness`), try 1 failing so that try 2 retries.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability, durable_operation
from pydantic_ai.capabilities.file_understanding import FileUnderstanding
from pydantic_ai.direct import model_request
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.models.wrapper import WrapperModel

from airflow_pydantic_ai.durable import CacheReader, DurableCapability, live_tool

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts():
    calls.clear()


def _last_prompt(messages: list[ModelMessage]) -> str:
    last = messages[-1]
    return str(last.parts[-1].content) if isinstance(last, ModelRequest) else ""  # type: ignore[union-attr]


def notify_failing_once(agent: Agent[None, str]) -> None:
    """Give ``agent`` a ``notify`` tool that fails on its first call (try 1) and returns ``"sent"`` after."""
    state = {"fail": True}

    @agent.tool_plain
    def notify() -> str:
        if state["fail"]:
            state["fail"] = False
            raise ConnectionError("down")
        return "sent"


def summarizing_agent(*, topics: list[str], fail: dict[str, bool]) -> Agent[None, str]:
    """Asks for one ``summarize`` call per topic (in parallel); the tool asks the run's model directly, twice.

    The model answers the tool's own requests (``summarize: ...``, ``shorten: ...``) with text and counts them
    apart from the run's requests. ``summarize`` fails once, after both of its requests, while ``fail`` says so.
    """

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _last_prompt(messages)
        if prompt.startswith(("summarize: ", "shorten: ")):
            calls[prompt] += 1
            calls["direct requests"] += 1
            return ModelResponse(parts=[TextPart(f"<{prompt} #{calls['direct requests']}>")])
        calls["run requests"] += 1
        returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
        if not returns:
            return ModelResponse(
                parts=[
                    ToolCallPart("summarize", {"topic": topic}, tool_call_id=f"c{i}") for i, topic in enumerate(topics)
                ]
            )
        return ModelResponse(parts=[TextPart(" | ".join(str(part.content) for part in returns))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="writer")

    @agent.tool
    async def summarize(ctx: RunContext[None], topic: str) -> str:
        calls[f"summarize {topic}"] += 1
        # Both ways pydantic-ai offers to ask a model directly: the model's own method, and pydantic_ai.direct.
        first = await ctx.model.request(
            [ModelRequest.user_text_prompt(f"summarize: {topic}")], None, ModelRequestParameters()
        )
        second = await model_request(ctx.model, [ModelRequest.user_text_prompt(f"shorten: {first.text}")])
        await asyncio.sleep(0.01 if topic == "a" else 0)  # parallel calls finish out of order
        if fail.get(topic):
            fail[topic] = False
            raise ConnectionError("the wiki is down")
        return str(second.text)

    return agent


def test_ctx_model_requests_in_a_tool_replay_when_the_tool_runs_again(harness):
    fail = {"a": True}
    agent = summarizing_agent(topics=["a"], fail=fail)
    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    assert calls["direct requests"] == 2
    first = harness.logs[-1]
    # The tool's own requests are counted as model steps: 1 for the run, 2 inside the tool.
    assert (
        first.summary() == "Durable: replayed 0 cached steps (0 model, 0 tool), executed 4 new steps (3 model, 1 tool)"
    )
    assert not [line for line in first.at("warning") if "not recorded" in line]

    result, _, log = harness.run(agent, "go")
    # The tool ran again (it had failed), and its two requests replayed: the model was not asked again.
    assert calls["summarize a"] == 2
    assert calls["direct requests"] == 2
    assert result.output == "<shorten: <summarize: a #1> #2>"
    assert log.summary() == "Durable: replayed 3 cached steps (3 model, 0 tool), executed 2 new steps (1 model, 1 tool)"


def test_parallel_tool_calls_each_replay_their_own_ctx_model_requests(harness):
    fail = {"a": True}
    agent = summarizing_agent(topics=["a", "b"], fail=fail)
    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    assert calls["direct requests"] == 4
    # Recorded under the tool calls: each call's requests listed before it (b finished, a failed).
    kinds = [step.kind for step in CacheReader(harness.store()).steps()]
    assert kinds.count("model") == 5 and kinds.count("tool") == 1

    result, _, _ = harness.run(agent, "go")
    assert calls["direct requests"] == 4  # a's two replayed; b's call replayed whole
    assert calls["summarize a"] == 2 and calls["summarize b"] == 1
    answers = result.output.split(" | ")
    # Each call got its own recorded answers back, not the other's.
    assert answers[0].startswith("<shorten: <summarize: a ") and answers[1].startswith("<shorten: <summarize: b ")


def test_a_tool_that_replays_asks_nothing(harness):
    state = {"fail": True}
    agent = summarizing_agent(topics=["a"], fail={})

    @agent.output_validator
    def flaky(value: str) -> str:
        if state["fail"]:
            state["fail"] = False
            raise ConnectionError("after the tool")
        return value

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    harness.run(agent, "go")
    assert calls["summarize a"] == 1 and calls["direct requests"] == 2


class Summarizer(AbstractCapability[Any]):
    """Before the run's second request, summarizes the conversation with a model of its own, as a durable operation."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if len(request_context.messages) >= 3:
            calls["summaries"] += 1
            await self.summarize(ctx, "the conversation so far")
        return request_context

    @durable_operation(name="summarize")
    async def summarize(self, ctx: RunContext[Any], text: str) -> str:
        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            calls["summarizer model"] += 1
            return ModelResponse(parts=[TextPart(f"summary of {text}")])

        return (await Agent(FunctionModel(model)).run(text)).output


def test_a_capability_durable_operation_runs_live_and_is_named_once_per_attempt(harness):

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {}), ToolCallPart("notify", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[Summarizer(), Summarizer()])

    @agent.tool_plain
    def lookup() -> str:
        return "sunny"

    notify_failing_once(agent)

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    result, _, _log = harness.run(agent, "go")
    assert result.output == "done"
    # Try 1 failed in the tools, before the second request; try 2 replayed the first request, and both Summarizers'
    # operations ran live before the second one (nothing recorded them, nothing could replay them).
    assert calls["summaries"] == 2 and calls["summarizer model"] == 2
    assert calls["model"] == 2
    for logs in harness.logs:
        named = [line for line in logs.at("warning") if "@durable_operation" in line]
        assert len(named) == 1  # once per attempt, however many of them the run has
        assert "capability Summarizer has @durable_operation method(s) 'summarize'" in named[0]
        assert "not recorded" in named[0] and "again on a retry" in named[0]


def test_no_capability_operations_no_warning(harness):
    agent = summarizing_agent(topics=["a"], fail={})
    harness.run(agent, "go")
    assert not [line for line in harness.logs[-1].at("warning") if "@durable_operation" in line]


def test_a_delegate_given_ctx_model_records_its_own_steps(harness):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _last_prompt(messages)
        if prompt == "inner":
            calls["delegate model"] += 1
            return ModelResponse(parts=[TextPart("inner answer")])
        calls["run requests"] += 1
        if not any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("ask", {})])
        return ModelResponse(parts=[TextPart("done")])

    delegate: Agent[None, str] = Agent(name="delegate", capabilities=[DurableCapability()])
    agent: Agent[None, str] = Agent(FunctionModel(model), name="writer")
    state = {"fail": True}

    @agent.tool
    async def ask(ctx: RunContext[None]) -> str:
        result = await delegate.run("inner", model=ctx.model)  # the writer's model, through its context
        if state["fail"]:
            state["fail"] = False
            raise ConnectionError("after the delegate")
        return result.output

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    result, _, _ = harness.run(agent, "go")
    assert result.output == "done"
    assert calls["delegate model"] == 1  # the delegate's request replayed
    agents = {step.agent for step in CacheReader(harness.store()).steps() if step.kind == "model"}
    assert "delegate" in agents  # recorded by the delegate's own run, not as the tool's ctx.model requests


def test_a_delegate_without_the_capability_is_still_named_next_to_ctx_model_requests(harness):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _last_prompt(messages)
        if prompt in ("direct", "plain"):
            calls[prompt] += 1
            return ModelResponse(parts=[TextPart(f"{prompt} answer")])
        if not any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("ask", {})])
        return ModelResponse(parts=[TextPart("done")])

    plain: Agent[None, str] = Agent(FunctionModel(model), name="plain")  # no DurableCapability
    agent: Agent[None, str] = Agent(FunctionModel(model), name="writer")

    @agent.tool
    async def ask(ctx: RunContext[None]) -> str:
        # Recorded requests that the run's usage does not count must not hide the delegate's unrecorded one.
        await ctx.model.request([ModelRequest.user_text_prompt("direct")], None, ModelRequestParameters())
        await ctx.model.request([ModelRequest.user_text_prompt("direct")], None, ModelRequestParameters())
        return (await plain.run("plain", usage=ctx.usage)).output

    harness.run(agent, "go")
    named = [line for line in harness.logs[-1].at("warning") if "DurableCapability" in line]
    assert len(named) == 1
    assert named[0].startswith("Durable: agent 'plain' ran inside this durable attempt without DurableCapability")


def test_ctx_model_requests_in_a_live_tool_run_live_on_every_try(harness):

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if _last_prompt(messages) == "status?":
            calls["direct requests"] += 1
            return ModelResponse(parts=[TextPart("green")])
        if not any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("status", {}), ToolCallPart("notify", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model))

    @agent.tool(metadata=live_tool())
    async def status(ctx: RunContext[None]) -> str:
        response = await ctx.model.request([ModelRequest.user_text_prompt("status?")], None, ModelRequestParameters())
        return str(response.text)

    notify_failing_once(agent)

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    result, _, _log = harness.run(agent, "go")
    assert result.output == "done"
    assert calls["direct requests"] == 2  # a live tool is never recorded, and neither is what it asks the model


class CompactingModel(WrapperModel):
    """A model that supports compaction requests (as OpenAI's Responses model does), counting them."""

    async def compact_messages(
        self, request_context: ModelRequestContext, *, instructions: str | None = None
    ) -> ModelResponse:
        calls["compaction requests"] += 1
        return ModelResponse(parts=[CompactionPart(f"{len(request_context.messages)} messages so far")])


class CompactsThroughTheModel(AbstractCapability[Any]):
    """Compacts the history once before a request, the way ``OpenAICompaction`` does: a compaction request to the
    model in ``before_model_request``, before pydantic-ai applies the capabilities' model wrappers."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages
        if len(messages) < 3 or any(isinstance(part, CompactionPart) for part in messages[0].parts):
            return request_context
        compacted = await request_context.model.compact_messages(
            ModelRequestContext(
                model=request_context.model,
                messages=messages[:-1],
                model_settings=request_context.model_settings,
                model_request_parameters=request_context.model_request_parameters,
            )
        )
        request_context.messages = [compacted, messages[-1]]
        ctx.messages[:] = request_context.messages
        return request_context


def test_a_compaction_request_runs_live_and_is_named_once_per_attempt(harness):

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        answered = sum(1 for message in messages if isinstance(message, ModelResponse))
        if answered == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {})])
        if answered == 1:  # the compaction response, then the lookup's result
            return ModelResponse(parts=[ToolCallPart("notify", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(CompactingModel(FunctionModel(model)), capabilities=[CompactsThroughTheModel()])

    @agent.tool_plain
    def lookup() -> str:
        return "sunny"

    notify_failing_once(agent)

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    assert calls["compaction requests"] == 1 and calls["model"] == 2
    result, _, _log = harness.run(agent, "go")
    assert result.output == "done"
    # The compaction request ran again (not recorded); the request after it replayed (same compacted conversation).
    assert calls["compaction requests"] == 2
    assert calls["model"] == 3
    for logs in harness.logs:
        named = [line for line in logs.at("warning") if "compacted" in line]
        assert len(named) == 1
        assert "not recorded and runs again on a retry" in named[0]


def test_pydantic_ais_own_capability_with_a_durable_operation_is_named(harness):
    agent = summarizing_agent(topics=["a"], fail={})
    harness.run(agent, "go", capabilities=[FileUnderstanding(fallback_subagent_model=TestModel())])
    named = [line for line in harness.logs[-1].at("warning") if "@durable_operation" in line]
    assert named == [
        "Durable: capability FileUnderstanding (id 'file_understanding') has @durable_operation method(s) 'describe'; "
        "pydantic-ai hands those only to its own durable engines, so they are not recorded: the model requests they "
        "make run live, and again on a retry"
    ]


def test_a_delegate_given_ctx_model_records_its_tools_ctx_model_requests_under_its_own_calls(harness):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _last_prompt(messages)
        if prompt.startswith("direct"):
            calls[prompt] += 1
            return ModelResponse(parts=[TextPart(f"{prompt} answer")])
        returned = any(isinstance(part, ToolReturnPart) for part in messages[-1].parts)
        if info.function_tools[0].name == "inner":
            return ModelResponse(parts=[TextPart("delegated")] if returned else [ToolCallPart("inner", {})])
        return ModelResponse(parts=[TextPart("done")] if returned else [ToolCallPart("outer", {})])

    delegate: Agent[None, str] = Agent(name="delegate", capabilities=[DurableCapability()])
    agent: Agent[None, str] = Agent(FunctionModel(model), name="writer")

    @delegate.tool
    async def inner(ctx: RunContext[None]) -> str:
        await ctx.model.request([ModelRequest.user_text_prompt("direct inner")], None, ModelRequestParameters())
        return "inner done"

    @agent.tool
    async def outer(ctx: RunContext[None]) -> str:
        await ctx.model.request([ModelRequest.user_text_prompt("direct outer")], None, ModelRequestParameters())
        return (await delegate.run("go", model=ctx.model)).output

    harness.run(agent, "go")
    steps = CacheReader(harness.store()).steps()
    # The inner tool's request belongs to the delegate's run (scoped under its call), not to the outer tool's.
    assert [(step.kind, step.agent) for step in steps] == [
        ("model", None),
        ("model", "writer"),
        ("model", "delegate"),
        ("model", "delegate"),
        ("tool", "delegate"),
        ("model", "delegate"),
        ("tool", None),
        ("model", None),
    ]
