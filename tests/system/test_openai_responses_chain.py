"""A replayed OpenAI Responses answer continues the server-side chain (issue 28), through pydantic-ai's real
OpenAI client against a local server speaking the Responses API (``tests/helpers/responses_server.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from tests.helpers.durable import DurableHarness
from tests.helpers.responses_server import ResponsesServer

pytest.importorskip("openai")

PROMPT = "What is the weather in Paris? Tell the team."


def _script(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """Look the weather up, then notify the team, then answer: decided by the tool results seen so far."""
    outputs = [item for item in conversation if item.get("type") == "function_call_output"]
    if not outputs:
        return {"tool_calls": [("lookup", {"city": "Paris"})]}
    if len(outputs) == 1:
        return {"tool_calls": [("notify", {"message": "Paris: sunny"})]}
    return {"content": "Sunny in Paris; the team knows."}


def _agent(server: ResponsesServer, failures: set[str], transport: str = "http") -> Agent[None, str]:
    """The agent, its model on ``server`` over HTTP with ``openai_previous_response_id="auto"``, or over the Responses
    WebSocket (``openai_transport="websocket"``, where "auto" is the default); ``"fallback"``: over HTTP, as the
    first model of a ``FallbackModel`` (which the caching wrapper sees instead)."""
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
    from pydantic_ai.providers.openai import OpenAIProvider

    if transport == "websocket":
        client = AsyncOpenAI(base_url=server.base_url, websocket_base_url=server.websocket_url, api_key="sk-test")
        settings: dict[str, Any] = {"openai_transport": "websocket"}
    else:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        settings = {"openai_previous_response_id": "auto"}
    model = OpenAIResponsesModel(
        "gpt-test",
        provider=OpenAIProvider(openai_client=client),
        settings=OpenAIResponsesModelSettings(**settings),  # type: ignore[typeddict-item]
    )
    if transport == "fallback":
        from pydantic_ai.models.fallback import FallbackModel
        from pydantic_ai.models.test import TestModel

        model = FallbackModel(model, TestModel())  # type: ignore[assignment]
    agent: Agent[None, str] = Agent(model, instructions="You help with the weather.")

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        return f"{city}: sunny"

    @agent.tool_plain
    def notify(message: str) -> str:
        """Tell the team; down on the first try."""
        if "notify" in failures:
            failures.discard("notify")
            raise ConnectionError("chat API down")
        return "sent"

    return agent


def _transports() -> list[str]:
    """HTTP (alone, streamed, and under a ``FallbackModel``), and the Responses WebSocket where this pydantic-ai
    has it (2.68; not 2.62)."""
    from pydantic_ai.models.openai import OpenAIResponsesModelSettings

    found = ["http", "http-streamed", "fallback"]
    return [*found, "websocket"] if "openai_transport" in OpenAIResponsesModelSettings.__annotations__ else found


async def _ignore_events(ctx: Any, events: Any) -> None:
    async for _ in events:
        pass


def _run_options(transport: str) -> dict[str, Any]:
    """``run_sync`` options: an event stream handler makes pydantic-ai stream each request (``http-streamed``)."""
    return {"event_stream_handler": _ignore_events} if transport == "http-streamed" else {}


def _reference_requests(transport: str = "http") -> list[dict[str, Any]]:
    """The requests of a run that never failed (no durability), as the server received them."""
    with ResponsesServer(_script) as server:
        result = _agent(server, set(), transport).run_sync(PROMPT, **_run_options(transport))
    assert result.output == "Sunny in Paris; the team knows."
    return server.requests


@pytest.mark.parametrize("transport", _transports())
def test_a_replayed_response_continues_the_responses_chain(tmp_path, transport):
    reference = _reference_requests(transport)
    assert len(reference) == 3
    assert [request.get("previous_response_id") for request in reference] == [None, "resp_1", "resp_3"]
    harness = DurableHarness(str(tmp_path))
    with ResponsesServer(_script) as server:
        with pytest.raises(ConnectionError):
            harness.run(_agent(server, {"notify"}, transport), PROMPT, **_run_options(transport))
        assert len(server.requests) == 2  # the lookup and the notify calls, then notify failed
        result, run, log = harness.run(_agent(server, set(), transport), PROMPT, **_run_options(transport))

    assert result.output == "Sunny in Paris; the team knows."
    assert server.transports == ["websocket" if transport == "websocket" else "http"] * 3
    assert log.summary() == (
        "Durable: replayed 3 cached steps (2 model, 1 tool), executed 2 new steps (1 model, 1 tool)"
    )
    first_live = server.requests[2]
    assert first_live.get("stream", False) is (transport == "http-streamed")
    # It continues from the last replayed response, with only the new item: notify's result.
    assert first_live["previous_response_id"] == "resp_3"
    assert [item["type"] for item in first_live["input"]] == ["function_call_output"]
    assert first_live == reference[2], "the request after the replay is the one a run that never failed sends"
    assert not log.at("warning")

    # The report's saved tokens are what try 1 paid for the two replayed requests (1 and 3 conversation items),
    # and try 2 paid what the run that never failed paid for its last request (5 items): nothing uploaded twice.
    tokens = run.report().to_json()["tokens"]
    assert tokens["saved"] == {"input": 110 + 130, "output": 20}
    assert tokens["live"] == {"input": 150, "output": 10}


@pytest.mark.parametrize("transport", [transport for transport in _transports() if transport != "fallback"])
def test_a_chain_gone_on_the_server_sends_the_whole_conversation_once(tmp_path, transport):
    """The stored responses expired between the tries: the server rejects the continuation, and the request goes
    out again with the whole conversation (a WARNING says so) instead of failing every retry. (Under a
    ``FallbackModel`` the rejection never reaches the caching wrapper: the next model of the fallback answers.)"""
    reference = _reference_requests(transport)
    harness = DurableHarness(str(tmp_path))
    with ResponsesServer(_script) as server:
        with pytest.raises(ConnectionError):
            harness.run(_agent(server, {"notify"}, transport), PROMPT, **_run_options(transport))
        server.forget()
        result, _, log = harness.run(_agent(server, set(), transport), PROMPT, **_run_options(transport))

    assert result.output == "Sunny in Paris; the team knows."
    rejected, resent = server.requests[2:]
    assert rejected["previous_response_id"] == "resp_3"
    assert "previous_response_id" not in resent
    assert len(resent["input"]) == 5  # the prompt, two calls and their two results
    assert resent["input"][-1] == reference[2]["input"][-1]
    (warning,) = log.at("warning")
    assert "the provider no longer has the response the replayed steps ended with" in warning
    assert "sending the whole conversation instead" in warning
