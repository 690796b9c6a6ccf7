"""Where a durable task's cache lives and when it goes: kept after a failure, none without durable=True, a
bad scheme refused before any model call, an earlier DAG run's cache never replayed, a clear resumes."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.operator_runs import (
    CALLS,
    durable_operator,
    entries_under,
    fetch_ticket,
    files_under,
    make_dag,
    notify_team,
    summaries,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")


def test_failed_run_keeps_the_cache(capfd, cache_base):
    with make_dag("e2e_keeps_cache", retries=0) as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage 42.")
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert "this task has retries=0: a retry is what replays the recorded steps, so set retries >= 1" in out
    kept = files_under(cache_base)
    steps = [path for path in kept if not path.name.startswith(".")]
    assert [path.suffix for path in steps] == [".pack"], "the failed try packed its steps into one object"
    assert {name.split("-")[0] for name in entries_under(cache_base)} == {"model", "tool"}
    notes = sorted(path.name for path in kept if path not in steps)
    assert notes == [".attempt-00001", ".attempt-00001.end"], "the try's record (summary) and how it ended"
    for path in kept:
        assert path.stat().st_mode & 0o077 == 0, "cache files are readable by their owner only"


def test_non_durable_operator_runs_without_a_cache(capfd, cache_base):
    from airflow_pydantic_ai.operators.agent import AgentOperator

    with make_dag("e2e_not_durable") as dag:
        AgentOperator(task_id="hello", prompt="Say hi.", model_id="test", system_prompt="Be brief.")
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert xcom_value(dr, "hello") == "success (no tool calls)"
    assert "Durable:" not in out
    assert not cache_base.exists()


def test_unknown_cache_scheme_fails_before_any_model_call(capfd, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", "s4://bucket/prefix")
    with make_dag("e2e_bad_scheme", retries=0) as dag:
        durable_operator(fetch_ticket, notify_team, prompt="Triage 42.")
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert "durable_cache_path 's4://bucket/prefix' has an unknown scheme 's4'" in out
    assert CALLS == {}


# --- a cache left by an earlier DAG run with the same run_id (issue 8, item 2) ------------------------


def _flaky_notify_dag(dag_id: str, fail: dict[str, bool]):
    def notify_team(ticket_id: int) -> str:
        """Notify the team."""
        CALLS["notify_team"] += 1
        if fail["now"]:
            raise ConnectionError("chat API down")
        return "posted"

    with make_dag(dag_id, retries=0) as dag:
        durable_operator(fetch_ticket, notify_team)
    return dag


WHEN = datetime(2026, 11, 22, 4, 0, tzinfo=__import__("datetime").timezone.utc)


def test_a_dag_run_deleted_and_created_again_does_not_replay_the_old_runs_cache(capfd, cache_base):
    fail = {"now": True}
    dag = _flaky_notify_dag("e2e_recreated_run", fail)
    first = run_dag(dag, logical_date=WHEN, run_after=WHEN)
    capfd.readouterr()
    assert first.state == "failed"
    assert len(entries_under(cache_base)) == 2, "try 1 left its model step and fetch_ticket"

    fail["now"] = False
    second = run_dag(dag, logical_date=WHEN, run_after=WHEN)  # deletes the run, creates it again
    out = capfd.readouterr().out

    assert second.run_id == first.run_id and second.state == "success"
    assert task_states(second)[("triage", -1)] == ("success", 1)
    assert CALLS == {"fetch_ticket": 2, "notify_team": 2}, "the new run's tools all ran"
    warnings = re.findall(r"Durable: the cache at \S+ was left by an earlier run with the same ids.*", out)
    assert len(warnings) == 1
    assert "(2 steps by try 1, written " in warnings[0]
    assert "this is try 1 of a new run, so it is not replayed, and it is deleted" in warnings[0]
    assert summaries(out) == [(0, 0, 0, 4, 2, 2)]


def test_clearing_a_failed_task_resumes_from_its_cache(capfd, cache_base):
    from tests.helpers.airflow_run import clear_and_rerun

    fail = {"now": True}
    dag = _flaky_notify_dag("e2e_cleared_task", fail)
    dr = run_dag(dag)
    capfd.readouterr()
    assert dr.state == "failed"

    fail["now"] = False
    assert clear_and_rerun(dag, dr, "triage") == ("success", 2)
    out = capfd.readouterr().out
    assert "left by an earlier run" not in out
    assert summaries(out) == [(2, 1, 1, 2, 1, 1)]
    assert CALLS == {"fetch_ticket": 1, "notify_team": 2}
