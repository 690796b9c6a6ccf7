"""The local batch servers (``tests/helpers/batch_servers.py``) with plain pydantic-ai agents on the real ``openai``
and ``anthropic`` SDKs: what pydantic-ai's ``BatchModelRequests`` and OpenAI's background mode do today, which the
durable batch support (issue 38) builds on. System tier: the servers listen on sockets, and one test starts the
standalone server in a subprocess."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, UserError
from pydantic_ai.messages import ModelResponse
from pydantic_ai.output import PendingModelResponse
from tests.helpers.batch_servers import (
    AnthropicBatchServer,
    OpenAIBatchServer,
    Turn,
    anthropic_model,
    batching,
    fast_background,
    openai_model,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Server = OpenAIBatchServer | AnthropicBatchServer


def _model(server: Server) -> Any:
    return openai_model(server) if isinstance(server, OpenAIBatchServer) else anthropic_model(server)


@pytest.fixture(params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Server:
    """Each test on both providers' batch servers."""
    return request.getfixturevalue(f"{request.param}_batch_server")


def _has_tool_result(body: dict[str, Any]) -> bool:
    """Whether a Responses body or Messages params already holds the result of a tool call."""
    items = body.get("input", body.get("messages")) or []
    for item in items:
        if item.get("type") == "function_call_output":
            return True
        content = item.get("content")
        if isinstance(content, list) and any(part.get("type") == "tool_result" for part in content):
            return True
    return False


def test_agent_runs_to_its_answer_through_one_batch(server: Server) -> None:
    agent = Agent(_model(server), capabilities=[batching()])

    result = agent.run_sync("hello")

    assert result.output == "answer to: hello"
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse) and last.state == "complete"
    batch = server.counters.batches[0]
    # The final response names its batch and request, and is priced as a batch request.
    assert last.provider_details is not None
    assert last.provider_details["batch"] == {"id": batch.id, "custom_id": batch.custom_ids[0]}
    assert last.provider_details["processing"] == "batch"
    counters = server.counters
    assert (counters.batches_created, counters.requests_submitted, counters.live_requests) == (1, 1, 0)
    assert counters.downloads == 1
    if isinstance(server, OpenAIBatchServer):
        # The JSONL is uploaded, and deleted once the batch completed.
        assert (counters.files_uploaded, counters.files_deleted) == (1, 1)
        assert batch.bodies[batch.custom_ids[0]]["model"] == "gpt-4o"


def test_each_step_of_a_tool_run_is_a_batch_of_its_own(server: Server) -> None:
    calls: list[str] = []

    def answer(body: dict[str, Any]) -> Turn:
        if _has_tool_result(body):
            return Turn(text="the weather is sunny")
        return Turn(tool_calls=[("weather", {"city": "Paris"})])

    server.answer = answer
    agent = Agent(_model(server), capabilities=[batching()])

    @agent.tool_plain
    def weather(city: str) -> str:
        calls.append(city)
        return "sunny"

    result = agent.run_sync("weather in Paris?")

    assert result.output == "the weather is sunny"
    assert calls == ["Paris"]
    assert server.counters.batches_created == 2
    # The custom_id derives from the request body: another request, another id.
    assert server.counters.batches[0].custom_ids != server.counters.batches[1].custom_ids


def test_batch_ends_after_the_polls_the_test_asks_for(server: Server) -> None:
    server.knobs.polls_until_end = 3
    result = Agent(_model(server), capabilities=[batching()]).run_sync("hello")

    assert result.output == "answer to: hello"
    # OpenAI reads the output file named in the ended batch; Anthropic's SDK retrieves the batch once more for its
    # results_url, which counts as one more poll.
    extra = 1 if isinstance(server, AnthropicBatchServer) else 0
    assert server.counters.batches[0].polls == 3 + extra
    assert server.counters.polls == 3 + extra


@pytest.mark.parametrize("outcome", ["expired", "errored"])
def test_expired_or_errored_batch_is_resubmitted_with_the_same_custom_id(server: Server, outcome: str) -> None:
    server.knobs.outcomes = [outcome]
    result = Agent(_model(server), capabilities=[batching()]).run_sync("hello")

    assert result.output == "answer to: hello"
    first, second = server.counters.batches
    assert (first.outcome, second.outcome) == (outcome, "succeeded")
    # Resubmitted as the same request: the same body and custom_id, in a new batch.
    assert first.custom_ids == second.custom_ids
    assert first.bodies == second.bodies
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse) and last.provider_details is not None
    assert last.provider_details["batch"] == {"id": second.id, "custom_id": second.custom_ids[0], "resubmissions": 1}


def test_resubmissions_stop_at_max_resubmissions(server: Server) -> None:
    server.knobs.outcomes = ["expired", "expired"]
    agent = Agent(_model(server), capabilities=[batching(max_resubmissions=1)])

    with pytest.raises(ModelAPIError, match="expired"):
        agent.run_sync("hello")
    assert server.counters.batches_created == 2


def test_an_invalid_request_is_not_resubmitted(server: Server) -> None:
    server.knobs.outcomes = ["invalid"]
    with pytest.raises(ModelHTTPError) as raised:
        Agent(_model(server), capabilities=[batching()]).run_sync("hello")
    assert raised.value.status_code == 400
    assert server.counters.batches_created == 1


def test_pending_output_ends_the_run_and_a_second_run_collects_it(server: Server) -> None:
    server.knobs.polls_until_end = 2

    def agent() -> Agent[None, str | PendingModelResponse]:
        """A fresh agent and capability for each run, as in another process: one capability's pool shares a check of
        a batch made within ``poll_interval`` of the last one, so runs resumed quickly on it would not poll."""
        return Agent(_model(server), output_type=[str, PendingModelResponse], capabilities=[batching()])

    first = agent().run_sync("hello")

    assert isinstance(first.output, PendingModelResponse)
    pending = first.all_messages()[-1]
    assert pending is first.output.response
    assert isinstance(pending, ModelResponse) and pending.state == "suspended" and pending.parts == []
    # The ticket: the batch handle, the request's custom_id, the polls so far; and a response id naming both.
    batch = server.counters.batches[0]
    assert pending.provider_details is not None
    ticket = pending.provider_details["batch"]
    assert (ticket["custom_id"], ticket["batch"]["id"], ticket["polls"]) == (batch.custom_ids[0], batch.id, 0)
    assert pending.provider_response_id == f"batch:{batch.id}:{batch.custom_ids[0]}"
    assert server.counters.polls == 0

    # Each later run with that history polls once; the batch is still running after the first poll.
    second = agent().run_sync(message_history=first.all_messages())
    assert isinstance(second.output, PendingModelResponse)
    assert second.output.response.provider_details["batch"]["polls"] == 1
    third = agent().run_sync(message_history=second.all_messages())

    assert third.output == "answer to: hello"
    assert server.counters.batches_created == 1
    assert server.counters.downloads == 1
    # Ending a run on a pending response leaves the batch running for a later run: it is not cancelled.
    assert server.counters.cancels == 0


def test_a_resumed_run_resubmits_an_expired_batch_and_the_ticket_counts_it(server: Server) -> None:
    """The resubmission count lives in the ticket, so it holds across runs (and processes) resuming the history."""
    server.knobs.outcomes = ["expired", "expired"]

    def agent() -> Agent[None, str | PendingModelResponse]:
        return Agent(
            _model(server), output_type=[str, PendingModelResponse], capabilities=[batching(max_resubmissions=1)]
        )

    first = agent().run_sync("hello")
    second = agent().run_sync(message_history=first.all_messages())

    # The run that found the first batch expired submitted the request again, and ended waiting on the new batch.
    assert isinstance(second.output, PendingModelResponse)
    ticket = second.output.response.provider_details["batch"]
    first_batch, second_batch = server.counters.batches
    assert (ticket["batch"]["id"], ticket["resubmissions"], ticket["polls"]) == (second_batch.id, 1, 0)
    assert ticket["custom_id"] == first_batch.custom_ids[0] == second_batch.custom_ids[0]
    # The second batch expires too, and max_resubmissions=1 is spent: the error reaches the run.
    with pytest.raises(ModelAPIError, match="expired"):
        agent().run_sync(message_history=second.all_messages())
    assert server.counters.batches_created == 2


def test_batch_ends_after_a_wall_clock_delay(server: Server) -> None:
    server.knobs.delay = 0.5
    result = Agent(_model(server), capabilities=[batching()]).run_sync("hello")

    assert result.output == "answer to: hello"
    assert server.counters.polls >= 2


def test_a_batch_the_provider_no_longer_has_raises_suspended_response_expired(server: Server) -> None:
    from pydantic_ai.exceptions import SuspendedResponseExpired

    def agent() -> Agent[None, str | PendingModelResponse]:
        return Agent(_model(server), output_type=[str, PendingModelResponse], capabilities=[batching()])

    first = agent().run_sync("hello")
    server.forget()

    with pytest.raises(SuspendedResponseExpired):
        agent().run_sync(message_history=first.all_messages())
    assert server.counters.batches_created == 1 and server.counters.batches == []


def test_results_download_waits_until_released(server: Server) -> None:
    server.hold_results()
    agent = Agent(_model(server), capabilities=[batching()])

    async def run_while_held() -> Any:
        run = asyncio.ensure_future(agent.run("hello"))
        await asyncio.to_thread(server.wait_for, lambda counters: counters.downloads_started == 1)
        await asyncio.sleep(0.2)
        assert not run.done() and server.counters.downloads == 0
        server.release_results()
        return await run

    result = asyncio.run(run_while_held())

    assert result.output == "answer to: hello"
    assert (server.counters.downloads_started, server.counters.downloads) == (1, 1)


def test_a_run_lost_while_its_batch_is_created_leaves_a_batch_the_next_run_submits_again(server: Server) -> None:
    """The kill point between the provider creating a batch and the client learning its id: nothing on the client
    side knows the batch, so the next run submits the same request (same custom_id) in a second batch."""
    server.hold("create")

    async def lose_the_run() -> None:
        run = asyncio.ensure_future(Agent(_model(server), capabilities=[batching()]).run("hello"))
        await asyncio.to_thread(server.wait_for, lambda counters: counters.batches_created == 1)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(lose_the_run())
    server.release("create")
    result = Agent(_model(server), capabilities=[batching()]).run_sync("hello")

    assert result.output == "answer to: hello"
    first, second = server.counters.batches
    assert first.custom_ids == second.custom_ids and first.polls == 0


def test_a_cancelled_run_cancels_its_batch(server: Server) -> None:
    server.knobs.polls_until_end = 1000
    agent = Agent(_model(server), capabilities=[batching()])

    async def cancel_while_waiting() -> None:
        run = asyncio.ensure_future(agent.run("hello"))
        await asyncio.to_thread(server.wait_for, lambda counters: counters.polls >= 1)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancel_while_waiting())

    assert server.counters.cancels == 1
    assert server.counters.batches[0].cancelled


def test_chat_completions_model_has_no_batch_api(openai_batch_server: OpenAIBatchServer) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    chat = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=openai_batch_server.base_url, api_key="sk-x"))
    with pytest.raises(UserError, match="Responses API"):
        Agent(chat, capabilities=[batching()]).run_sync("hello")


def test_background_response_completes_after_the_polls_asked_for(
    openai_batch_server: OpenAIBatchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_background(monkeypatch)
    openai_batch_server.knobs.background_polls = 3
    agent = Agent(openai_model(openai_batch_server), model_settings={"openai_background": True})

    result = agent.run_sync("hello")

    assert result.output == "answer to: hello"
    counters = openai_batch_server.counters
    assert (counters.background_creates, counters.background_polls, counters.live_requests) == (1, 3, 0)
    assert counters.batches_created == 0
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse) and last.state == "complete"
    assert last.provider_response_id == "resp_1"


def test_background_pending_output_ends_the_run_with_the_response_id(
    openai_batch_server: OpenAIBatchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_background(monkeypatch)
    openai_batch_server.knobs.background_polls = 2
    agent = Agent(
        openai_model(openai_batch_server),
        output_type=[str, PendingModelResponse],
        model_settings={"openai_background": True},
    )

    first = agent.run_sync("hello")

    assert isinstance(first.output, PendingModelResponse)
    pending = first.output.response
    assert pending.state == "suspended" and pending.provider_response_id == "resp_1"
    assert pending.provider_details is not None and pending.provider_details["background"] is True
    second = agent.run_sync(message_history=first.all_messages())
    assert isinstance(second.output, PendingModelResponse)
    third = agent.run_sync(message_history=second.all_messages())
    assert third.output == "answer to: hello"
    counters = openai_batch_server.counters
    assert (counters.background_creates, counters.background_polls) == (1, 2)


def test_airflow_connection_to_the_server_builds_a_batching_model(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.hooks.pydantic_ai import PydanticAIHook

    server.connect(monkeypatch, "batch_llm")
    model = PydanticAIHook("batch_llm").get_model()

    assert Agent(model, capabilities=[batching()]).run_sync("hello").output == "answer to: hello"
    assert server.counters.batches_created == 1


def test_standalone_server_serves_its_counters_and_takes_knobs(tmp_path: Any) -> None:
    """``python -m tests.helpers.batch_servers`` in another process: a model reaches it, and so does a test."""
    import json
    import subprocess
    import sys
    import urllib.request
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.batch_servers", "--provider", "openai", "--port", "0"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        base_url = banner.split(" at ")[1].split()[0]
        root_url = base_url.removesuffix("/v1")
        knobs = urllib.request.Request(
            f"{root_url}/_knobs", data=json.dumps({"outcomes": ["expired"]}).encode(), method="POST"
        )
        with urllib.request.urlopen(knobs, timeout=10) as reply:
            assert json.load(reply)["knobs"]["outcomes"] == ["expired"]

        from pydantic_ai.models.openai import OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        model = OpenAIResponsesModel("gpt-4o", provider=OpenAIProvider(base_url=base_url, api_key="sk-test-key"))
        assert Agent(model, capabilities=[batching()]).run_sync("hi").output == "answer to: hi"

        with urllib.request.urlopen(f"{root_url}/_counters", timeout=10) as reply:
            counters = json.load(reply)
        assert (counters["batches_created"], counters["requests_submitted"]) == (2, 2)
        assert [batch["outcome"] for batch in counters["batches"]] == ["expired", "succeeded"]
    finally:
        process.terminate()
        process.wait(timeout=10)
