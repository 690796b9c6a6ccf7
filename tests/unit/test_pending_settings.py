"""A task's pending-request settings (``pending_timeout``, ``batch=``), where the triggerer rebuilds the model from,
and the trigger's serialized form (only JSON, re-created equal after a triggerer restart)."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import BatchModelRequests
from pydantic_ai.models.test import TestModel

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.operators.agent import AgentOperator
from airflow_pydantic_ai.pending import DEFAULT_PENDING_TIMEOUT, ModelSource, PendingSettings
from airflow_pydantic_ai.pending.settings import uses_provider_side_work
from airflow_pydantic_ai.triggers.pending_request import PendingCheck, PendingRequestTrigger


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (timedelta(hours=2), timedelta(hours=2)),
        (3600, timedelta(hours=1)),
        ("7200", timedelta(hours=2)),
        ("PT30M", timedelta(minutes=30)),
        (None, None),
    ],
)
def test_pending_timeout_takes_a_timedelta_seconds_or_an_iso_duration(given, expected) -> None:
    assert PendingSettings.checked(given, None).timeout == expected


@pytest.mark.parametrize("given", ["soon", -5, "PT0S"])
def test_a_pending_timeout_that_is_no_positive_duration_is_refused_with_the_forms_it_takes(given) -> None:
    with pytest.raises(ValueError, match="pending_timeout"):
        PendingSettings.checked(given, None)


def test_the_default_pending_timeout_is_the_providers_completion_window() -> None:
    operator = AgentOperator(task_id="t", prompt="p", model_id="test", durable=True)

    assert operator.pending_timeout == DEFAULT_PENDING_TIMEOUT == timedelta(hours=24)
    assert "pending_timeout" in AgentOperator.template_fields


def test_a_bad_pending_timeout_fails_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="pending_timeout='tomorrow' is not a duration"):
        AgentOperator(task_id="t", prompt="p", model_id="test", pending_timeout="tomorrow")


def test_batch_true_adds_a_default_batching_capability_and_an_instance_is_used_as_given() -> None:
    [added] = PendingSettings.checked(None, True).capabilities()
    assert isinstance(added, BatchModelRequests)

    mine = BatchModelRequests(poll_interval=timedelta(seconds=5), max_poll_interval=timedelta(seconds=40))
    settings = PendingSettings.checked(None, mine)
    assert settings.capabilities() == [mine]
    assert settings.poll_intervals(Agent(TestModel())) == (5.0, 40.0)
    assert PendingSettings.checked(None, None).capabilities() == []


def test_batch_takes_only_true_or_batch_model_requests() -> None:
    with pytest.raises(TypeError, match=r"batch= takes True or a pydantic_ai\.capabilities\.BatchModelRequests"):
        AgentOperator(task_id="t", prompt="p", model_id="test", batch="yes")


def test_the_agents_own_batching_is_found_with_its_poll_interval() -> None:
    batching = BatchModelRequests(poll_interval=timedelta(seconds=2), max_poll_interval=timedelta(seconds=9))
    agent = Agent(TestModel(), capabilities=[batching])
    settings = PendingSettings()

    assert settings.batching(agent) is batching
    assert settings.poll_intervals(agent) == (2.0, 9.0)
    assert uses_provider_side_work(agent, settings)


def test_without_batching_the_poll_interval_is_pydantic_ais_default() -> None:
    agent = Agent(TestModel())

    assert PendingSettings().poll_intervals(agent) == _compat.batch_poll_defaults() == (30.0, 600.0)
    assert not uses_provider_side_work(agent, PendingSettings())


def test_background_mode_in_the_agents_model_settings_counts_as_provider_side_work() -> None:
    agent = Agent(TestModel(), model_settings={"openai_background": True})  # type: ignore[typeddict-unknown-key]

    assert uses_provider_side_work(agent, PendingSettings())


def test_the_poll_delay_follows_pydantic_ais_schedule() -> None:
    assert [_compat.poll_delay(checks, 10, 40) for checks in range(5)] == [10, 15, 22.5, 33.75, 40]


def test_the_triggerer_rebuilds_the_model_from_the_connection_or_a_model_id_never_from_an_object() -> None:
    assert ModelSource.of(llm_conn_id="llm", model_id=None, agent=None) == ModelSource("llm", None)
    assert ModelSource.of(llm_conn_id="llm", model_id="openai-responses:gpt-5", agent=None) == ModelSource(
        "llm", "openai-responses:gpt-5"
    )
    unresolved = Agent("test", defer_model_check=True)  # the model id stays a string until the run
    assert ModelSource.of(llm_conn_id=None, model_id=None, agent=unresolved) == ModelSource(None, "test")
    assert ModelSource.of(llm_conn_id=None, model_id=None, agent=Agent(TestModel())) is None


def test_the_trigger_serializes_to_json_and_is_recreated_equal() -> None:
    trigger = PendingRequestTrigger(
        tickets=[{"kind": "batch", "batch_id": "batch_1", "custom_id": "r1"}],
        llm_conn_id="openai_batch",
        model_id="openai-responses:gpt-5-mini",
        poll_interval=30,
        max_poll_interval=600,
    )

    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    recreated = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))

    assert type(recreated) is PendingRequestTrigger
    assert recreated.serialize() == (classpath, kwargs)


def test_the_trigger_event_round_trips_and_another_triggers_event_is_no_check() -> None:
    check = PendingCheck("ready", checks=3)

    assert PendingCheck.from_event(check.to_event().payload) == check
    assert PendingCheck.from_event(None) is None
    assert PendingCheck.from_event("2026-12-06T00:00:00+00:00") is None  # the plain timer's event


def test_a_durable_batching_run_under_a_pydantic_ai_without_support_names_the_release(monkeypatch) -> None:
    from airflow_pydantic_ai.pending.settings import refuse_unsupported_batching

    batching_agent = Agent(TestModel(), capabilities=[BatchModelRequests()])
    refuse_unsupported_batching(Agent(TestModel()), PendingSettings())  # no batching: nothing to refuse
    monkeypatch.setattr(_compat, "durable_batching_unsupported", lambda: "needs pydantic-ai-slim 2.78 or later")
    refuse_unsupported_batching(Agent(TestModel()), PendingSettings())

    with pytest.raises(RuntimeError, match=r"pydantic-ai-slim 2\.78 or later"):
        refuse_unsupported_batching(batching_agent, PendingSettings())


def test_the_installed_pydantic_ai_says_whether_durable_batching_works() -> None:
    from importlib.metadata import version

    from packaging.version import Version

    supported = Version(version("pydantic-ai-slim")) >= Version(_compat.DURABLE_BATCH_RELEASE)
    assert (_compat.durable_batching_unsupported() == "") is supported
