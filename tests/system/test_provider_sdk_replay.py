"""Durable replay through the real Anthropic and google-genai clients, against local servers speaking their wire
formats (the OpenAI client has ``test_openai_client.py``).

One scenario each: the model asks for a tool (with signed reasoning), the tool runs, and the next request is
refused as overloaded, so try 1 fails; try 2 replays the model step and the tool call. Its first live request
must be, byte for byte, the one a run that never failed sent at that point: signatures, redacted reasoning and
call ids included. The servers answer a request by its bytes (the same request, the same ids), as a caching
gateway would, so any difference comes from what the replay gave the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models import Model
from tests.helpers.anthropic_server import anthropic_server
from tests.helpers.durable import DurableHarness
from tests.helpers.gemini_server import gemini_server
from tests.helpers.wire_server import Turn, WireServer

PROMPT = "Triage ticket 42."
FINAL = "Ticket 42: the login page times out; assigned to the web team."


def _anthropic_model(url: str) -> Model:
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    # No SDK retries: the overloaded answer fails the try at once.
    client = AsyncAnthropic(api_key="sk-ant-test", base_url=url, max_retries=0)
    return AnthropicModel("claude-test", provider=AnthropicProvider(anthropic_client=client))


def _gemini_model(url: str) -> Model:
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.providers.google import GoogleProvider

    return GoogleModel("gemini-test", provider=GoogleProvider(api_key="gemini-test-key", base_url=url))


def _anthropic_has_tool_result(request: dict[str, Any]) -> bool:
    return any(
        isinstance(message["content"], list) and any(block.get("type") == "tool_result" for block in message["content"])
        for message in request["messages"]
    )


def _gemini_has_tool_result(request: dict[str, Any]) -> bool:
    return any("functionResponse" in part for content in request["contents"] for part in content.get("parts", []))


@dataclass(frozen=True)
class Provider:
    """A provider's SDK under test: its server, its model on that server, how its requests carry tool results."""

    server: Callable[[Callable[[dict[str, Any]], Turn]], WireServer]
    model: Callable[[str], Model]
    has_tool_result: Callable[[dict[str, Any]], bool]


PROVIDERS = {
    "anthropic": Provider(anthropic_server, _anthropic_model, _anthropic_has_tool_result),
    "gemini": Provider(gemini_server, _gemini_model, _gemini_has_tool_result),
}


@pytest.mark.parametrize("provider_name", list(PROVIDERS))
def test_the_first_live_request_after_a_replay_is_the_one_a_run_that_never_failed_sent(tmp_path, provider_name):
    provider = PROVIDERS[provider_name]
    overload_next_answer = False
    fetched: list[int] = []

    def script(request: dict[str, Any]) -> Turn:
        nonlocal overload_next_answer
        if not provider.has_tool_result(request):
            return Turn(thinking="The ticket has to be read first.", tool_calls=[("fetch_ticket", {"ticket_id": 42})])
        if overload_next_answer:
            overload_next_answer = False
            return Turn(overloaded=True)
        return Turn(text=FINAL)

    def agent(url: str) -> Agent[None, str]:
        def fetch_ticket(ticket_id: int) -> dict[str, Any]:
            """Fetch a support ticket."""
            fetched.append(ticket_id)
            return {"id": ticket_id, "title": "Login page times out"}

        return Agent(provider.model(url), system_prompt="You triage support tickets.", tools=[fetch_ticket])

    with provider.server(script) as server:
        reference = agent(server.url).run_sync(PROMPT)
        assert reference.output == FINAL
        assert len(server.requests) == 2
        never_failed = server.requests[1]

        harness = DurableHarness(str(tmp_path))
        overload_next_answer = True
        with pytest.raises(ModelHTTPError):
            harness.run(agent(server.url), PROMPT)
        assert len(server.requests) == 4, "try 1: the tool call, then the overloaded answer"

        result, _, log = harness.run(agent(server.url), PROMPT)

    assert len(server.requests) == 5, "try 2 asked only for the final answer"
    first_live = server.requests[4]
    assert first_live.path == never_failed.path
    assert first_live.body == never_failed.body
    assert result.output == FINAL
    assert log.summary() == (
        "Durable: replayed 2 cached steps (1 model, 1 tool), executed 1 new steps (1 model, 0 tool)"
    )
    assert fetched == [42, 42], "the reference run and try 1 fetched; try 2 replayed"
