"""What a try that failed leaves to the next one: the good answers and the side effects that finished are
kept; an outcome that made the run fail, a stream left before its end and a result that cannot be stored
are not, so the retry asks again.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai.durable import Attempt, DurableCapability


def test_unexpected_model_behavior_answer_is_not_replayed(harness):
    answers = {"n": 0}

    def stubborn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers["n"] += 1
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"wrong": 1}, tool_call_id="o")])

    class Out(BaseModel):
        value: int

    agent: Agent[Any, Out] = Agent(FunctionModel(stubborn), output_type=Out, retries=1)
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(agent, "go")
    live_first = answers["n"]
    run2, _ = harness.open()
    with pytest.raises(UnexpectedModelBehavior):
        agent.run_sync("go", capabilities=[DurableCapability(run2)])
    assert run2.stats.replayed.model == live_first - 1, "every answer but the last one replays"
    assert run2.stats.executed.model == 1


def test_a_provider_error_raised_as_unexpected_model_behavior_keeps_the_earlier_answers(harness):
    """A request that *raises* UnexpectedModelBehavior (an invalid provider response) produced no answer:
    the answers before it are good, and forgetting one would repeat its tool call (with a new call id)."""
    payments = {"n": 0}
    failures = {"left": 1}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            # Real providers give every call a fresh id: a re-asked answer would not match the cached tool.
            return ModelResponse(parts=[ToolCallPart("pay", {"invoice": 7}, tool_call_id=f"call-{uuid.uuid4()}")])
        if failures["left"]:
            failures["left"] -= 1
            raise UnexpectedModelBehavior("Invalid response from the provider API")
        return ModelResponse(parts=[TextPart("paid")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def pay(invoice: int) -> str:
        payments["n"] += 1
        return f"invoice {invoice} paid"

    with pytest.raises(UnexpectedModelBehavior):
        harness.run(agent, "pay invoice 7")
    result, run2, _ = harness.run(agent, "pay invoice 7")
    assert result.output == "paid"
    assert payments["n"] == 1, "the invoice was paid twice"
    assert (run2.stats.replayed.model, run2.stats.replayed.tool) == (1, 1)


def test_a_tool_failing_with_unexpected_model_behavior_keeps_the_answer_that_called_it(harness):
    """A tool whose own sub-agent gave up raises UnexpectedModelBehavior: the model's answer was fine,
    and forgetting it would send the email it also asked for a second time."""
    emails: list[str] = []
    failures = {"left": 1}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("send_email", {"to": "bob"}, tool_call_id=f"call-{uuid.uuid4()}"),
                    ToolCallPart("ask_expert", {"question": "why"}, tool_call_id=f"call-{uuid.uuid4()}"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def send_email(to: str) -> str:
        emails.append(to)
        return "sent"

    @agent.tool_plain
    def ask_expert(question: str) -> str:
        if failures["left"]:
            failures["left"] -= 1
            raise UnexpectedModelBehavior("the expert sub-agent exceeded its retries")
        return "because"

    with pytest.raises(UnexpectedModelBehavior):
        harness.run(agent, "email bob and ask why")
    result, run2, _ = harness.run(agent, "email bob and ask why")
    assert result.output == "done"
    assert emails == ["bob"], "the email went out twice"
    assert (run2.stats.replayed.model, run2.stats.replayed.tool) == (1, 1)


def test_unserializable_tool_result_runs_but_is_not_cached(harness):
    calls = {"n": 0}

    class Opaque:
        pass

    agent: Agent[Any, Any] = Agent(TestModel())

    @agent.tool_plain
    def make() -> Any:
        calls["n"] += 1
        return Opaque()

    with pytest.raises(Exception):  # noqa: B017 - pydantic-ai itself cannot send an Opaque to the model
        harness.run(agent, "go")
    warnings = harness.logs[-1].at("warning")
    assert any("result of step 2: tool make" in w and "is not cached" in w for w in warnings)


@pytest.mark.parametrize("seconds", [0.3, 2.5], ids=["short", "longer-than-the-grace-of-a-cancelled-run"])
def test_sync_tool_still_running_when_a_sibling_fails_is_recorded(harness, seconds):
    """Only a run cancelled as a whole (a timeout) bounds the wait: a sibling's failure never does."""
    import time

    from airflow_pydantic_ai.durable.interception.toolset import CANCELLED_RUN_GRACE

    assert seconds < 0.5 or seconds > CANCELLED_RUN_GRACE

    calls: dict[str, int] = {"slow": 0, "fails": 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("slow_side_effect", {}, tool_call_id="s"),
                    ToolCallPart("fails_fast", {}, tool_call_id="f"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, Any] = Agent(FunctionModel(model))

    @agent.tool_plain
    def slow_side_effect() -> str:
        time.sleep(seconds)  # still running when the sibling fails
        calls["slow"] += 1
        return "charged the card"

    @agent.tool_plain
    def fails_fast() -> str:
        calls["fails"] += 1
        if calls["fails"] == 1:
            raise ConnectionError("down")
        return "ok"

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    assert calls["slow"] == 1
    _, run, _ = harness.run(agent, "go")
    assert calls == {"slow": 1, "fails": 2}, "the slow side effect is not repeated"
    assert run.stats.replayed.tool == 1 and run.stats.replayed.model == 1


def test_stream_left_before_its_end_is_not_replayed(harness):
    async def long_answer(messages: list[ModelMessage], info: AgentInfo):
        for word in ("one ", "two ", "three ", "four"):
            yield word

    agent: Agent[Any, Any] = Agent(FunctionModel(stream_function=long_answer))

    async def consume(stop_early: bool) -> tuple[str, Attempt]:
        run, _ = harness.open()
        chunks: list[str] = []
        async with agent.run_stream("count", capabilities=[DurableCapability(run)]) as result:
            async for text in result.stream_text(delta=True, debounce_by=None):
                chunks.append(text)
                if stop_early:
                    break
        return "".join(chunks), run

    partial, first_run = asyncio.run(consume(stop_early=True))
    assert partial == "one "
    assert first_run.store.load().entries == {}, "a partial answer is never stored"
    full, second = asyncio.run(consume(stop_early=False))
    assert full == "one two three four"
    assert second.stats.replayed.model == 0 and second.stats.executed.model == 1
    third_text, third = asyncio.run(consume(stop_early=False))
    assert third_text == full and third.stats.replayed.model == 1


# --- an outcome that made the run fail is never replayed (issue 8, item 1) ---------------------------


@dataclass
class Transient:
    """Fails (asks for a retry) on the first attempt only, as a rate-limited API does."""

    calls: list[int] = field(default_factory=list)
    harness: DurableHarness | None = None

    def hit(self) -> bool:
        """Record a call; True when it should fail (attempt 1)."""
        assert self.harness is not None
        self.calls.append(self.harness.attempt)
        return self.harness.attempt == 1


def _deterministic_tool_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Asks for the same call with the same id every time, then answers once a tool result is in."""
    if any(part.part_kind == "tool-return" for message in messages for part in message.parts):
        return ModelResponse(parts=[TextPart("notified")])
    return ModelResponse(parts=[ToolCallPart("notify", {"channel": "ops"}, tool_call_id="call-1")])


def _transient_agent(source: str, transient: Transient) -> Agent[Any, Any]:
    """An agent with ``retries=0`` whose ``source`` asks for a retry on attempt 1 only."""
    from pydantic_ai import TextOutput, ToolOutput

    if source in ("tool-testmodel", "tool-functionmodel"):
        model: Any = TestModel() if source == "tool-testmodel" else FunctionModel(_deterministic_tool_model)
        agent: Agent[Any, Any] = Agent(model, retries=0)

        @agent.tool_plain
        def notify(channel: str) -> str:
            if transient.hit():
                raise ModelRetry("rate limited (HTTP 429)")
            return "sent"

        return agent

    def publish(text: str) -> str:
        if transient.hit():
            raise ModelRetry("store busy, try again")
        return f"published {text}"

    if source == "output-function":
        return Agent(TestModel(), output_type=ToolOutput(publish), retries=0)
    if source == "text-output-function":  # pydantic-ai wraps this retry itself: a ToolRetryError
        return Agent(TestModel(custom_output_text="draft"), output_type=TextOutput(publish), retries=0)
    assert source == "output-validator"
    agent = Agent(TestModel(custom_output_text="draft"), retries=0)

    @agent.output_validator
    def check(output: str) -> str:
        if transient.hit():
            raise ModelRetry("validation service busy")
        return output

    return agent


@pytest.mark.parametrize(
    "source", ["tool-testmodel", "tool-functionmodel", "output-function", "text-output-function", "output-validator"]
)
def test_a_transient_retry_that_failed_the_run_is_not_replayed(harness, source):
    transient = Transient(harness=harness)
    agent = _transient_agent(source, transient)
    with pytest.raises(UnexpectedModelBehavior, match=r"(?i)max"):
        harness.run(agent, "go")
    assert any("removed from the cache so a retry asks again" in line for line in harness.logs[-1].at("info"))

    result, _run, log = harness.run(agent, "go")

    assert transient.calls == [1, 2], "attempt 2 runs what failed live, once"
    assert result.output == Agent.run_sync(agent, "go").output, "the same output as a run without durable"
    assert not log.at("warning")


def test_without_durable_the_same_agent_recovers_on_a_second_run():
    """The reference behaviour the durable runs above must match."""
    harness = DurableHarness(base="unused")
    transient = Transient(harness=harness)
    agent = _transient_agent("tool-functionmodel", transient)
    harness.attempt = 1
    with pytest.raises(UnexpectedModelBehavior):
        agent.run_sync("go")
    harness.attempt = 2
    assert agent.run_sync("go").output == "notified"


def test_a_retry_the_run_got_past_still_replays(harness):
    """A lookup asked for one retry and then answered; a later tool exhausted its retries. On attempt 2
    the lookup's retry and its answer replay, and only the call that failed runs again."""
    lookups: list[int] = []
    notified: list[int] = []

    script = [("lookup", "l1"), ("lookup", "l2"), ("notify", "n1")]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answered = sum(isinstance(message, ModelResponse) for message in messages)
        if answered < len(script):
            name, call_id = script[answered]
            return ModelResponse(parts=[ToolCallPart(name, {"q": "ticket 42"}, tool_call_id=call_id)])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model), retries=0)

    @agent.tool_plain(retries=1)
    def lookup(q: str) -> str:
        lookups.append(harness.attempt)
        if len(lookups) == 1:
            raise ModelRetry("index warming up")
        return "found"

    @agent.tool_plain
    def notify(q: str) -> str:
        notified.append(harness.attempt)
        if harness.attempt == 1:
            raise ModelRetry("rate limited (HTTP 429)")
        return "sent"

    with pytest.raises(UnexpectedModelBehavior):
        harness.run(agent, "go")
    result, run, _log = harness.run(agent, "go")
    assert result.output == "done"
    assert lookups == [1, 1], "the lookup's retry and its answer replay"
    assert notified == [1, 2]
    # Replayed: the answers asking for the lookup (twice), its retry and its return. Asked again: the
    # answer that asked for notify (it failed the run with its retry), then the final answer.
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (2, 2)
    assert (run.stats.executed.model, run.stats.executed.tool) == (2, 1)
