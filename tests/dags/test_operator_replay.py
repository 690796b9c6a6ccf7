"""What a retry of AgentOperator / @task.pydantic_ai replays under dag.test() with real retries: unchanged
steps replay, changed ones run live, mapped tasks and parallel tools keep their own steps."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.durable import stored_entries
from tests.helpers.operator_runs import (
    CALLS,
    current_try,
    durable_operator,
    fetch_ticket,
    files_under,
    make_dag,
    notify_team,
    summaries,
    tools,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")


def test_retry_replays_unchanged_steps_and_each_tool_runs_once(capfd, cache_base):
    with make_dag("e2e_unchanged_retry") as dag:
        durable_operator(fetch_ticket, notify_team)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    # try 1: model step + fetch_ticket recorded; notify_team ran and failed (executed, not cached).
    # try 2: both recorded steps replayed.
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)]
    assert CALLS == {"fetch_ticket": 1, "notify_team": 2}
    assert "posted" in xcom_value(dr, "triage")
    location = f"file://{cache_base}/e2e_unchanged_retry/{dr.run_id}/triage/-1/"
    assert out.count(f"Durable: the cache of this task instance is {location}") == 2
    assert files_under(cache_base) == [], "the cache is deleted after success"


def test_prompt_templated_on_try_number_reruns_model_and_tools(capfd):
    with make_dag("e2e_prompt_change") as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage ticket 42 (try {{ ti.try_number }}).")
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (0, 0, 0, 4, 2, 2)]
    # TestModel reuses its tool call ids: the tools still rerun because their conversation changed.
    assert CALLS == {"fetch_ticket": 2, "notify_team": 2}
    # Named by its number in the cache listing: try 1's model and fetch_ticket steps are 1 and 2; the request it
    # differs from is try 1's first, step 1.
    assert re.search(
        r"Durable: step 3: model \S+ differs from what attempt 1 recorded as step 1; changed: user prompt\.", out
    )


def test_deleting_the_cache_between_tries_forces_a_full_rerun(capfd, cache_base):
    import shutil

    deleted: list[str] = []
    deleted_entries: list[str] = []

    def delete_cache(context: Any) -> None:
        ti = context["ti"]
        folder = cache_base / ti.dag_id / ti.run_id / ti.task_id / "-1"
        assert folder.is_dir()
        deleted.extend(item.name for item in folder.iterdir())
        deleted_entries.extend(stored_entries(folder))
        shutil.rmtree(folder)

    with make_dag("e2e_cache_deleted") as dag:
        durable_operator(fetch_ticket, notify_team, on_retry_callback=delete_cache)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    steps = [name for name in deleted if not name.startswith(".")]
    assert len(deleted_entries) == 2 and all(name.endswith(".json") for name in deleted_entries)
    assert len(steps) == 1 and steps[0].endswith(".pack"), "the failed try packed its two steps"
    notes = set(deleted) - set(steps)
    assert notes == {".attempt-00001", ".attempt-00001.end"}, "try 1's record (summary, how it ended) lies beside"
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (0, 0, 0, 4, 2, 2)]
    assert CALLS == {"fetch_ticket": 2, "notify_team": 2}
    assert "differs from what attempt" not in out, "a deleted cache is a fresh start, not a change"


def test_mapped_tasks_keep_separate_caches(capfd, cache_base):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    seen: dict[int, list[str]] = {}

    def list_cache(context: Any) -> None:
        ti = context["ti"]
        task_folder = cache_base / ti.dag_id / ti.run_id / ti.task_id
        seen[ti.map_index] = sorted(p.name for p in task_folder.iterdir())

    with make_dag("e2e_mapped") as dag:
        AgentOperator.partial(
            task_id="triage", model_id="test", toolsets=[tools()], durable=True, on_retry_callback=list_cache
        ).expand(prompt=["Triage ticket 1.", "Triage ticket 2."])
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert {key: value[0] for key, value in task_states(dr).items()} == {
        ("triage", 0): "success",
        ("triage", 1): "success",
    }
    assert set(seen) == {0, 1}
    assert sorted(summaries(out)) == sorted([(0, 0, 0, 3, 1, 2)] * 2 + [(2, 1, 1, 2, 1, 1)] * 2)
    for index in (0, 1):
        assert f"/e2e_mapped/{dr.run_id}/triage/{index}/" in out
    assert CALLS == {"fetch_ticket": 2, "notify_team": 4}
    assert files_under(cache_base) == []


def _reverse_order_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("probe", {"n": n}, tool_call_id=f"call-{n}") for n in range(4)])
    return ModelResponse(parts=[TextPart("all probes done")])


def test_parallel_tools_finishing_in_reverse_order_all_replay(capfd):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    finished: list[tuple[int, int]] = []

    async def probe(n: int) -> str:
        """Probe n; the first call finishes last."""
        await asyncio.sleep(0.05 * (4 - n))
        finished.append((current_try(), n))
        return f"probe {n} ok"

    agent: Agent[Any, str] = Agent(FunctionModel(_reverse_order_model), tools=[probe])
    failures = {"left": 1}

    @agent.output_validator
    def fail_first_try(output: str) -> str:
        if current_try() == 1 and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("downstream store unavailable (first try only)")
        return output

    with make_dag("e2e_parallel") as dag:
        AgentOperator(task_id="probe_all", prompt="probe everything", agent=agent, durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert finished == [(1, 3), (1, 2), (1, 1), (1, 0)], "only try 1 ran the tools, in reverse order"
    # try 1 recorded both model steps and 4 tools, then failed; try 2 replays all of it.
    assert summaries(out) == [(0, 0, 0, 6, 2, 4), (6, 2, 4, 0, 0, 0)]
    assert xcom_value(dr, "probe_all") == "all probes done"


class Triage(BaseModel):
    ticket_id: int
    severity: str
    summary: str


def test_structured_output_replays_to_the_same_xcom(capfd):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    model = TestModel(custom_output_args={"ticket_id": 42, "severity": "high", "summary": "login broken"})
    flaky_agent: Agent[Any, Triage] = Agent(model, output_type=Triage)
    failures = {"left": 1}

    @flaky_agent.output_validator
    def fail_first_try(output: Triage) -> Triage:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("result store unavailable (first try only)")
        return output

    with make_dag("e2e_structured") as dag:
        AgentOperator(task_id="reference", prompt="Triage 42.", agent=Agent(model, output_type=Triage), durable=True)
        AgentOperator(task_id="flaky", prompt="Triage 42.", agent=flaky_agent, durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    expected = {"ticket_id": 42, "severity": "high", "summary": "login broken"}
    assert xcom_value(dr, "reference") == expected
    assert xcom_value(dr, "flaky") == expected
    assert task_states(dr)[("flaky", -1)] == ("success", 2)
    # The flaky task's retry answers entirely from the cache.
    assert (1, 1, 0, 0, 0, 0) in summaries(out)


def test_task_agent_decorator_is_durable(capfd, cache_base):
    from airflow.sdk import task

    with make_dag("e2e_decorator") as dag:

        @task.pydantic_ai(model_id="test", toolsets=[tools()], durable=True)
        def triage(ticket_id: int) -> str:
            return f"Triage ticket {ticket_id}."

        triage(42)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)]
    assert CALLS == {"fetch_ticket": 1, "notify_team": 2}
    assert files_under(cache_base) == []


def test_ready_agent_with_agent_tool_decorators(capfd):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    agent: Agent[Any, str] = Agent(TestModel(), instructions="triage")

    @agent.tool_plain
    def lookup(ticket_id: int) -> str:
        CALLS["lookup"] += 1
        return "ok"

    @agent.tool_plain
    def escalate(ticket_id: int) -> str:
        CALLS["escalate"] += 1
        if current_try() == 1:
            raise TimeoutError("pager timed out")
        return "escalated"

    with make_dag("e2e_ready_agent") as dag:
        AgentOperator(task_id="triage", prompt="Triage 42", agent=agent, durable=True)
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert CALLS == {"lookup": 1, "escalate": 2}
    assert summaries(out)[-1][:3] == (2, 1, 1)
