"""What a cleared durable task does with its cache: ``on_clear`` (Airflow 3.1-3.3) through a real clear.

On Airflow 3.4 the person who clears decides (``keep_task_state``): a clear that keeps the task state (as
``clear_task_instances`` here does) resumes; tests/system/test_clear_keep_task_state.py clears through the
REST API of a real api-server with the flag either way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.version import Version
from tests.helpers.airflow_run import clear_and_rerun, current_try, make_dag, run_dag
from tests.helpers.compat import airflow_version
from tests.helpers.operator_runs import CALLS, durable_operator, fetch_ticket, summaries

pytestmark = pytest.mark.usefixtures("airflow_db", "cache_base")

ASKS_THE_PERSON = airflow_version() >= Version("3.4")
only_where_nobody_asks = pytest.mark.skipif(
    ASKS_THE_PERSON, reason="on Airflow 3.4 keep_task_state decides (tests/system/test_clear_keep_task_state.py)"
)
FAIL = {"now": True}


@pytest.fixture(autouse=True)
def _chat_api_down() -> None:
    """The chat API is down again (the cache folder is the dags tier's ``cache_base``, which clears CALLS)."""
    FAIL["now"] = True


def notify_team(ticket_id: int) -> str:
    """Notify the team."""
    CALLS["notify_team"] += 1
    if FAIL["now"]:
        raise ConnectionError("chat API down")
    return "posted"


def _dag(dag_id: str, **operator_kwargs: Any):
    with make_dag(dag_id, retries=0) as dag:
        durable_operator(fetch_ticket, notify_team, **operator_kwargs)
    return dag


def _fail_then_clear(dag: Any, capfd: pytest.CaptureFixture[str]) -> str:
    dr = run_dag(dag)
    capfd.readouterr()
    assert dr.state == "failed"
    FAIL["now"] = False
    assert clear_and_rerun(dag, dr, "triage") == ("success", 2)
    return capfd.readouterr().out


def test_by_default_a_cleared_task_resumes_and_says_why(capfd):
    out = _fail_then_clear(_dag("clear_default"), capfd)

    why = "keep_task_state=true" if ASKS_THE_PERSON else "[pydantic_ai] on_clear = resume"
    assert f"Durable: resumed from the cache after a clear (cleared with {why}): 2 recorded steps replay" in out
    assert summaries(out) == [(2, 1, 1, 2, 1, 1)]
    assert CALLS == {"fetch_ticket": 1, "notify_team": 2}


@only_where_nobody_asks
def test_on_clear_fresh_argument_discards_the_cache_and_says_why(capfd):
    out = _fail_then_clear(_dag("clear_fresh_argument", on_clear="fresh"), capfd)

    assert "Durable: cleared with on_clear=fresh: the cache was discarded; every step runs live" in out
    assert "resumed from the cache" not in out
    assert summaries(out) == [(0, 0, 0, 4, 2, 2)]
    assert CALLS == {"fetch_ticket": 2, "notify_team": 2}


@only_where_nobody_asks
def test_on_clear_option_applies_and_the_argument_wins(capfd, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__ON_CLEAR", "fresh")
    out = _fail_then_clear(_dag("clear_fresh_option"), capfd)
    assert "Durable: cleared with [pydantic_ai] on_clear = fresh: the cache was discarded" in out
    assert summaries(out) == [(0, 0, 0, 4, 2, 2)]

    CALLS.clear()
    FAIL["now"] = True
    out = _fail_then_clear(_dag("clear_resume_argument", on_clear="resume"), capfd)
    assert "resumed from the cache after a clear (cleared with on_clear=resume)" in out
    assert summaries(out) == [(2, 1, 1, 2, 1, 1)]


def test_a_retry_is_not_a_clear_even_with_on_clear_fresh(capfd):
    def flaky_notify(ticket_id: int) -> str:
        """Notify the team; fails on the first try."""

        CALLS["notify_team"] += 1
        if current_try() == 1:
            raise ConnectionError("chat API down (first try only)")
        return "posted"

    with make_dag("retry_with_on_clear_fresh") as dag:
        durable_operator(fetch_ticket, flaky_notify, on_clear="fresh")
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert "cleared with" not in out and "after a clear" not in out
    assert summaries(out) == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)]


def test_a_wrong_on_clear_fails_the_first_try_naming_the_option(capfd, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__ON_CLEAR", "sometimes")
    dr = run_dag(_dag("clear_bad_option"))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert "[pydantic_ai] on_clear 'sometimes' is not one of resume, fresh" in out
    assert CALLS == {}


def test_a_wrong_on_clear_argument_is_refused_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match=r"on_clear='always' is not one of resume, fresh"):
        _dag("clear_bad_argument", on_clear="always")


def test_a_cleared_task_keeps_its_cache_through_gc_while_it_waits_for_its_next_try(capfd):
    """Airflow 3.4 keeps the cleared try (failed) beside the new one (no state yet): the commands read the new one."""
    import argparse

    from tests.helpers.airflow_run import clear_task

    from airflow_pydantic_ai.cli import cache_command

    dr = run_dag(_dag("clear_then_gc"))
    assert dr.state == "failed"
    clear_task(dr, "triage")
    capfd.readouterr()

    common = {"dag_id": "clear_then_gc", "run_id": None, "task_id": None, "older_than": None, "output": "json"}
    cache_command.cache_list(argparse.Namespace(**common))
    assert [row["task_state"] for row in json.loads(capfd.readouterr().out)] == ["none"]
    cache_command.cache_gc(argparse.Namespace(**common, dry_run=True, yes=False))
    assert "Nothing to delete: 1 cache may still be read" in capfd.readouterr().err
