"""Human approval of tool calls in durable runs: dag.test() parks, a person answers through the REST API."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states, xcom_value
from tests.helpers.compat import dagbag_api, requires_approval_parking
from tests.helpers.hitl_api import HitlApi, Responder, choose, refs_in, rendered_request, sweep_timeouts_after
from tests.helpers.task_logs import summaries

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")
PARKS = requires_approval_parking()

CALLS: Counter[str] = Counter()
MODEL: dict[str, Any] = {"requests": 0, "seen": []}


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    """This module's counts start empty (the cache folder is the dags tier's ``cache_base``)."""
    CALLS.clear()
    MODEL.update(requests=0, seen=[])


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, airflow_db: None) -> HitlApi:
    return HitlApi.start(tmp_path_factory.mktemp("api"))


def emailer_model(
    rounds: int = 1, per_round: int = 1, fail_final_on_try: int | None = None, secret: str = ""
) -> FunctionModel:
    """Asks to send e-mails (``per_round`` at once, ``rounds`` times), then reports what the tools answered."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        MODEL["requests"] += 1
        turn = sum(isinstance(message, ModelResponse) for message in messages)
        parts = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
        MODEL["seen"] = [str(part.content) for part in parts if isinstance(part, ToolReturnPart)]
        if turn < rounds:
            if secret:
                from airflow.sdk.log import mask_secret

                mask_secret(secret)  # registered in the task, as a connection's password would be
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        "send_email",
                        {"to": f"person{turn + 1}.{n}@example.com", "body": f"Hello {turn + 1}.{n} {secret}"},
                        tool_call_id=f"mail-{turn + 1}-{n}",
                    )
                    for n in range(1, per_round + 1)
                ]
            )
        if fail_final_on_try is not None and current_try() == fail_final_on_try:
            raise ConnectionError("model API down (this try only)")
        return ModelResponse(parts=[TextPart("Done: " + " | ".join(MODEL["seen"]))])

    return FunctionModel(answer)


def send_email(to: str, body: str) -> str:
    """Send an e-mail."""
    CALLS[to] += 1
    return f"sent to {to}"


def email_agent(**model_kwargs: Any) -> Agent[None, str]:
    agent = Agent(emailer_model(**model_kwargs), name="mailer")
    agent.tool_plain(requires_approval=True)(send_email)
    return agent


def mail_dag(dag_id: str, retries: int = 1, **operator_kwargs: Any):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag(dag_id, retries=retries) as dag:
        AgentOperator(
            task_id="mail",
            prompt="Tell the team the release is out",
            agent=operator_kwargs.pop("agent", None) or email_agent(),
            durable=True,
            **operator_kwargs,
        )
    return dag


@PARKS
def test_approved_call_runs_once_and_the_run_completes(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    dag = mail_dag("approval_approve")
    with Responder(api, "approval_approve", "mail", [choose("Approve all", user="alice")]) as responder:
        dr = run_dag(dag)
    assert dr.state == "success", capfd.readouterr().out[-5000:]
    assert Counter({"person1.1@example.com": 1}) == CALLS
    # Two live model requests (the call, then the final answer); the resume replayed the first one.
    assert MODEL["requests"] == 2
    assert xcom_value(dr, "mail") == "Done: sent to person1.1@example.com"
    detail = responder.details[0]
    assert detail["subject"] == "approval_approve.mail: approve 1 tool call?"
    assert "send_email" in detail["body"] and "person1.1@example.com" in detail["body"]
    assert detail["options"] == ["Approve all", "Reject all"]
    out = capfd.readouterr().out
    assert "Approval: waiting for 1 approval(s)" in out
    assert "approved by alice" in out
    # Attempt 1 stops after one live model step; the resume replays it and runs the tool and the last step live.
    assert summaries(out) == [(0, 0, 0, 1, 1, 0), (1, 1, 0, 2, 1, 1)]
    assert task_states(dr)[("mail", -1)] == ("success", 1)


@PARKS
def test_rejected_call_never_runs_and_the_model_reads_the_reason(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = mail_dag("approval_reject", agent=email_agent(secret="tok-5ecret-value"))
    answer = choose("Reject all", user="alice", reason="Not before the release notes are ready")
    with Responder(api, "approval_reject", "mail", [answer]) as responder:
        dr = run_dag(dag)
    assert dr.state == "success", capfd.readouterr().out[-5000:]
    assert Counter() == CALLS
    assert MODEL["seen"] == ["Not before the release notes are ready"]
    # The person sees the call, but not a value registered as secret.
    body = responder.details[0]["body"]
    assert "person1.1@example.com" in body and "tok-5ecret-value" not in body and "***" in body
    assert xcom_value(dr, "mail") == "Done: Not before the release notes are ready"
    assert "rejected by alice" in capfd.readouterr().out


@PARKS
def test_two_rounds_of_approval_in_one_run(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    def second_round(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        # Airflow keeps the first request's text for the whole try; the current round is in the rendered field.
        current = rendered_request(detail)
        assert "person2.1@example.com" in current and "person1.1" not in current
        [ref] = refs_in(current)
        choose("Approve all", user="alice", **{f"call_{ref}": "approve"})(api, run_id, detail)

    dag = mail_dag("approval_rounds", agent=email_agent(rounds=2))
    with Responder(api, "approval_rounds", "mail", [choose("Approve all"), second_round]):
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert Counter({"person1.1@example.com": 1, "person2.1@example.com": 1}) == CALLS
    assert MODEL["requests"] == 3  # one per live step; every replay was free
    assert "(round 2)" in out
    assert summaries(out) == [(0, 0, 0, 1, 1, 0), (1, 1, 0, 2, 1, 1), (3, 2, 1, 2, 1, 1)]


@PARKS
@pytest.mark.parametrize("on_timeout", ["reject", "fail"])
def test_approval_timeout(api: HitlApi, on_timeout: str, capfd: pytest.CaptureFixture[str]) -> None:
    dag = mail_dag(
        f"approval_timeout_{on_timeout}",
        retries=0,
        approval_timeout=timedelta(seconds=1),
        on_approval_timeout=on_timeout,
    )
    with Responder(api, dag.dag_id, "mail", [sweep_timeouts_after(1.5)]):
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert Counter() == CALLS
    # retries=0 is fine for a task that waits for a person: the try resumes from its cache.
    assert "set retries >= 1" not in out
    if on_timeout == "reject":
        assert dr.state == "success", out[-5000:]
        assert MODEL["seen"] == [
            "Nobody approved this tool call within the approval timeout (0:00:01); it was not run."
        ]
        assert "rejected by nobody" in out
    else:
        assert dr.state == "failed"
        assert task_states(dr)[("mail", -1)][0] == "failed"
        assert "on_approval_timeout='fail' fails the task" in out


@PARKS
def test_retry_after_approval_replays_the_approved_call_without_asking(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = mail_dag("approval_retry", agent=email_agent(fail_final_on_try=1))
    with Responder(api, "approval_retry", "mail", [choose("Approve all")]) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert task_states(dr)[("mail", -1)] == ("success", 2)
    assert len(responder.details) == 1  # asked once
    assert out.count("Approval: waiting for") == 1
    assert Counter({"person1.1@example.com": 1}) == CALLS
    assert "approved by alice (recorded decision)" in out
    # Try 2: the first model step and the approved call replay; only the final answer is asked for.
    assert summaries(out)[-1] == (2, 1, 1, 1, 1, 0)


@PARKS
def test_bad_answers_are_refused_or_ignored_and_nothing_runs_twice(
    api: HitlApi, capfd: pytest.CaptureFixture[str]
) -> None:
    status: dict[str, int] = {}

    def first(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        refs = [name.removeprefix("call_") for name in detail["params"] if name.startswith("call_")]
        assert len(refs) == 2 and detail["options"] == ["Approve all", "Reject all", "Decide per call"]
        dag_id, task_id = detail["task_instance"]["dag_id"], detail["task_instance"]["task_id"]
        status["unknown option"] = api.respond(dag_id, run_id, task_id, {"chosen_options": ["Send it"]}).status_code
        status["no option"] = api.respond(dag_id, run_id, task_id, {"chosen_options": []}).status_code
        status["two options"] = api.respond(
            dag_id, run_id, task_id, {"chosen_options": ["Approve all", "Reject all"]}
        ).status_code
        status["not assigned"] = api.respond(
            dag_id, run_id, task_id, {"chosen_options": ["Approve all"]}, user="bob"
        ).status_code
        body = {
            "chosen_options": ["Decide per call"],
            "params_input": {f"call_{refs[0]}": "approve", f"call_{refs[1]}": "maybe", "call_0000000000": "approve"},
        }
        status["per call"] = api.respond(dag_id, run_id, task_id, body).status_code
        status["twice"] = api.respond(dag_id, run_id, task_id, {"chosen_options": ["Approve all"]}).status_code

    dag = mail_dag(
        "approval_bad_input",
        agent=email_agent(per_round=2),
        approval_assigned_users=[{"id": "alice", "name": "alice"}, {"id": "carol", "name": "carol"}],
    )
    with Responder(api, "approval_bad_input", "mail", [first, choose("Reject all", user="carol")]):
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert status == {
        "unknown option": 400,
        "no option": 422,
        "two options": 400,
        "not assigned": 403,
        "per call": 200,
        "twice": 409,
    }
    # The first call was approved and ran once; the second was asked again and rejected.
    assert Counter({"person1.1@example.com": 1}) == CALLS
    assert "'maybe' is neither 'approve' nor 'reject'" in out
    assert "names no pending call" in out
    assert "it will be asked again" in out
    assert "rejected by carol" in out


def test_approval_without_durable_fails_at_the_start(capfd: pytest.CaptureFixture[str]) -> None:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag("approval_not_durable", retries=0) as dag:
        AgentOperator(task_id="mail", prompt="Tell the team", agent=email_agent())
    dr = run_dag(dag)
    assert dr.state == "failed"
    assert MODEL["requests"] == 0
    out = capfd.readouterr().out
    assert "need approval (requires_approval=True)" in out and "Set durable=True" in out


@PARKS
def test_example_dag_asks_before_sending_the_email(api: HitlApi, capfd: pytest.CaptureFixture[str]) -> None:
    DagBag, _ = dagbag_api()

    example = Path(__file__).parents[2] / "example_dags" / "example_agent_approval.py"
    dag = DagBag(dag_folder=str(example)).dags["example_agent_approval"]
    answer = choose("Reject all", reason="Wait for the release notes")
    with Responder(api, "example_agent_approval", "announce_release", [answer]) as responder:
        dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success", out[-5000:]
    assert xcom_value(dr, "announce_release") == "Announcement: Wait for the release notes"
    assert "team@example.com" in responder.details[0]["body"]
    assert "send_email to=" not in out  # the tool never ran
