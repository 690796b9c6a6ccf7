"""The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import DurableHarness, RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable import DurableCapability, DurableRun, StepStore


@pytest.fixture
def harness(tmp_path) -> DurableHarness:
    return DurableHarness(base=str(tmp_path / "cache"))


def counting_agent(calls: dict[str, int], fail_on: set[str] | None = None, **agent_kwargs: Any) -> Agent[Any, Any]:
    agent: Agent[Any, Any] = Agent(TestModel(), **agent_kwargs)

    @agent.tool_plain
    def lookup(city: str) -> str:
        calls["lookup"] = calls.get("lookup", 0) + 1
        return f"weather in {city}: sunny"

    @agent.tool_plain
    def notify(message: str) -> str:
        calls["notify"] = calls.get("notify", 0) + 1
        if fail_on and "notify" in fail_on:
            fail_on.discard("notify")
            raise ConnectionError("chat API down")
        return "sent"

    return agent


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
    assert run.replayed.model == 2 and run.replayed.tool == 2 and run.executed.total == 0
    assert run.saved_input_tokens == first.usage.input_tokens
    # Replayed steps cost no tokens in the second run's usage.
    assert second.usage.input_tokens == 0


def test_prompt_change_reruns_model_and_downstream_tools(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    harness.run(agent, "weather report")
    _, run, log = harness.run(agent, "weather report, please")
    assert run.replayed.total == 0
    assert calls == {"lookup": 2, "notify": 2}, "TestModel reuses tool call ids; the tools must still rerun"
    [warning] = log.at("warning")
    assert "step 4: model test:test differs from what attempt 1 recorded" in warning
    assert "changed: user prompt" in warning


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"instructions": "be terse"}, "instructions/system prompt"),
        ({"model_settings": {"temperature": 0.1}}, "model settings"),
        ({"output_type": int}, "output schema"),
    ],
)
def test_changed_component_is_named(harness, change, expected):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls), "weather report")
    _, run, log = harness.run(counting_agent(calls, **change), "weather report")
    [warning] = log.at("warning")
    assert expected in warning
    assert run.replayed.total == 0


def _history(*prompts: str) -> list[ModelMessage]:
    """The messages of earlier conversations, one agent run per prompt."""
    messages: list[ModelMessage] = []
    for prompt in prompts:
        messages = (
            Agent(TestModel(custom_output_text="noted")).run_sync(prompt, message_history=messages).all_messages()
        )
    return messages


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ((["hello", "how are you"], "now"), (["hello", "how are YOU"], "now"), ["message history"]),
        ((["hello"], "now"), (["hello", "how are you"], "now"), ["message history (5 messages, was 3)"]),
        ((["hello", "how are you"], "now"), (["hello", "how are you"], "later"), ["user prompt"]),
    ],
    ids=["earlier-prompt-edited", "history-extended", "current-prompt-edited"],
)
def test_message_history_changes_are_named_as_history(harness, before, after, expected):
    calls: dict[str, int] = {}
    agent = counting_agent(calls, instructions="be brief")
    history, prompt = before
    harness.run(agent, prompt, message_history=_history(*history))
    history, prompt = after
    _, run, log = harness.run(agent, prompt, message_history=_history(*history))
    [warning] = log.at("warning")
    assert warning.endswith(f"changed: {', '.join(expected)}. It runs live, and so does every step after it.")
    assert run.replayed.total == 0


def test_settings_change_invalidates_downstream_even_if_answer_is_identical(harness):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls), "weather report")
    # TestModel answers the same whatever the temperature: the tools must rerun all the same.
    _, run, _ = harness.run(counting_agent(calls, model_settings={"temperature": 0.3}), "weather report")
    assert calls == {"lookup": 2, "notify": 2}
    assert run.replayed.total == 0


def test_transport_settings_do_not_invalidate(harness):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls, model_settings={"timeout": 10}), "weather report")
    _, run, log = harness.run(counting_agent(calls, model_settings={"timeout": 99, "max_retries": 3}), "weather report")
    assert run.executed.total == 0 and run.replayed.total == 4
    assert not log.at("warning")


def test_tool_definition_change_is_named(harness):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls), "weather report")
    agent = counting_agent(calls)

    @agent.tool_plain
    def extra(x: int) -> int:
        return x

    _, _, log = harness.run(agent, "weather report")
    [warning] = log.at("warning")
    assert "tool definitions (+extra)" in warning


def test_deleting_the_cache_forces_a_full_rerun(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    _, run, _ = harness.run(agent, "weather report")
    run.store.clear()
    _, run, log = harness.run(agent, "weather report")
    assert run.replayed.total == 0 and calls == {"lookup": 2, "notify": 2}
    assert not log.at("warning")


def test_finish_deletes_everything(harness, tmp_path):
    agent = counting_agent({})
    _, run, _ = harness.run(agent, "weather report")
    assert run.store.exists()
    run.finish()
    assert not run.store.exists()
    assert list((tmp_path / "cache").iterdir()) == [], "empty dag/run/task folders are removed too"


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
    assert run.replayed.tool == 4 and run.replayed.model == 2 and run.executed.total == 0


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
    assert run.replayed.model == 1 and run.executed.total == 0


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

    async def stream_once() -> tuple[str, DurableRun]:
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
    assert run1.executed.model == 2 and run2.replayed.model == 2 and run2.executed.total == 0
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
    assert run.replayed.tool == 2 and run.executed.total == 0


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
    assert run2.replayed.model == live_first - 1, "every answer but the last one replays"
    assert run2.executed.model == 1


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
    assert (run2.replayed.model, run2.replayed.tool) == (1, 1)


def test_nothing_is_stored_after_a_request_that_cannot_be_fingerprinted(harness, tmp_path):
    calls: dict[str, int] = {}
    agent = counting_agent(calls, model_settings={"extra_body": {"opaque": object()}})
    harness.run(agent, "weather report")
    _, run, log = harness.run(agent, "weather report")
    assert calls == {"lookup": 2, "notify": 2}
    assert run.replayed.total == 0
    assert any("cannot be fingerprinted" in warning for warning in log.at("warning"))
    assert not list((tmp_path / "cache").rglob("*.json")), "entries no later request could ever match"


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
def test_output_function_side_effects_are_replayed_not_repeated(harness, form):
    from pydantic_ai import TextOutput, ToolOutput

    tickets: list[str] = []

    def file_ticket(title: str) -> str:
        """File a ticket: a side effect that must not happen twice."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    output_type: Any = {
        "function": file_ticket,
        "tool-output": ToolOutput(file_ticket, name="file_ticket"),
        "text-output": TextOutput(file_ticket),
    }[form]
    model = TestModel(custom_output_text="login broken") if form == "text-output" else TestModel()
    agent: Agent[Any, str] = Agent(model, output_type=output_type)
    first, _, _ = harness.run(agent, "file it")
    second, run, log = harness.run(agent, "file it")
    assert second.output == first.output == "TICKET-1"
    assert len(tickets) == 1, "the output function ran again"
    assert run.executed.total == 0 and run.replayed.tool == 1
    assert any("output function file_ticket" in line and "replayed" in line for line in log.at("info"))


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
def test_output_function_asking_for_a_retry_replays_the_same_path(harness, form):
    from pydantic_ai import TextOutput, ToolOutput

    calls: list[str] = []

    def finish(text: str) -> str:
        calls.append(text)
        if text == "draft":
            raise ModelRetry("not a draft")
        return f"published {text}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = "draft" if len(messages) == 1 else "final"
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"text": text}, tool_call_id=text)])
        return ModelResponse(parts=[TextPart(text)])

    output_type: Any = {"function": finish, "tool-output": ToolOutput(finish), "text-output": TextOutput(finish)}[form]
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)
    first, _, _ = harness.run(agent, "publish")
    second, run, _ = harness.run(agent, "publish")
    assert second.output == first.output == "published final"
    assert calls == ["draft", "final"], "both calls replayed: the retry and the accepted one"
    assert run.executed.total == 0


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
@pytest.mark.parametrize("validators", [1, 2])
def test_an_output_validator_failing_after_the_function_returned_does_not_run_the_function_again(
    harness, form, validators
):
    """pydantic-ai runs output validators inside the output step, after the output function: a validator
    that fails (I/O, as in pydantic-ai's SQL example) must not make a retry file the ticket again, and it
    runs again on the retry on what the function returned."""
    from pydantic_ai import RunContext, TextOutput, ToolOutput

    tickets: list[str] = []
    checked: list[tuple[str, str]] = []
    outage = {"left": 1}

    def file_ticket(title: str) -> str:
        """File a ticket: a side effect that must not happen twice."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"title": "login broken"}, "c1")])
        return ModelResponse(parts=[TextPart("login broken")])

    output_type: Any = {
        "function": file_ticket,
        "tool-output": ToolOutput(file_ticket, name="file_ticket"),
        "text-output": TextOutput(file_ticket),
    }[form]
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)

    if validators == 2:

        @agent.output_validator
        def tag(output: str) -> str:
            checked.append(("tag", output))
            return f"{output} [triaged]"

    @agent.output_validator
    async def link_ticket(ctx: RunContext[Any], output: str) -> str:
        checked.append(("link", output))
        if outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent, "file it")
    first = harness.logs[-1]
    result, run, log = harness.run(agent, "file it")

    assert tickets == ["login broken"], "the output function ran again on the retry"
    expected = "TICKET-1 [triaged]" if validators == 2 else "TICKET-1"
    assert result.output == expected
    assert [call for call in checked if call[0] == "link"] == [("link", expected)] * 2, checked
    assert (run.replayed.model, run.replayed.tool, run.executed.total) == (1, 1, 0)
    blamed = [line for line in first.at("info") if "file_ticket" in line and "failed" in line]
    assert blamed and all("output validator link_ticket failed" in line for line in blamed), first.at("info")
    assert not any("it is not cached" in line for line in first.at("info"))
    assert any("replayed from the cache; output validator link_ticket" in line for line in log.at("info"))
    assert not first.at("warning") and not log.at("warning")


@pytest.mark.parametrize("form", ["tool-output", "text-output"])
@pytest.mark.parametrize("raiser", ["function", "validator-of-an-agent-the-function-runs"])
def test_an_output_function_that_raised_itself_is_blamed_and_runs_again(harness, form, raiser):
    """Only a validator of this run failing after the function returned keeps its result: the function's own
    exception, even one out of a validator of another agent it runs, leaves nothing recorded."""
    from pydantic_ai import TextOutput, ToolOutput

    tickets: list[str] = []
    outage = {"left": 1}
    tracker: Agent[Any, str] = Agent(TestModel(custom_output_text="ok"))

    @tracker.output_validator
    def tracker_reachable(output: str) -> str:
        if outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        return output

    async def file_ticket(title: str) -> str:
        """File a ticket."""
        tickets.append(title)
        if raiser == "function" and outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        if raiser != "function":
            await tracker.run("file it")
        return f"TICKET-{len(tickets)}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"title": "login broken"}, "c1")])
        return ModelResponse(parts=[TextPart("login broken")])

    output_type: Any = ToolOutput(file_ticket, name="file_ticket") if form == "tool-output" else TextOutput(file_ticket)
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)

    @agent.output_validator
    def passes(output: str) -> str:
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent, "file it")
    first = harness.logs[-1]
    result, _run, _log = harness.run(agent, "file it")
    assert result.output == "TICKET-2" and len(tickets) == 2
    assert any("output function file_ticket" in line and "failed after" in line for line in first.at("info"))
    assert not any("output validator" in line for line in first.at("info"))


def test_a_result_recorded_before_a_validator_that_is_gone_is_not_handed_back_unvalidated(harness):
    """The entry says which validator failed on the recorded result: when the next try's agent has other
    validators, the recorded result could skip one, so the output function runs live again (with a warning)."""
    from pydantic_ai import ToolOutput

    tickets: list[str] = []

    def file_ticket(title: str) -> str:
        """File a ticket."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    def agent_checking_with(check: Any) -> Agent[Any, str]:
        agent: Agent[Any, str] = Agent(TestModel(), output_type=ToolOutput(file_ticket, name="file_ticket"))
        agent.output_validator(check)
        return agent

    def link_ticket(output: str) -> str:
        raise ConnectionError("tracker API down")

    def check_ticket(output: str) -> str:
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent_checking_with(link_ticket), "file it")
    result, _run, log = harness.run(agent_checking_with(check_ticket), "file it")
    assert result.output == "TICKET-2" and len(tickets) == 2
    assert any("output validator link_ticket failed on its result" in line for line in log.at("warning"))


@pytest.mark.parametrize("rewrite", ["reassign-parts", "replace-message"])
def test_history_rewritten_by_a_processor_is_seen(harness, rewrite):
    """pydantic-ai's supported ways to rewrite history mid-run: a message with a new ``parts`` list, or a
    new message. A digest remembered for the old content must never make the changed request replay."""
    import dataclasses
    import warnings

    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelRequest, ToolReturnPart

    def agent_writing(placeholder: str) -> Agent[Any, str]:
        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            answered = sum(isinstance(message, ModelResponse) for message in messages)
            if answered < 2:
                return ModelResponse(parts=[ToolCallPart("lookup", {"x": answered}, tool_call_id=f"c{answered}")])
            return ModelResponse(parts=[TextPart(f"based on {messages[2].parts[0].content}")])

        def shorten(messages: list[ModelMessage]) -> list[ModelMessage]:
            rewritten = []
            for message in messages:
                if message is not messages[-1] and isinstance(message, ModelRequest):
                    parts = [
                        dataclasses.replace(p, content=placeholder) if isinstance(p, ToolReturnPart) else p
                        for p in message.parts
                    ]
                    if rewrite == "reassign-parts":
                        message.parts = parts
                    else:
                        message = dataclasses.replace(message, parts=parts)
                rewritten.append(message)
            return rewritten

        agent: Agent[Any, str] = Agent(FunctionModel(model), capabilities=[ProcessHistory(shorten)])

        @agent.tool_plain
        def lookup(x: int) -> str:
            return f"full result {x}"

        return agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        harness.run(agent_writing("[omitted]"), "go")
        result, run, log = harness.run(agent_writing("[omitted by v2]"), "go")
    assert result.output == "based on [omitted by v2]"
    assert run.executed.model >= 1, "the request that saw the new placeholder ran live"
    assert any("changed: message history" in warning for warning in log.at("warning"))


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
    assert (run2.replayed.model, run2.replayed.tool) == (1, 1)


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
        agent.run_sync("go", capabilities=[DurableCapability(run)], usage_limits=run.usage_limits(limits))
    attempt["n"] = 2
    live.clear()
    run2, _ = harness.open()
    with pytest.raises(UsageLimitExceeded):
        agent.run_sync("go", capabilities=[DurableCapability(run2)], usage_limits=run2.usage_limits(limits))
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
    assert (run.replayed.model, run.replayed.tool) == (1, 1)
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
        usage_limits=run.usage_limits(UsageLimits(request_limit=1, tool_calls_limit=1)),
    )
    assert run.replayed.model == 2 and "sunny" in result.output
    run.store.clear()
    run3, _ = harness.open()
    with pytest.raises(UsageLimitExceeded):
        agent.run_sync(
            "weather report",
            capabilities=[DurableCapability(run3)],
            usage_limits=run3.usage_limits(UsageLimits(request_limit=1)),
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
    assert calls["n"] == 1 and run.replayed.tool == 1


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


def test_logs_never_contain_the_prompt_at_info(harness):
    secret_prompt = "the launch code is 0000-hunter2"
    harness.run(counting_agent({}), secret_prompt)
    assert not any("hunter2" in line for _, line in harness.logs[-1].lines)


def test_python_logging_logger_works(harness, caplog):
    caplog.set_level(logging.INFO)
    log = logging.getLogger("durable-test")
    store = StepStore.for_task(fsspec.filesystem("file"), harness.base, "file://x", harness.identity, warn=log.warning)
    run = DurableRun.open(store, attempt=1, log=log)
    Agent(TestModel()).run_sync("hi", capabilities=[DurableCapability(run)])
    run.log_summary()
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 1 new steps (1 model, 0 tool)" in caplog.text


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
    assert run.replayed.tool == 1 and run.replayed.model == 1


def test_stream_left_before_its_end_is_not_replayed(harness):
    async def long_answer(messages: list[ModelMessage], info: AgentInfo):
        for word in ("one ", "two ", "three ", "four"):
            yield word

    agent: Agent[Any, Any] = Agent(FunctionModel(stream_function=long_answer))

    async def consume(stop_early: bool) -> tuple[str, DurableRun]:
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
    assert second.replayed.model == 0 and second.executed.model == 1
    third_text, third = asyncio.run(consume(stop_early=False))
    assert third_text == full and third.replayed.model == 1


def test_an_output_holding_a_secret_is_not_recorded(tmp_path):
    """The result entry follows the rule of every step: a registered secret is never stored; a retry
    then replays the steps instead of returning the output."""
    from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY

    log = RecordingLog()
    store = local_store(tmp_path / "cache", task_identity("d", "t", run_id="r"))
    secret = "hunter2-s3cr3t"
    run = DurableRun.open(store, attempt=1, log=log, contains_secret=lambda payload: secret in str(payload))
    run.record_output(f"the password is {secret}")
    assert RESULT_ENTRY not in store.load().entries
    warnings = log.at("warning")
    assert any("registered as secret" in text and "replays the steps" in text for text in warnings), warnings
    run.record_output("nothing to hide")
    retry = DurableRun.open(store, attempt=2, log=log)
    recorded = retry.recorded_output()
    assert recorded is not None and (recorded.value, recorded.attempt) == ("nothing to hide", 1)
    # The first try after a clear (or of a DAG run) never takes it: a clear asks for a new run.
    cleared = DurableRun.open(store, attempt=2, log=log, takes_recorded_output=False)
    assert cleared.recorded_output() is None
    assert any("first try since the DAG run started or the task was cleared" in text for text in log.at("warning"))


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "is_retry"),
    [
        (1, 2, 2, False),  # the first try of a DAG run
        (2, 2, 2, True),  # Airflow's retry
        (3, 2, 2, True),
        (3, 4, 2, False),  # the first try after a clear of try 2 (max_tries = 2 + retries)
        (4, 4, 2, True),  # a retry after that clear
        (2, 1, 0, False),  # retries=0: a second try can only come from a clear
    ],
)
def test_only_a_retry_takes_a_recorded_output(try_number, max_tries, retries, is_retry):
    from types import SimpleNamespace

    from airflow_pydantic_ai.durability import retries_an_earlier_try

    ti = SimpleNamespace(try_number=try_number, max_tries=max_tries, task=SimpleNamespace(retries=retries))
    assert retries_an_earlier_try(ti) is is_retry


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
    assert (run.replayed.model, run.replayed.tool) == (2, 2)
    assert (run.executed.model, run.executed.tool) == (2, 1)


# --- whose cache is it (issue 8, item 2) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("try_number", "resuming", "attempts", "belongs"),
    [
        (1, False, [1], False),  # a run created again: its try 1 cannot have a cache of its own
        (2, False, [1], True),  # a retry, a clear, another worker
        (3, False, [1, 2], True),
        (2, False, [1, 2], False),  # try 2 of a new run, after its try 1 failed before reading the cache
        (1, True, [1], True),  # try 1 resuming from a deferral
        (1, True, [2], False),
        (0, False, [1], False),  # airflow tasks test
    ],
)
def test_whose_cache_it_is_follows_the_try_numbers(try_number, resuming, attempts, belongs):
    from airflow_pydantic_ai.durability import ThisTry, cache_belongs_to_this_dag_run

    assert cache_belongs_to_this_dag_run(attempts, ThisTry(try_number, resuming)) is belongs


@pytest.mark.parametrize(("reschedules", "belongs"), [(0, False), (1, True), (3, True)])
def test_a_rescheduled_try_owns_the_steps_of_its_own_try_number(reschedules, belongs):
    """A reschedule (3.4 retry policy RESCHEDULE, AirflowRescheduleException) keeps the try number."""
    from types import SimpleNamespace

    from airflow_pydantic_ai.durability import ThisTry, cache_belongs_to_this_dag_run

    ti = SimpleNamespace(try_number=1, _ti_context_from_server=None)
    this_try = ThisTry.of(ti, reschedules=reschedules)
    assert cache_belongs_to_this_dag_run([1], this_try) is belongs


def test_a_cache_that_is_not_this_runs_is_deleted_with_one_warning(harness):
    calls: dict[str, int] = {}
    with pytest.raises(ConnectionError):
        harness.run(counting_agent(calls, fail_on={"notify"}), "weather report")
    log = RecordingLog()
    run = DurableRun.open(harness.store(log), attempt=1, log=log, belongs=lambda tries: False)
    assert run.entries == {}
    [warning] = log.at("warning")
    assert "was left by an earlier run with the same ids, since deleted (2 steps by try 1, written " in warning
    assert not harness.store(log).exists()
