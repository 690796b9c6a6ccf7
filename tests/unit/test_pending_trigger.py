"""The trigger that checks pending model requests in the triggerer: it waits at pydantic-ai's poll interval, asks
the engine (``PendingTicket.check``) until each request is ready, and never fails the task itself: where it cannot
check, it hands the check to the resumed worker. pydantic-ai's in-memory batch API (``FunctionModel``) stands for the
provider's; the model the triggerer would rebuild from the connection is handed in."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import BatchModelRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai.durable import PendingTicket, RequestPending, run_agent
from airflow_pydantic_ai.triggers.pending_request import PendingCheck, PendingRequestTrigger

pytestmark = requires_pydantic_ai("2.78", "a durable run stopped at a pending request")


class HeldBatches(FunctionModel):
    """In-memory batches that stay ``in_progress`` for the first ``hold`` status checks."""

    def __init__(self, hold: int) -> None:
        super().__init__(_answer)
        self.hold = hold
        self.checks: Counter[str] = Counter()

    async def batch_status(self, batch: Any) -> Any:
        ended = await super().batch_status(batch)
        self.checks[batch.id] += 1
        return replace(ended, status="in_progress") if self.checks[batch.id] <= self.hold else ended


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("the digest")])


class TriggerWithModel(PendingRequestTrigger):
    """The trigger, with the model it would rebuild from the task's connection handed in."""

    model: Any = None

    def _model(self) -> Any:
        if isinstance(self.model, Exception):
            raise self.model
        return self.model


def _submitted(tmp_path: Any, model: HeldBatches) -> list[PendingTicket]:
    """The tickets of a durable run stopped (``defer_pending``) after its batch was submitted."""
    batching = BatchModelRequests(max_wait=timedelta(milliseconds=1), poll_interval=timedelta(milliseconds=1))
    harness = DurableHarness(str(tmp_path))
    run, _ = harness.open(defer_pending=True)
    with pytest.raises(RequestPending) as stopped, run.ending(waits=lambda error: isinstance(error, RequestPending)):
        run_agent(run, Agent(model, capabilities=[batching]), "summarize")
    return stopped.value.tickets


def _events(trigger: PendingRequestTrigger) -> list[Any]:
    async def collect() -> list[Any]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def _trigger(tickets: list[PendingTicket], model: Any, poll: float = 0.01) -> TriggerWithModel:
    trigger = TriggerWithModel(
        tickets=[ticket.to_payload() for ticket in tickets],
        llm_conn_id="openai_batch",
        model_id=None,
        poll_interval=poll,
        max_poll_interval=poll,
    )
    trigger.model = model
    return trigger


def test_the_trigger_checks_until_the_batch_has_its_result_then_fires_once(tmp_path) -> None:
    model = HeldBatches(hold=3)
    tickets = _submitted(tmp_path, model)
    checks_before = sum(model.checks.values())

    [event] = _events(_trigger(tickets, model))

    # held for 3 status checks, ready at the 4th: the trigger made those the run did not make before it stopped
    assert PendingCheck.from_event(event) == PendingCheck("ready", checks=4 - checks_before)
    assert sum(model.checks.values()) == 4


def test_a_trigger_recreated_from_its_serialized_kwargs_goes_on_checking_the_same_batch(tmp_path) -> None:
    model = HeldBatches(hold=2)
    tickets = _submitted(tmp_path, model)
    _, kwargs = _trigger(tickets, model).serialize()  # what the triggerer stores, and a restart reads

    again = TriggerWithModel(**kwargs)
    again.model = model
    [event] = _events(again)

    assert PendingCheck.from_event(event).status == "ready"  # type: ignore[union-attr]
    assert set(model.checks) == {ticket.job_id for ticket in tickets}


def test_a_triggerer_that_cannot_build_the_model_hands_the_check_to_the_worker_after_the_poll_interval(
    tmp_path,
) -> None:
    tickets = _submitted(tmp_path, HeldBatches(hold=5))

    [event] = _events(_trigger(tickets, ImportError("the openai package is not installed in the triggerer")))

    check = PendingCheck.from_event(event)
    assert check is not None and check.status == "unchecked"
    assert "openai package is not installed" in check.detail


def test_a_check_that_raises_hands_the_check_to_the_worker(tmp_path) -> None:
    tickets = _submitted(tmp_path, HeldBatches(hold=5))

    [event] = _events(_trigger(tickets, HeldBatches(hold=0)))  # another instance: it never created that batch

    check = PendingCheck.from_event(event)
    assert check is not None and check.status == "unchecked" and check.checks == 1
    assert "was not created by this model instance" in check.detail
