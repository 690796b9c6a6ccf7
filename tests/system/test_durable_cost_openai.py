"""The cost in the durable report and the read side, priced from pydantic-ai's own data, over the real OpenAI
client against a local scripted server: a priced model id gets a real price, an unknown one ``null``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage
from tests.helpers.airflow_run import current_try, make_dag, run_dag, xcom_value
from tests.helpers.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.usefixtures("airflow_db")


def _script(request: dict[str, Any]) -> dict[str, Any]:
    if not any(message.get("role") == "tool" for message in request["messages"]):
        return {"tool_calls": [("notify_team", {"ticket_id": 42})]}
    return {"content": "Team notified."}


def _price(model: str, input_tokens: int, output_tokens: int) -> float:
    """What pydantic-ai's price data says a response of this size costs (the server reports 100+n / 10 tokens)."""
    usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    response = ModelResponse(parts=[TextPart("x")], usage=usage, model_name=model, provider_name="openai")
    return float(response.cost().total_price)


@pytest.mark.parametrize("model, priced", [("gpt-4o", True), ("acme-local-7b", False)])
def test_cost_live_and_saved_for_a_priced_and_an_unpriced_model(monkeypatch, tmp_path, model, priced):
    from airflow_pydantic_ai.durable import CacheReader
    from airflow_pydantic_ai.operators.agent import AgentOperator
    from airflow_pydantic_ai.tries.lifecycle import task_identity
    from airflow_pydantic_ai.tries.settings import open_cache_base

    def notify_team(ticket_id: int) -> str:
        """Notify the team; down on the first try."""
        if current_try() == 1:
            raise ConnectionError("chat API down")
        return "posted"

    seen: list[Any] = []

    def read_cache_between_tries(context: Any) -> None:
        reader = CacheReader(open_cache_base().store_for(task_identity(context["ti"])))
        seen.extend(step.as_row() for step in reader.steps())

    with ScriptedOpenAIServer(_script) as server:
        server.connect(monkeypatch, model=None)
        monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
        with make_dag(f"cost_{model.replace('-', '_').replace('.', '_')}") as dag:
            AgentOperator(
                task_id="notify",
                prompt="Tell the team about ticket 42.",
                llm_conn_id="local_openai",
                model_id=f"openai-chat:{model}",
                toolsets=[FunctionToolset([notify_team])],
                durable=True,
                on_retry_callback=read_cache_between_tries,
            )
        dr = run_dag(dag)

    assert dr.state == "success"
    report = xcom_value(dr, "notify", key="durable_report")
    assert report["tokens"] == {"live": {"input": 102, "output": 10}, "saved": {"input": 101, "output": 10}}
    model_row = next(row for row in seen if row["kind"] == "model")
    assert (model_row["input_tokens"], model_row["output_tokens"]) == (101, 10)
    if priced:
        assert report["cost_usd"]["saved"] == pytest.approx(_price(model, 101, 10))
        assert report["cost_usd"]["live"] == pytest.approx(_price(model, 102, 10))
        assert report["cost_usd"]["live"] > 0
        assert report["unpriced_model_steps"] == {"live": 0, "saved": 0}
        assert model_row["cost_usd"] == pytest.approx(_price(model, 101, 10))
    else:
        assert report["cost_usd"] == {"live": None, "saved": None}
        assert report["unpriced_model_steps"] == {"live": 1, "saved": 1}
        assert model_row["cost_usd"] == ""
