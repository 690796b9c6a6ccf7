"""Several agents in one durable task (issue 18): a plain ``@task`` with ``durable_attempt()`` and a delegate
inside the operator's agent, under real ``dag.test()`` retries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.operator_runs import CALLS, current_try, files_under, make_dag, summaries

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_plain_task_with_two_agents_replays_both_on_retry(capfd, cache_base):
    """``durable_attempt()`` in a plain ``@task``: two agents one after another, the second fails on try 1."""
    from airflow.sdk import task

    from airflow_pydantic_ai import DurableCapability, durable_attempt

    def writer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["writer model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("publish", {"text": "draft"})])
        return ModelResponse(parts=[TextPart("published")])

    summarizer: Agent[None, str] = Agent(
        FunctionModel(
            lambda messages, info: (CALLS.update(["summarizer model"]), ModelResponse(parts=[TextPart("short")]))[1]
        ),
        name="summarizer",
        capabilities=[DurableCapability()],
    )
    writer: Agent[None, str] = Agent(FunctionModel(writer_model), name="writer", capabilities=[DurableCapability()])

    @writer.tool_plain
    def publish(text: str) -> str:
        CALLS["publish"] += 1
        if current_try() == 1:
            raise ConnectionError("CMS down (first try only)")
        return "ok"

    with make_dag("e2e_plain_task_two_agents") as dag:

        @task(retries=1, retry_delay=timedelta(0))
        def triage() -> str:
            with durable_attempt():
                summary = summarizer.run_sync("summarize").output
                return writer.run_sync(summary).output

        triage()
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    # try 1: the summarizer's answer, the writer's first answer, publish failed; try 2: both answers replayed.
    assert summaries(out) == [(0, 0, 0, 3, 2, 1), (2, 2, 0, 2, 1, 1)]
    assert CALLS == {"summarizer model": 1, "writer model": 2, "publish": 2}
    assert "of agent 'writer'" in out
    assert files_under(cache_base) == [], "the cache is deleted once Airflow recorded the success"


def test_a_delegate_inside_the_operators_agent_replays_its_own_steps(capfd, cache_base):
    """pydantic-ai's delegation shape under a real retry: the delegate's tool fails on try 1, after its first answer
    and a side effect; try 2 replays both and asks the delegate's model only for what it had not answered."""
    from airflow_pydantic_ai import DurableCapability
    from airflow_pydantic_ai.operators.agent import AgentOperator

    def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["helper model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("file_ticket", {}), ToolCallPart("page_oncall", {})])
        return ModelResponse(parts=[TextPart("filed and paged")])

    helper: Agent[None, str] = Agent(FunctionModel(helper_model), name="helper", capabilities=[DurableCapability()])

    @helper.tool_plain
    def file_ticket() -> str:
        CALLS["file_ticket"] += 1
        return "TICKET-1"

    @helper.tool_plain
    def page_oncall() -> str:
        CALLS["page_oncall"] += 1
        if current_try() == 1:
            raise ConnectionError("pager down (first try only)")
        return "paged"

    def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["outer model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("escalate", {"reason": "outage"})])
        return ModelResponse(parts=[TextPart("escalated")])

    outer: Agent[None, str] = Agent(FunctionModel(outer_model), name="triager")

    @outer.tool
    async def escalate(ctx: RunContext[None], reason: str) -> str:
        result = await helper.run(f"escalate: {reason}", usage=ctx.usage)
        return result.output

    with make_dag("e2e_delegate") as dag:
        AgentOperator(task_id="triage", prompt="Triage the outage.", agent=outer, durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    # try 1: outer answer, helper answer, file_ticket, page_oncall (failed), escalate (failed)
    # try 2: outer answer, helper answer and file_ticket replayed; page_oncall, helper's last answer, escalate and
    # the outer answer live.
    assert summaries(out) == [(0, 0, 0, 5, 2, 3), (3, 2, 1, 4, 2, 2)]
    assert CALLS == {"outer model": 2, "helper model": 2, "file_ticket": 1, "page_oncall": 2}
    assert "of agent 'helper'" in out
    assert xcom_value(dr, "triage") == "escalated"


def test_a_plain_task_that_fails_after_its_block_replays_the_agent_on_retry(capfd, cache_base):
    """The cache of ``durable_attempt()`` goes with the task's recorded success, not with the end of the block."""
    from airflow.sdk import task

    from airflow_pydantic_ai import DurableCapability, durable_attempt

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["model"] += 1
        return ModelResponse(parts=[TextPart("an answer")])

    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[DurableCapability()])

    with make_dag("e2e_plain_task_fails_after") as dag:

        @task(retries=1, retry_delay=timedelta(0))
        def answer() -> str:
            with durable_attempt():
                output = agent.run_sync("ask").output
            if current_try() == 1:
                raise ConnectionError("publishing failed (first try only)")
            return output

        answer()
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert summaries(out) == [(0, 0, 0, 1, 1, 0), (1, 1, 0, 0, 0, 0)]
    assert CALLS == {"model": 1}
    assert files_under(cache_base) == []
