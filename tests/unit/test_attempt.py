"""An attempt and its agent runs (issue 37): what the Airflow side asks an attempt, and how a further agent run of
the attempt is made.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

import pytest
from tests.helpers.durable import counting_agent

from airflow_pydantic_ai.durable import Attempt, DurableCapability
from airflow_pydantic_ai.durable.attempt.nesting import TOP, RunScope
from airflow_pydantic_ai.durable.read import installed_release


def test_an_attempt_answers_what_its_cache_held_and_what_it_replayed(harness):
    calls: dict[str, int] = {}
    agent = counting_agent(calls, fail_on={"notify"})
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather report")
    _result, first, _log = harness.run(agent, "weather report")
    assert calls == {"lookup": 1, "notify": 2}
    found = first.steps_found()
    # Try 1 recorded the model answer and the lookup (the notify that failed is never recorded).
    assert found.recorded == 2
    assert found.releases == {installed_release()}
    assert (found.replayed.model, found.replayed.tool) == (1, 1)
    assert found.model_steps == 2, "try 2's first agent run asked for two model answers (one replayed)"
    assert first.location == harness.store().location


def test_an_attempt_with_an_empty_cache_found_nothing(harness):
    attempt, _log = harness.open()
    found = attempt.steps_found()
    assert (found.recorded, found.releases, found.replayed.total, found.model_steps) == (0, frozenset(), 0, 0)


def test_a_further_agent_run_shares_the_attempt_and_keys_its_own_steps(harness):
    attempt, _log = harness.open()
    scope = RunScope(parent=TOP, index=1, at=0, agent="helper")
    helper = attempt.agent_run(scope)
    assert helper.attempt is attempt and attempt.first.attempt is attempt
    assert helper.keys is not attempt.first.keys
    assert helper.keys.lineage == scope.chain_start() != attempt.first.keys.lineage
    assert helper.keys.fingerprinter is attempt.first.keys.fingerprinter, "one key scheme for the whole attempt"
    assert (helper.run_key, attempt.first.run_key) == (scope.id, None)
    assert not helper.keys.failed_closed
    assert attempt.agent_run(scope, keyed=False).keys.failed_closed, "under a step with no key, nothing gets one"


def test_a_capability_given_the_attempt_records_into_its_first_run(harness):
    attempt, _log = harness.open()
    assert DurableCapability(attempt).run is attempt.first
    assert DurableCapability(attempt.first).run is attempt.first
    assert DurableCapability().run is None


def test_durable_run_is_still_the_attempt():
    from airflow_pydantic_ai.durable import DurableRun

    assert DurableRun is Attempt
