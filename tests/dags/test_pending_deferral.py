"""Issue 38 under dag.test(): a durable task whose model request is pending at the provider defers (no worker held),
resumes in the same try and collects the result; ``PendingModelResponse`` defers instead of ending the task with a
ticket; batching without ``durable`` warns. pydantic-ai's in-memory batch API (``FunctionModel``) stands for the
provider's; the task checks on the worker after a timer (the model is a ready object the triggerer cannot rebuild).
The triggerer's own check against a real SDK: tests/system/test_pending_batches.py."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import BatchModelRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import make_dag, run_dag, task_states, xcom_value
from tests.helpers.compat import requires_pydantic_ai

from airflow_pydantic_ai.operators.agent import AgentOperator

pytestmark = [
    pytest.mark.usefixtures("airflow_db", "cache_base"),
    requires_pydantic_ai("2.78", "a durable run stopped at a pending request"),
]

DEFERS = re.compile(r"pending at the provider .* so the task defers for")
RESUMES = "Durable: resumed after a pending model request"


class HeldBatches(FunctionModel):
    """A FunctionModel whose in-memory batches stay ``in_progress`` for the first ``hold`` status checks of each
    batch (the provider still working); counts the batches created."""

    def __init__(self, function: Any, hold: int = 1) -> None:
        super().__init__(function)
        self.batches = 0
        self.hold = hold
        self.checks: Counter[str] = Counter()

    async def batch_create(self, requests: Any) -> Any:
        self.batches += 1
        return await super().batch_create(requests)

    async def batch_status(self, batch: Any) -> Any:
        ended = await super().batch_status(batch)
        self.checks[batch.id] += 1
        return replace(ended, status="in_progress") if self.checks[batch.id] <= self.hold else ended


def _tool_returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _looks_up_then_answers(calls: Counter[str]) -> Any:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if not _tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "tickets"}, "call-1")])
        return ModelResponse(parts=[TextPart(f"digest: {_tool_returns(messages)[0]}")])

    return answer


def _fast_batching(poll_seconds: float = 0.05) -> BatchModelRequests:
    return BatchModelRequests(
        max_wait=timedelta(milliseconds=10),
        poll_interval=timedelta(seconds=poll_seconds),
        max_poll_interval=timedelta(seconds=poll_seconds),
    )


def _nightly_agent(model: HeldBatches, calls: Counter[str], **agent_kwargs: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(model, name="nightly", **agent_kwargs)

    @agent.tool_plain
    def lookup(q: str) -> str:
        calls["lookup"] += 1
        return f"3 {q}"

    return agent


def test_a_durable_batched_task_defers_while_pending_resumes_in_the_same_try_and_succeeds(capfd) -> None:
    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls))
    with make_dag("pending_defers", retries=1) as dag:
        AgentOperator(
            task_id="digest",
            prompt="summarize the night",
            agent=_nightly_agent(model, calls, capabilities=[_fast_batching()]),
            durable=True,
        )

    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("digest", -1)] == ("success", 1)  # deferrals keep the try
    assert xcom_value(dr, "digest") == "digest: 3 tickets"
    assert model.batches == 2  # one per model step, none submitted again across the resumes
    assert calls == Counter(model=2, lookup=1)
    # Each model step defers after its submission; the first check on the worker sees the batch still in progress
    # (the timer fallback: this agent's model is a ready object), so it defers once more before it collects.
    assert len(DEFERS.findall(out)) == 4, out
    assert out.count(RESUMES) == 4
    # The report line of each deferral says whom the try waits for.
    assert out.count("try 1 stopped to wait for the provider;") == 4, out
    assert "stopped to wait for a person" not in out
    assert len(re.findall(r"step \d: model \S+ was collected from batch \S+ in", out)) == 2, out


def test_batch_true_adds_pydantic_ais_batching_to_the_run(capfd) -> None:
    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls))
    with make_dag("pending_batch_shortcut", retries=1) as dag:
        AgentOperator(
            task_id="digest",
            prompt="summarize the night",
            agent=_nightly_agent(model, calls),
            durable=True,
            batch=_fast_batching(),
        )

    dr = run_dag(dag)

    assert dr.state == "success"
    assert model.batches == 2
    assert len(DEFERS.findall(capfd.readouterr().out)) == 4


def test_a_wait_longer_than_execution_timeout_does_not_fail_the_task(capfd) -> None:
    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls), hold=1)
    with make_dag("pending_outlasts_execution_timeout", retries=0) as dag:
        AgentOperator(
            task_id="digest",
            prompt="summarize the night",
            agent=_nightly_agent(model, calls, capabilities=[_fast_batching(poll_seconds=1.5)]),
            durable=True,
            execution_timeout=timedelta(seconds=2),  # the two deferred waits take 3 s or more
        )

    dr = run_dag(dag)

    assert dr.state == "success", capfd.readouterr().out
    assert xcom_value(dr, "digest") == "digest: 3 tickets"


def test_pending_model_response_in_the_output_type_defers_instead_of_ending_the_task_with_a_ticket(capfd) -> None:
    from pydantic_ai.output import PendingModelResponse

    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls))
    agent = _nightly_agent(model, calls, capabilities=[_fast_batching()], output_type=[str, PendingModelResponse])
    with make_dag("pending_output_type", retries=1) as dag:
        AgentOperator(task_id="digest", prompt="summarize the night", agent=agent, durable=True)

    dr = run_dag(dag)

    assert dr.state == "success"
    assert task_states(dr)[("digest", -1)] == ("success", 1)
    assert xcom_value(dr, "digest") == "digest: 3 tickets"  # the model's answer, never a ticket
    assert model.batches == 2


def test_batching_without_durable_warns_that_a_lost_worker_submits_again(capfd) -> None:
    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls), hold=0)
    with make_dag("pending_not_durable", retries=0) as dag:
        AgentOperator(
            task_id="digest", prompt="summarize the night", agent=_nightly_agent(model, calls), batch=_fast_batching()
        )

    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert model.batches == 2  # batched, on the worker
    assert "without durable=True: the submission is not recorded" in out
    assert "a worker lost while the provider works" in out
    assert not DEFERS.search(out)


def test_a_durable_task_that_batches_nothing_never_defers(capfd) -> None:
    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls))
    with make_dag("pending_none", retries=0) as dag:
        AgentOperator(task_id="digest", prompt="p", agent=_nightly_agent(model, calls), durable=True)

    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert model.batches == 0
    assert not DEFERS.search(out) and RESUMES not in out
    assert "without durable=True" not in out


def test_the_decorator_takes_batch_too(capfd) -> None:
    from airflow.sdk import task

    calls: Counter[str] = Counter()
    model = HeldBatches(_looks_up_then_answers(calls), hold=0)
    with make_dag("pending_decorator", retries=1) as dag:

        @task.pydantic_ai(agent=_nightly_agent(model, calls), durable=True, batch=_fast_batching())
        def digest() -> str:
            return "summarize the night"

        digest()

    dr = run_dag(dag)

    assert dr.state == "success"
    assert xcom_value(dr, "digest") == "digest: 3 tickets"
    assert model.batches == 2
    assert len(DEFERS.findall(capfd.readouterr().out)) == 2  # each step deferred once; ready at the first check
