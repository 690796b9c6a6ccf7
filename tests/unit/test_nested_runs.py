"""Every agent run in a durable attempt is durable: delegates inside tools, the same delegate twice, parallel
delegations, direct ``ctx.model`` calls, compaction requests, and tools that opt out of replay.

Real pydantic-ai agents (FunctionModel) with counters at the models and in the tools; attempts as the
operator makes them (``run_agent`` through :class:`DurableHarness`).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.delegates import calls, first_prompt, helper_agent, outer_agent
from tests.helpers.durable import tool_returns

from airflow_pydantic_ai.durable import CacheReader, DurableCapability, live_tool


@pytest.fixture(autouse=True)
def _fresh_counts():
    calls.clear()


def test_a_delegate_failing_inside_replays_its_own_steps(harness):
    flaky = {"failures": 1}
    outer = outer_agent(helper_agent(flaky=flaky), topics=[["printer"]])
    with pytest.raises(ConnectionError):
        harness.run(outer, "go")
    assert calls == Counter(
        {"outer model": 1, "delegate": 1, "helper model": 2, "side_effect printer": 1, "side_effects": 1, "check": 1}
    )
    first = harness.logs[-1]
    # The summary counts the delegate's steps: 3 model requests, the delegate tool failed, side_effect and check ran.
    assert first.summary() == (
        "Durable: replayed 0 cached steps (0 model, 0 tool), executed 6 new steps (3 model, 3 tool)"
    )
    assert any("of agent 'helper'" in line for line in first.at("info"))
    # The call that started the delegate failed (no entry): its steps follow the model step that asked for it.
    listed = [(step.kind, step.agent) for step in CacheReader(harness.store()).steps()]
    assert listed == [("model", None), ("model", "helper"), ("tool", "helper"), ("model", "helper")]

    result, _run, log = harness.run(outer, "go")
    assert result.output == "helped with printer: filed printer as #1, ok"
    # The delegate's model was asked exactly once more, and its side effect did not happen again.
    assert calls["helper model"] == 3
    assert calls["side_effect printer"] == 1
    assert calls["outer model"] == 2  # the first answer replayed: one more live for the end
    assert log.summary() == (
        "Durable: replayed 4 cached steps (3 model, 1 tool), executed 4 new steps (2 model, 2 tool)"
    )


def test_the_same_delegate_twice_and_parallel_delegations_each_replay_their_own(harness):
    helper = helper_agent()
    filed: list[str] = []
    state = {"fail": True}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["outer model"] += 1
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("work", {"topic": "printer"})])
        return ModelResponse(parts=[TextPart(" | ".join(str(part.content) for part in tool_returns(messages)))])

    outer: Agent[None, str] = Agent(FunctionModel(model), name="outer")

    @outer.tool_plain
    async def work(topic: str) -> str:
        # Two identical delegations, one after the other (the same delegate twice), then parallel delegations
        # (two of them identical).
        first = await helper.run(topic)
        second = await helper.run(topic)
        results = await asyncio.gather(*(helper.run(topic) for topic in ("laptop", "printer", "laptop")))
        outputs = [first.output, second.output, *(result.output for result in results)]
        filed.append(" / ".join(outputs))
        if state["fail"]:
            state["fail"] = False
            raise ConnectionError("after the delegations")
        return " / ".join(outputs)

    with pytest.raises(ConnectionError):
        harness.run(outer, "go")
    ran = calls["helper model"]
    assert ran == 15  # five delegations, three model requests each
    result, _, _log = harness.run(outer, "go")
    assert calls["helper model"] == ran  # every delegation replayed its own steps
    assert calls["side_effect printer"] == 3 and calls["side_effect laptop"] == 2  # none again
    assert result.output == filed[0]  # each delegation got its own recorded answers back


def plain_agent(name: str | None) -> Agent[None, str]:
    """A delegate without DurableCapability: one model request, answered with its prompt."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["plain model"] += 1
        return ModelResponse(parts=[TextPart(f"plain: {first_prompt(messages)}")])

    return Agent(FunctionModel(model), name=name)


def caller_of(delegates: list[Agent[None, str]], *, fail_last: bool) -> Agent[None, str]:
    """Asks for two parallel ``delegate`` calls, then a third; the third fails once after its delegate ran
    when ``fail_last``."""
    failures = {"c": 1 if fail_last else 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answered = sum(1 for message in messages if isinstance(message, ModelResponse))
        if answered == 0:
            return ModelResponse(parts=[ToolCallPart("delegate", {"topic": t}, tool_call_id=t) for t in ("a", "b")])
        if answered == 1:
            return ModelResponse(parts=[ToolCallPart("delegate", {"topic": "c"}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="caller")

    @agent.tool
    async def delegate(ctx: RunContext[None], topic: str) -> str:
        calls["delegate"] += 1
        # Held in a list, so that pydantic-ai cannot infer a name from the variable holding the agent.
        result = await delegates[0].run(topic, usage=ctx.usage)
        if failures.get(topic):
            failures[topic] -= 1
            raise ConnectionError("the status service is down after the delegate ran")
        return result.output

    return agent


def _unrecorded(log: Any) -> list[str]:
    return [line for line in log.at("warning") if "without DurableCapability" in line or "not recorded" in line]


def test_a_delegate_without_the_capability_is_named_once_per_attempt(harness):
    caller = caller_of([plain_agent("plain")], fail_last=True)
    with pytest.raises(ConnectionError):
        harness.run(caller, "go")
    assert calls["plain model"] == 3  # three delegations (two in parallel); one WARNING for the attempt
    result, _run, _log = harness.run(caller, "go")
    assert result.output == "done"
    # Try 2: the two recorded calls replay (their delegates do not run); the call that failed runs again, and
    # its delegate with it (nothing of it was recorded).
    assert calls["plain model"] == 4
    for attempt in harness.logs:
        warnings = _unrecorded(attempt)
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(
            "Durable: agent 'plain' ran inside this durable attempt without DurableCapability: its model "
            "requests and tool calls are not recorded, so they run again on a retry. Make it durable: "
            "Agent(..., capabilities=[DurableCapability()]) (from airflow_pydantic_ai.durable import "
            "DurableCapability)"
        )


def test_an_unnamed_delegate_without_the_capability_is_named_by_its_model(harness):
    harness.run(caller_of([plain_agent(None)], fail_last=False), "go")
    warnings = _unrecorded(harness.logs[-1])
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "Durable: an unnamed agent (model 'function:model:') ran inside this durable attempt without DurableCapability"
    )


def test_a_delegate_of_a_durable_delegate_without_the_capability_is_named(harness):
    deep = plain_agent("deep")

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("ask_deep", {"topic": first_prompt(messages)})])
        return ModelResponse(parts=[TextPart(str(tool_returns(messages)[0].content))])

    middle: Agent[None, str] = Agent(FunctionModel(model), name="middle", capabilities=[DurableCapability()])

    @middle.tool
    async def ask_deep(ctx: RunContext[None], topic: str) -> str:
        return (await deep.run(topic, usage=ctx.usage)).output

    harness.run(caller_of([middle], fail_last=False), "go")
    warnings = _unrecorded(harness.logs[-1])
    assert len(warnings) == 1
    assert warnings[0].startswith("Durable: agent 'deep' ran inside this durable attempt without DurableCapability")


def test_a_durable_delegate_draws_no_warning(harness):
    caller = caller_of([helper_agent()], fail_last=False)
    harness.run(caller, "go")
    assert _unrecorded(harness.logs[-1]) == []


def test_in_a_block_of_its_own_a_delegate_without_the_capability_is_named_by_the_tool_it_ran_in(harness):
    # The top-level run counts into a usage pydantic-ai made, not the attempt's: the delegate's requests are
    # seen in the tool's count, and the warning names the tool (docs/durability.rst says so).
    from airflow_pydantic_ai.durable import attempt_scope

    caller = caller_of([plain_agent("plain")], fail_last=False)
    run, log = harness.open()
    with run.ending(), attempt_scope(run):
        assert caller.run_sync("go", capabilities=[DurableCapability()]).output == "done"
    warnings = _unrecorded(log)
    assert len(warnings) == 1
    # (the parallel calls share the usage, so either call may count both delegates' requests)
    assert re.match(
        r"Durable: tool delegate \(call [ab]\) made [12] model request\(s\) that are not recorded", warnings[0]
    )


def test_the_capability_is_inert_outside_a_durable_attempt():
    helper = helper_agent()
    outer = outer_agent(helper, topics=[["printer"]])
    assert outer.run_sync("go").output == "helped with printer: filed printer as #1, ok"
    assert outer.run_sync("go").output == "helped with printer: filed printer as #2, ok"
    assert calls["side_effect printer"] == 2


def test_the_read_side_lists_nested_steps_in_order_with_their_agent(harness):
    outer = outer_agent(helper_agent(), topics=[["printer"]])
    harness.run(outer, "go")
    steps = CacheReader(harness.store()).steps()
    described = [(step.kind, step.agent) for step in steps]
    assert described == [
        ("model", None),
        ("model", "helper"),
        ("tool", "helper"),
        ("model", "helper"),
        ("tool", "helper"),
        ("model", "helper"),
        ("tool", None),
        ("model", None),
    ]
    assert [step.name for step in steps if step.kind == "tool"] == ["side_effect", "check", "delegate"]
    # What ``cache show`` prints and the view shows: the agent after the step's name, for nested steps only.
    assert steps[2].as_row()["name"] == "side_effect (agent helper)"
    assert steps[6].as_row()["name"] == "delegate"


def test_a_tool_that_opts_out_runs_on_every_try_while_its_neighbours_replay(harness):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        answered = sum(1 for message in messages if isinstance(message, ModelResponse))
        if answered == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {}), ToolCallPart("status", {})])
        if answered == 1:
            return ModelResponse(parts=[ToolCallPart("notify", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model))
    state = {"fail": True}

    @agent.tool_plain
    def lookup() -> str:
        calls["lookup"] += 1
        return "sunny"

    @agent.tool_plain(metadata=live_tool())
    def status() -> str:
        calls["status"] += 1
        return "green"  # the same on every try: what the model is sent does not change

    @agent.tool_plain
    def notify() -> str:
        calls["notify"] += 1
        if state["fail"]:
            state["fail"] = False
            raise ConnectionError("down")
        return "sent"

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    result, _, log = harness.run(agent, "go")
    assert result.output == "done"
    assert calls["status"] == 2  # live on both tries
    assert calls["lookup"] == 1 and calls["model"] == 3  # its neighbours and the answer after it replayed
    assert "Durable: tool status (call" in "\n".join(log.at("info"))
    assert "replayed 3 cached steps (2 model, 1 tool)" in log.summary()


def test_two_agents_one_after_another_in_one_attempt(harness):
    helper = helper_agent()
    second = helper_agent()
    run, log = harness.open()
    from airflow_pydantic_ai.durable import attempt_scope

    with run.ending(), attempt_scope(run):
        assert asyncio.run(helper.run("a")).output == "helped with a: filed a as #1, ok"
        assert asyncio.run(second.run("a")).output == "helped with a: filed a as #2, ok"
    calls.clear()
    run, log = harness.open()
    with run.ending(), attempt_scope(run):
        assert helper.run_sync("a").output == "helped with a: filed a as #1, ok"
        assert second.run_sync("a").output == "helped with a: filed a as #2, ok"
    assert calls == Counter()
    assert (
        log.summary() == "Durable: replayed 10 cached steps (6 model, 4 tool), executed 0 new steps (0 model, 0 tool)"
    )


class Compacting(AbstractCapability[Any]):
    """Compacts the conversation before the second request, the way ``OpenAICompaction`` does."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if len(request_context.messages) < 3:
            return request_context
        calls["compaction"] += 1
        summary = ModelResponse(parts=[CompactionPart("the conversation so far")])
        request_context.messages = [summary, request_context.messages[-1]]
        ctx.messages[:] = request_context.messages
        return request_context


def test_a_compaction_request_is_named_once_as_live(harness):
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[Compacting()])

    @agent.tool_plain
    def lookup() -> str:
        return "sunny"

    harness.run(agent, "go")
    warnings = [line for line in harness.logs[-1].at("warning") if "compacted" in line]
    assert len(warnings) == 1
    assert "before step 3: model" in warnings[0] and "runs again on a retry" in warnings[0]
    harness.run(agent, "go")
    assert calls["compaction"] == 2  # live on every try
    assert calls["model"] == 2  # the requests replay: the compacted conversation is the same
