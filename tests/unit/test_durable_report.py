"""The durable report of an attempt: exact counts, tokens and cost, live and saved, nested runs included."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from tests.helpers.weather import flaky_agent

from airflow_pydantic_ai.durable import run_agent
from airflow_pydantic_ai.durable.reporting.accounting import Accounting, StepCount
from airflow_pydantic_ai.durable.reporting.cost import response_cost
from airflow_pydantic_ai.durable.reporting.report import REPORT_SCHEMA_VERSION, DurableReport


def _reported(harness: Any, agent: Agent[Any, str], prompt: str) -> tuple[dict[str, Any], Any, Any]:
    """One attempt as the harness runs it: the report its run hands its readers when it ends (what the operator
    pushes as the XCom ``durable_report``), the run and the outcome (the result, or the error it raised)."""
    run, _log = harness.open()
    reports: list[dict[str, Any]] = []
    run.when_ended(lambda report: reports.append(report.to_json()))
    outcome: Any
    try:
        with run.ending():
            outcome = run_agent(run, agent, prompt)
    except Exception as error:
        outcome = error
    [report] = reports
    return report, run, outcome


def test_report_counts_steps_and_tokens_live_and_saved(harness):
    agent = flaky_agent([True])
    first, _run, failure = _reported(harness, agent, "weather")
    assert isinstance(failure, ConnectionError)
    assert first == {
        "schema_version": REPORT_SCHEMA_VERSION,
        "try_number": 1,
        "outcome": "failed",
        "steps": {
            "replayed": {"model": 0, "tool": 0, "output": 0, "decision": 0, "total": 0},
            "executed": {"model": 1, "tool": 1, "output": 0, "decision": 0, "total": 2},
            "not_persisted": 0,
        },
        "tokens": {"live": {"input": 100, "output": 10}, "saved": {"input": 0, "output": 0}},
        "cost_usd": {"live": None, "saved": 0.0},
        "unpriced_model_steps": {"live": 1, "saved": 0},
        "changed": [],
        "cache": {"location": harness.store().location, "deleted": False},
    }
    second, run, result = _reported(harness, agent, "weather")
    assert result.output == "sunny"
    assert second["outcome"] == "succeeded" and second["try_number"] == 2
    assert second["steps"]["replayed"] == {"model": 1, "tool": 0, "output": 0, "decision": 0, "total": 1}
    assert second["steps"]["executed"] == {"model": 1, "tool": 1, "output": 0, "decision": 0, "total": 2}
    assert second["tokens"] == {"live": {"input": 200, "output": 20}, "saved": {"input": 100, "output": 10}}
    assert second["cost_usd"] == {"live": None, "saved": None}
    assert second["cache"]["deleted"] is True
    # The XCom value the operator pushes is the same report.
    assert run.report().to_json() == second


def test_the_report_line_follows_the_summary_line(harness):
    _result, _run, log = harness.run(flaky_agent([]), "weather")
    infos = log.at("info")
    summary_at = next(index for index, line in enumerate(infos) if line.startswith("Durable: replayed "))
    # For a person: the JSON is the XCom's (issue 28), the log says it in words.
    assert infos[summary_at + 1] == (
        "Durable: try 1 succeeded; live: 2 model requests, 330 tokens (300 input, 30 output), cost unknown (no price "
        "for the model); the full report is the XCom durable_report"
    )
    assert not any("{" in line for line in infos), "no JSON at INFO"


def _priced_tally(live_unpriced: int = 0) -> Accounting:
    """Try 2 of a priced model: one model step and one tool call replayed, one of each live."""
    tally = Accounting()
    tally.step(
        StepCount(
            "model", replayed=True, usage=RequestUsage(input_tokens=203, output_tokens=20), cost=Decimal("0.0007075")
        )
    )
    tally.step(StepCount("tool", replayed=True))
    tally.step(
        StepCount(
            "model", replayed=False, usage=RequestUsage(input_tokens=103, output_tokens=10), cost=Decimal("0.0003575")
        )
    )
    for _ in range(live_unpriced):
        tally.step(
            StepCount("model", replayed=False, usage=RequestUsage(input_tokens=1000, output_tokens=0), cost=None)
        )
    tally.step(StepCount("tool", replayed=False))
    return tally


def _report(tally: Accounting, outcome: Any = "succeeded") -> DurableReport:
    return DurableReport(
        2, outcome, tally, not_persisted=0, changed=(), cache_location="file:///c/", cache_deleted=True
    )


def test_the_log_line_says_what_the_try_spent_and_the_replay_saved_in_words():
    assert _report(_priced_tally()).log_line() == (
        "Durable: try 2 succeeded; live: 1 model request, 113 tokens (103 input, 10 output), ~$0.0004; "
        "the replay saved ~$0.0007; the full report is the XCom durable_report"
    )
    assert _report(_priced_tally(live_unpriced=1), "waiting").log_line() == (
        "Durable: try 2 stopped to wait for a person; live: 2 model requests, 1,113 tokens (1,103 input, 10 output), "
        "~$0.0004 (+ 1 request without a price); the replay saved ~$0.0007; the full report is the XCom "
        "durable_report"
    )
    assert _report(Accounting(), "failed").log_line() == (
        "Durable: try 2 failed; live: no model request; the full report is the XCom durable_report"
    )


def test_output_function_steps_are_counted_as_output(harness):
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tool = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(tool.name, {"text": "done"}, tool_call_id="o1")])

    def finish(text: str) -> str:
        return text.upper()

    agent: Agent[Any, str] = Agent(FunctionModel(answer), output_type=finish)
    _result, run, _log = harness.run(agent, "go")
    assert run.report().to_json()["steps"]["executed"]["output"] == 1


def test_cost_is_priced_from_pydantic_ais_data_and_null_when_unknown():
    usage = RequestUsage(input_tokens=1_000_000, output_tokens=0)
    priced = ModelResponse(parts=[TextPart("x")], usage=usage, model_name="gpt-4o", provider_name="openai")
    unpriced = ModelResponse(parts=[TextPart("x")], usage=usage, model_name="function:answer:")
    expected = priced.cost().total_price
    assert expected > 0
    assert response_cost(priced) == expected
    assert response_cost(unpriced) is None


def test_approval_decisions_are_counted_recorded_then_replayed(tmp_path):
    from tests.unit.test_approval_flow import mail_agent, open_run, run

    from airflow_pydantic_ai.durable.steps.decision import Decision

    first = open_run(tmp_path)
    waiting = run(mail_agent("bob", [], []), first)
    waiting.pending[0].record(Decision(approved=True, answered_by="alice"))
    assert first.report().to_json()["steps"]["executed"]["decision"] == 1

    resumed = open_run(tmp_path)
    run(mail_agent("bob", [], []), resumed)
    steps = resumed.report().to_json()["steps"]
    assert steps["replayed"]["decision"] == 1 and steps["executed"]["decision"] == 0
    assert steps["replayed"]["model"] == 1 and steps["executed"]["tool"] == 1


def test_the_report_names_the_changed_components(harness):
    agent = flaky_agent([True])
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather")
    _result, run, _log = harness.run(agent, "weather in Lyon")
    assert run.report().to_json()["changed"] == ["user prompt"]


def test_a_delegates_steps_count_in_the_report(harness):
    from tests.helpers.delegates import helper_agent, outer_agent

    outer = outer_agent(helper_agent(flaky={"failures": 1}), topics=[["printer"]])
    with pytest.raises(ConnectionError):
        harness.run(outer, "go")
    _result, run, _log = harness.run(outer, "go")
    steps = run.report().to_json()["steps"]
    # As the summary line counts them: the outer answer and the delegate's two answers and side_effect
    # replayed; the delegate's check, its last answer, the delegate call and the outer last answer live.
    assert steps["replayed"] == {"model": 3, "tool": 1, "output": 0, "decision": 0, "total": 4}
    assert steps["executed"] == {"model": 2, "tool": 2, "output": 0, "decision": 0, "total": 4}


def test_a_budget_across_tries_covers_a_delegates_requests(harness):
    from pydantic_ai.usage import UsageLimits
    from tests.helpers.delegates import calls, helper_agent, outer_agent

    from airflow_pydantic_ai.durable.reporting.budget import RetryBudgetExceeded

    calls.clear()

    outer = outer_agent(helper_agent(flaky={"failures": 1}), topics=[["printer"]])
    budget = UsageLimits(request_limit=3)
    with pytest.raises(ConnectionError):
        harness.run(outer, "go", run_options={"budget": budget})
    # Try 1 sent 3 requests (1 outer, 2 delegate); the delegate's third request is refused before it is sent.
    with pytest.raises(RetryBudgetExceeded, match=r"^step 6: model .* request_limit of 3 .* earlier tries spent 3 req"):
        harness.run(outer, "go", run_options={"budget": budget})
    assert calls["helper model"] == 2, "the delegate's third request was never sent"
