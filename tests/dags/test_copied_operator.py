"""An operator holding a ready agent survives Airflow's deep copy of the task (a subset, the test helper)."""

from __future__ import annotations

import copy
from pathlib import Path
from textwrap import dedent

import pytest

from airflow_pydantic_ai.testing.plugin import DurableReplay

pytestmark = pytest.mark.usefixtures("airflow_db")

DAG_FILE = dedent(
    '''
    from dataclasses import dataclass

    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.models.test import TestModel

    from airflow_pydantic_ai.operators.agent import AgentOperator


    @dataclass
    class Deps:
        greeting: str


    agent = Agent(TestModel(), name="greeter", deps_type=Deps)


    @agent.tool
    def greet(ctx: RunContext[Deps], name: str) -> str:
        """Greet someone."""
        return f"{ctx.deps.greeting}, {name}"


    async def on_events(ctx, events):
        async for _ in events:
            pass


    with DAG("copied_agent", schedule=None) as dag:
        start = EmptyOperator(task_id="start")
        ask = AgentOperator(
            task_id="ask",
            prompt="Say hello",
            agent=agent,
            deps=Deps("Hello"),
            event_stream_handler=on_events,
            durable=True,
        )
        start >> ask
    '''
)


def test_a_subset_shares_the_agent_deps_and_handler_and_copies_the_rest(tmp_path: Path) -> None:
    from airflow_pydantic_ai import _compat

    path = tmp_path / "copied_agent.py"
    path.write_text(DAG_FILE)
    [dag] = _compat.load_dags(str(path))[0].values()
    original = dag.task_dict["ask"]
    subset = dag.partial_subset(task_ids=["ask"], include_upstream=False)
    copied = subset.task_dict["ask"]
    assert copied is not original and list(subset.task_dict) == ["ask"]
    for name in ("agent", "deps", "event_stream_handler"):
        assert getattr(copied, name) is getattr(original, name), name
    assert copied.approval == original.approval and copied.approval is not original.approval
    assert copy.deepcopy(original).agent is original.agent


def test_durable_replay_runs_one_task_of_a_dag_whose_operator_holds_a_ready_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "copied_agent.py"
    path.write_text(DAG_FILE)
    fixtures = tmp_path / "fixtures"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path / 'cache'}")
    recorded = DurableReplay(record=True, cache_base=tmp_path / "cache")(path, task_id="ask", fixtures=fixtures)
    assert recorded.state == "success"
    assert "Hello, a" in str(recorded.xcom)
    replayed = DurableReplay(record=False, cache_base=tmp_path / "cache")(path, task_id="ask", fixtures=fixtures)
    assert replayed.state == "success"
    assert replayed.xcom == recorded.xcom
