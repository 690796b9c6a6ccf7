"""The budget across retries: usage limits that count the live usage of every try, kept beside the steps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits
from tests.helpers.weather import agent_failing_once

from airflow_pydantic_ai.durable.reporting.budget import RetryBudgetExceeded


def test_a_retry_is_stopped_before_the_request_that_would_exceed_the_budget(harness):
    sent: list[str] = []
    agent = agent_failing_once(sent)
    budget = UsageLimits(request_limit=2)
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"budget": budget})
    with pytest.raises(RetryBudgetExceeded) as raised:
        harness.run(agent, "weather", run_options={"budget": budget})
    assert str(raised.value).startswith(
        "step 5: model function:function:_model: would exceed the request_limit of 2 counted across the tries of this "
        "task instance (budget_across_tries): earlier tries spent 2 requests, 2 tool calls, 200 input and 20 "
        "output tokens; this try 0 requests, 1 tool calls, 0 input and 0 output tokens. Raise the limit, or "
        "delete the cache to start a new budget."
    )
    assert isinstance(raised.value, UsageLimitExceeded)
    # The replayed steps were free, and notify (live on try 2) ran before the refused request.
    assert sent == ["sunny", "sunny"]
    log = harness.logs[-1]
    assert "Durable: usage limits count every try; earlier tries spent 2 requests" in "\n".join(log.at("info"))


def test_without_the_budget_each_try_has_its_own_limits(harness):
    agent = agent_failing_once([])
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", usage_limits=UsageLimits(request_limit=2))
    result, _run, _log = harness.run(agent, "weather", usage_limits=UsageLimits(request_limit=2))
    assert result.output == "done"


def test_replayed_steps_never_count_twice(harness):
    agent = agent_failing_once([])
    budget = UsageLimits(request_limit=3, input_tokens_limit=301)
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"budget": budget})
    result, run, _log = harness.run(agent, "weather", run_options={"budget": budget})
    assert result.output == "done"
    assert run.budget is not None and run.budget.total.requests == 3 and run.budget.total.input_tokens == 300


def test_a_token_limit_refuses_the_next_request_once_it_is_spent(harness):
    agent = agent_failing_once([])
    budget = UsageLimits(input_tokens_limit=200)
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"budget": budget})
    with pytest.raises(RetryBudgetExceeded, match=r"input_tokens_limit of 200 .* earlier tries spent 2 requests"):
        harness.run(agent, "weather", run_options={"budget": budget})


def test_what_each_try_spent_is_kept_beside_the_steps(harness):
    agent = agent_failing_once([])
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"budget": UsageLimits(request_limit=10)})
    note = json.loads((harness.root / ".spent-00001").read_bytes())
    assert note == {
        "format": "airflow-pydantic-ai/spent",
        "attempt": 1,
        "requests": 2,
        "tool_calls": 2,
        "input_tokens": 200,
        "output_tokens": 20,
    }


def test_a_streamed_request_is_refused_before_it_is_sent(harness):
    import asyncio

    from pydantic_ai.models.function import DeltaToolCall

    from airflow_pydantic_ai.durable import DurableCapability

    streamed: list[int] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo):
        streamed.append(len(messages))
        if len(messages) == 1:
            yield {0: DeltaToolCall(name="lookup", json_args='{"city": "Oslo"}', tool_call_id="c1")}
        else:
            yield "sunny"

    agent: Agent[Any, str] = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    def lookup(city: str) -> str:
        return "sunny"

    async def stream_once() -> None:
        run, _log = harness.open(budget=UsageLimits(request_limit=1))
        async with agent.run_stream("weather?", capabilities=[DurableCapability(run)]) as result:
            await result.get_output()

    with pytest.raises(RetryBudgetExceeded, match=r"^step 3: model .* request_limit of 1"):
        asyncio.run(stream_once())
    assert streamed == [1], "the second request was never sent"


def test_a_resumed_try_keeps_what_it_spent_before_the_wait(harness):
    from tests.helpers.durable import RecordingLog

    from airflow_pydantic_ai.durable import Attempt, AttemptOptions

    agent = agent_failing_once([])
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"budget": UsageLimits(request_limit=10)})
    # The same try number again: a resume after a wait (a deferral keeps the try number).
    log = RecordingLog()
    resumed = Attempt.open(
        harness.store(log), attempt=1, log=log, options=AttemptOptions(budget=UsageLimits(request_limit=10))
    )
    assert resumed.budget is not None
    assert resumed.budget.earlier.requests == 0 and resumed.budget.resumed.requests == 2
    assert resumed.budget.total.requests == 2
