"""A request that changed between tries runs live, with every step after it, and the warning names what
changed (prompt, history, instructions, settings, output schema, tool definitions); settings that only
shape the transport change nothing; a request that cannot be fingerprinted is neither replayed nor stored.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import counting_agent


def test_prompt_change_reruns_model_and_downstream_tools(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    harness.run(agent, "weather report")
    _, run, log = harness.run(agent, "weather report, please")
    assert run.stats.replayed.total == 0
    assert calls == {"lookup": 2, "notify": 2}, "TestModel reuses tool call ids; the tools must still rerun"
    [warning] = log.at("warning")
    assert "step 4: model test:test differs from what attempt 1 recorded" in warning
    assert "changed: user prompt" in warning


def _lookup_then_answer(instructions_at_step_2: dict[str, str]) -> Agent[Any, str]:
    """A model that calls ``lookup`` then answers; the instructions of its second request are
    ``instructions_at_step_2["text"]`` (its first request's never change)."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Paris"}, tool_call_id="lookup-1")])
        return ModelResponse(parts=[TextPart("sunny")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.instructions
    def instructions(ctx: RunContext[Any]) -> str:
        return "be brief" if ctx.run_step < 2 else instructions_at_step_2["text"]

    @agent.tool_plain
    def lookup(city: str) -> str:
        return f"weather in {city}: sunny"

    return agent


def test_the_warning_names_the_recorded_step_it_differs_from_and_the_try_that_recorded_it(harness):
    instructions = {"text": "answer in one word"}
    agent = _lookup_then_answer(instructions)
    harness.run(agent, "weather in Paris")  # try 1: step 1 model, step 2 lookup, step 3 model
    instructions["text"] = "answer in two words"
    harness.run(agent, "weather in Paris")  # try 2: replays steps 1 and 2, records its answer as step 4
    instructions["text"] = "answer in three words"
    _, run, log = harness.run(agent, "weather in Paris")

    assert (run.stats.replayed.total, run.stats.executed.total) == (2, 1)
    [warning] = log.at("warning")
    # The new request is listed as step 5; the request it is compared with is try 2's, listed as step 4.
    assert warning == (
        "Durable: step 5: model function:function:model: differs from what attempt 2 recorded as step 4; "
        "changed: instructions/system prompt. It runs live, and so does every step after it."
    )
    [second_try] = harness.logs[1].at("warning")
    assert "step 4: model function:function:model: differs from what attempt 1 recorded as step 3;" in second_try


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
    assert run.stats.replayed.total == 0


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
    assert run.stats.replayed.total == 0


def test_settings_change_invalidates_downstream_even_if_answer_is_identical(harness):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls), "weather report")
    # TestModel answers the same whatever the temperature: the tools must rerun all the same.
    _, run, _ = harness.run(counting_agent(calls, model_settings={"temperature": 0.3}), "weather report")
    assert calls == {"lookup": 2, "notify": 2}
    assert run.stats.replayed.total == 0


def test_transport_settings_do_not_invalidate(harness):
    calls: dict[str, int] = {}
    harness.run(counting_agent(calls, model_settings={"timeout": 10}), "weather report")
    _, run, log = harness.run(counting_agent(calls, model_settings={"timeout": 99, "max_retries": 3}), "weather report")
    assert run.stats.executed.total == 0 and run.stats.replayed.total == 4
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


def test_nothing_is_stored_after_a_request_that_cannot_be_fingerprinted(harness, tmp_path):
    calls: dict[str, int] = {}
    agent = counting_agent(calls, model_settings={"extra_body": {"opaque": object()}})
    harness.run(agent, "weather report")
    _, run, log = harness.run(agent, "weather report")
    assert calls == {"lookup": 2, "notify": 2}
    assert run.stats.replayed.total == 0
    assert any("cannot be fingerprinted" in warning for warning in log.at("warning"))
    assert not list((tmp_path / "cache").rglob("*.json")), "entries no later request could ever match"


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
    assert run.stats.executed.model >= 1, "the request that saw the new placeholder ran live"
    assert any("changed: message history" in warning for warning in log.at("warning"))
