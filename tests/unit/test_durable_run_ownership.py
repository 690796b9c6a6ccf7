"""Whose cache it is and when it goes: a cache left by an earlier run with the same ids is deleted, a
rescheduled try owns its own steps, a deleted cache means a full live run, and ``finish`` deletes it all.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

import pytest
from tests.helpers.durable import RecordingLog, counting_agent

from airflow_pydantic_ai.durable import Attempt, AttemptOptions


def test_deleting_the_cache_forces_a_full_rerun(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls)
    _, run, _ = harness.run(agent, "weather report")
    run.store.clear()
    _, run, log = harness.run(agent, "weather report")
    assert run.stats.replayed.total == 0 and calls == {"lookup": 2, "notify": 2}
    assert not log.at("warning")


def test_finish_deletes_everything(harness, tmp_path):
    agent = counting_agent({})
    _, run, _ = harness.run(agent, "weather report")
    assert run.store.exists()
    run.finish()
    assert not run.store.exists()
    assert list((tmp_path / "cache").iterdir()) == [], "empty dag/run/task folders are removed too"


# --- whose cache is it (issue 8, item 2) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("try_number", "resuming", "attempts", "belongs"),
    [
        (1, False, [1], False),  # a run created again: its try 1 cannot have a cache of its own
        (2, False, [1], True),  # a retry, a clear, another worker
        (3, False, [1, 2], True),
        (2, False, [1, 2], False),  # try 2 of a new run, after its try 1 failed before reading the cache
        (1, True, [1], True),  # try 1 resuming from a deferral
        (1, True, [2], False),
        (0, False, [1], False),  # airflow tasks test
    ],
)
def test_whose_cache_it_is_follows_the_try_numbers(try_number, resuming, attempts, belongs):
    from airflow_pydantic_ai.tries.which_try import ThisTry, cache_belongs_to_this_dag_run

    assert cache_belongs_to_this_dag_run(attempts, ThisTry(try_number, resuming)) is belongs


@pytest.mark.parametrize(("reschedules", "belongs"), [(0, False), (1, True), (3, True)])
def test_a_rescheduled_try_owns_the_steps_of_its_own_try_number(reschedules, belongs):
    """A reschedule (3.4 retry policy RESCHEDULE, AirflowRescheduleException) keeps the try number."""
    from types import SimpleNamespace

    from airflow_pydantic_ai.tries.which_try import ThisTry, cache_belongs_to_this_dag_run

    ti = SimpleNamespace(try_number=1, _ti_context_from_server=None)
    this_try = ThisTry.of(ti, reschedules=reschedules)
    assert cache_belongs_to_this_dag_run([1], this_try) is belongs


def test_a_cache_that_is_not_this_runs_is_deleted_with_one_warning(harness):
    calls: dict[str, int] = {}
    with pytest.raises(ConnectionError):
        harness.run(counting_agent(calls, fail_on={"notify"}), "weather report")
    log = RecordingLog()
    run = Attempt.open(harness.store(log), attempt=1, log=log, options=AttemptOptions(belongs=lambda tries: False))
    assert run.entries == {}
    [warning] = log.at("warning")
    assert "was left by an earlier run with the same ids, since deleted (2 steps by try 1, written " in warning
    assert not harness.store(log).exists()
