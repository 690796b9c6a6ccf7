"""Human approval of tool calls in durable runs: dag.test() parks, a person answers through the REST API."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.hitl_api import HitlApi, Responder, choose

pytestmark = pytest.mark.usefixtures("airflow_db")

SUMMARY = re.compile(
    r"Durable: replayed (\d+) cached steps \((\d+) model, (\d+) tool\), "
    r"executed (\d+) new steps \((\d+) model, (\d+) tool\)"
)

CALLS: Counter[str] = Counter()
MODEL: dict[str, Any] = {"requests": 0, "seen": []}


@pytest.fixture(autouse=True)
def cache_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path / "durable-cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    CALLS.clear()
    MODEL.update(requests=0, seen=[])
    return base


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, airflow_db: None) -> HitlApi:
    return HitlApi.start(tmp_path_factory.mktemp("api"))


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    return [part for part in last.parts if isinstance(part, ToolReturnPart)] if isinstance(last, ModelRequest) else []


def emailer_model(rounds: int = 1) -> FunctionModel:
    """Asks to send ``rounds`` e-mails one after the other, then reports what the tools answered."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        MODEL["requests"] += 1
        returns = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
        tool_returns = [part for part in returns if isinstance(part, ToolReturnPart)]
        MODEL["seen"] = [str(part.content) for part in tool_returns]
        if len(tool_returns) < rounds:
            number = len(tool_returns) + 1
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        "send_email",
                        {"to": f"person{number}@example.com", "body": f"Hello {number}"},
                        tool_call_id=f"mail-{number}",
                    )
                ]
            )
        return ModelResponse(parts=[TextPart("Done: " + " | ".join(MODEL["seen"]))])

    return FunctionModel(answer)


def send_email(to: str, body: str) -> str:
    """Send an e-mail."""
    CALLS[to] += 1
    return f"sent to {to}"


def email_agent(rounds: int = 1) -> Agent[None, str]:
    agent = Agent(emailer_model(rounds), name="mailer")
    agent.tool_plain(requires_approval=True)(send_email)
    return agent


def make_dag(dag_id: str, **operator_kwargs: Any):
    from airflow.sdk import DAG

    from airflow_pydantic_ai.operators.agent import AgentOperator

    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        default_args={"retries": 1, "retry_delay": timedelta(0)},
    ) as dag:
        AgentOperator(
            task_id="mail",
            prompt="Tell the team the release is out",
            agent=operator_kwargs.pop("agent", None) or email_agent(),
            durable=True,
            **operator_kwargs,
        )
    return dag


def summaries(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(group) for group in match.groups()) for match in SUMMARY.finditer(text)]


def test_approved_call_runs_once_and_the_run_completes(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    dag = make_dag("approval_approve")
    with Responder(api, "approval_approve", "mail", [choose("Approve all", user="alice")]) as responder:
        dr = run_dag(dag)
    assert dr.state == "success", capfd.readouterr().out[-5000:]
    assert CALLS == Counter({"person1@example.com": 1})
    # Two live model requests (the call, then the final answer); the resume replayed the first one.
    assert MODEL["requests"] == 2
    assert xcom_value(dr, "mail") == "Done: sent to person1@example.com"
    detail = responder.details[0]
    assert detail["subject"] == "approval_approve.mail: approve 1 tool call?"
    assert "send_email" in detail["body"] and "person1@example.com" in detail["body"]
    assert detail["options"] == ["Approve all", "Reject all"]
    out = capfd.readouterr().out
    assert "Approval: waiting for 1 approval(s)" in out
    assert "approved by alice" in out
    # Attempt 1 stops after one live model step; the resume replays it and runs the tool and the last step live.
    assert summaries(out) == [(0, 0, 0, 1, 1, 0), (1, 1, 0, 2, 1, 1)]
    assert task_states(dr)[("mail", -1)] == ("success", 1)


def test_rejected_call_never_runs_and_the_model_reads_the_reason(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = make_dag("approval_reject")
    answer = choose("Reject all", user="alice", reason="Not before the release notes are ready")
    with Responder(api, "approval_reject", "mail", [answer]):
        dr = run_dag(dag)
    assert dr.state == "success", capfd.readouterr().out[-5000:]
    assert CALLS == Counter()
    assert MODEL["seen"] == ["Not before the release notes are ready"]
    assert xcom_value(dr, "mail") == "Done: Not before the release notes are ready"
    assert "rejected by alice" in capfd.readouterr().out
