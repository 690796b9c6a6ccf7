"""A cache with one ``at_most_once()`` call in each state, written by real attempts (``DurableHarness``).

The agent books a trip in three calls, one model answer each: ``reserve_seat`` (it finishes), ``charge_card``
(try 1 is cut off while it runs; try 2 asks, and a person answers "it happened" with a receipt) and
``send_invoice`` (try 3 is cut off while it runs, and nobody has answered yet). "Cut off" is a ``BaseException``
the tool raises and the try dies of (``killed=True``), as in ``tests/unit/test_at_most_once.py``.
``charge_card``'s arguments carry an ``api_key``, which every view of the call must mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.durable import run_agent
from airflow_pydantic_ai.durable.side_effects import AskAboutOutcome, OutcomeRules, Resolution

__all__ = ["API_KEY", "RECEIPT", "Booking", "CutOff", "write_three_calls"]

API_KEY = "sk-live-never-shown"
"""In ``charge_card``'s arguments under the key ``api_key``: masked wherever the call is shown."""
RECEIPT = "charged 42 (receipt r-1)"
"""What the person answered ``charge_card`` returned."""
_PLAN = [
    ("reserve_seat", {"seat": "12A"}, "c1"),
    ("charge_card", {"amount": 42, "api_key": API_KEY}, "c2"),
    ("send_invoice", {"to": "ops@example.com"}, "c3"),
]


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


def _next_call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = {part.tool_name for message in messages for part in message.parts if isinstance(part, ToolReturnPart)}
    for tool, arguments, call_id in _PLAN:
        if tool not in done:
            return ModelResponse(parts=[ToolCallPart(tool, arguments, tool_call_id=call_id)])
    return ModelResponse(parts=[TextPart("booked")])


@dataclass
class Booking:
    """The agent and what its tools did: ``calls`` in order; a tool named in ``cut_off`` is cut off while it runs."""

    calls: list[str] = field(default_factory=list)
    cut_off: set[str] = field(default_factory=set)

    def agent(self) -> Agent[Any, str]:
        agent: Agent[Any, str] = Agent(FunctionModel(_next_call, model_name="planner"))
        for tool, _, _ in _PLAN:
            agent.tool_plain(name=tool, metadata=at_most_once())(self._tool(tool))
        return agent

    def _tool(self, name: str) -> Any:
        def run(**arguments: Any) -> str:
            self.calls.append(name)
            if name in self.cut_off:
                raise CutOff
            return f"{name} done"

        return run


def write_three_calls(harness: DurableHarness) -> Booking:
    """Three tries on ``harness``'s cache: it ends with ``reserve_seat`` finished, ``charge_card`` resolved
    ("it happened", answered by ana on the Required Actions page) and ``send_invoice`` unfinished."""
    booking = Booking(cut_off={"charge_card"})
    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    with pytest.raises(CutOff):
        harness.run(booking.agent(), "book it", killed=True)
    run, _ = harness.open(unknown_outcome=rules)
    with pytest.raises(AskAboutOutcome) as asked, run.ending():
        run_agent(run, booking.agent(), "book it")
    doubt = asked.value.call
    answer = Resolution.happened(doubt.started, RECEIPT, answered_by="ana", via="the Required Actions page")
    run.resolve(doubt, answer)
    booking.cut_off = {"send_invoice"}
    with pytest.raises(CutOff):
        harness.run(booking.agent(), "book it", killed=True, run_options={"unknown_outcome": rules})
    assert booking.calls == ["reserve_seat", "charge_card", "send_invoice"]
    return booking
