"""The durable report under real Airflow runs: the XCom ``durable_report``, read by a downstream task, pushed on a
failed try too; the report's readable line in the task log."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states, xcom_value
from tests.helpers.operator_runs import durable_operator

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")


def fetch_ticket(ticket_id: int) -> dict:
    """Fetch a ticket."""
    return {"id": ticket_id, "title": "Login page times out"}


def notify_team(ticket_id: int) -> str:
    """Notify the team; fails on the first try."""
    if current_try() == 1:
        raise ConnectionError("chat API down (first try only)")
    return "posted"


def test_a_downstream_task_reads_the_report_of_the_try_that_succeeded(capfd):
    from airflow.sdk import task

    with make_dag("report_downstream", retries=1) as dag:
        triage = durable_operator(fetch_ticket, notify_team)

        # [START howto_read_durable_report]
        @task
        def audit(ti=None) -> dict[str, Any]:
            report = ti.xcom_pull(task_ids="triage", key="durable_report")
            return {
                "replayed": report["steps"]["replayed"]["total"],
                "saved_tokens": report["tokens"]["saved"]["input"] + report["tokens"]["saved"]["output"],
                "saved_usd": report["cost_usd"]["saved"],
            }

        # [END howto_read_durable_report]

        triage >> audit()
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    report = xcom_value(dr, "triage", key="durable_report")
    # try 2 replayed the model step and fetch_ticket; notify_team ran live; then the final model step.
    assert report["try_number"] == 2 and report["outcome"] == "succeeded"
    assert report["steps"]["replayed"] == {"model": 1, "tool": 1, "output": 0, "decision": 0, "total": 2}
    assert report["steps"]["executed"] == {"model": 1, "tool": 1, "output": 0, "decision": 0, "total": 2}
    assert report["tokens"]["saved"]["input"] > 0
    assert report["cost_usd"]["saved"] is None, "TestModel has no price"
    assert report["cache"] == {"location": f"file://{_base(out)}", "deleted": True}
    saved = report["tokens"]["saved"]["input"] + report["tokens"]["saved"]["output"]
    assert xcom_value(dr, "audit") == {"replayed": 2, "saved_tokens": saved, "saved_usd": None}
    # The report line comes right after the summary line in the task log, and says it in words: the JSON is the
    # XCom's (issue 28).
    lines = out.splitlines()
    summary_at = next(index for index, line in enumerate(lines) if "Durable: replayed 2 cached steps" in line)
    live = report["tokens"]["live"]
    assert (
        f"Durable: try 2 succeeded; live: 1 model request, {live['input'] + live['output']:,} tokens "
        f"({live['input']:,} input, {live['output']:,} output), cost unknown (no price for the model); the full "
        "report is the XCom durable_report"
    ) in lines[summary_at + 1], lines[summary_at + 1]
    assert "Durable: report {" not in out


def _base(out: str) -> str:
    marker = "Durable: the cache of this task instance is file://"
    line = next(line for line in out.splitlines() if marker in line)
    return line[line.index(marker) + len(marker) :].split(" (delete it")[0]


def test_a_failed_try_pushes_its_report_too():
    with make_dag("report_failed_try", retries=0) as dag:
        durable_operator(fetch_ticket, notify_team)
    dr = run_dag(dag)

    assert dr.state == "failed"
    report = xcom_value(dr, "triage", key="durable_report")
    assert report["outcome"] == "failed" and report["try_number"] == 1
    assert report["steps"]["executed"]["tool"] == 2 and report["steps"]["executed"]["model"] == 1
    assert report["cache"]["deleted"] is False


def test_a_plain_task_with_durable_attempt_pushes_its_report_too():
    from airflow.sdk import task
    from pydantic_ai import Agent

    from airflow_pydantic_ai import DurableCapability, durable_attempt

    with make_dag("report_plain_task", retries=1) as dag:

        @task
        def triage() -> str:
            agent = Agent(
                "test",
                toolsets=[FunctionToolset([fetch_ticket, notify_team])],
                capabilities=[DurableCapability()],
            )
            with durable_attempt():
                return agent.run_sync("Triage ticket 42.").output

        triage()
    dr = run_dag(dag)

    assert dr.state == "success"
    report = xcom_value(dr, "triage", key="durable_report")
    assert report["try_number"] == 2 and report["outcome"] == "succeeded"
    assert report["steps"]["replayed"]["total"] == 2 and report["steps"]["executed"]["tool"] == 1
