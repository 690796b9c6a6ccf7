"""The budget across retries under real Airflow retries: the operator argument and the [pydantic_ai] option."""

from __future__ import annotations

import pytest
from pydantic_ai.usage import UsageLimits
from tests.helpers.airflow_run import make_dag, run_dag, task_states
from tests.helpers.weather import agent_failing_once

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")


REFUSED = "step 5: model function:function:_model: would exceed the request_limit of 2 counted across the tries"


def test_the_operator_argument_stops_a_retry_before_the_request_over_budget(capfd):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    sent: list[str] = []
    with make_dag("budget_argument", retries=2) as dag:
        AgentOperator(
            task_id="notify",
            prompt="weather",
            agent=agent_failing_once(sent),
            usage_limits=UsageLimits(request_limit=2),
            budget_across_tries=True,
            durable=True,
        )
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "failed"
    assert task_states(dr)[("notify", -1)] == ("failed", 3)
    assert REFUSED in out
    assert "earlier tries spent 2 requests, 2 tool calls, 200 input and 20 output tokens" in out
    # Try 2 ran notify live (it failed on try 1), then was refused; try 3 replayed it: no third message.
    assert sent == ["sunny", "sunny"]


def test_the_config_option_turns_it_on_and_the_argument_off(capfd, monkeypatch):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_BUDGET_ACROSS_TRIES", "True")
    with make_dag("budget_option", retries=2) as dag:
        AgentOperator(
            task_id="by_option",
            prompt="weather",
            agent=agent_failing_once([]),
            usage_limits=UsageLimits(request_limit=2),
            durable=True,
        )
        AgentOperator(
            task_id="opted_out",
            prompt="weather",
            agent=agent_failing_once([]),
            usage_limits=UsageLimits(request_limit=2),
            budget_across_tries=False,
            durable=True,
        )
    dr = run_dag(dag)

    states = task_states(dr)
    assert states[("by_option", -1)][0] == "failed"
    assert states[("opted_out", -1)] == ("success", 2)
