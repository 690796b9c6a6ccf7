"""Durable agent runs: record each model response and tool result, replay them on a retry.

This package knows nothing of Airflow: it imports nothing of the Airflow side, and works on any fsspec
filesystem, so it can be used (and tested) without a running Airflow.

Three faces, by who uses them (``tests/unit/test_layering.py`` keeps the Airflow side to them):

- this module: running attempts (the operator, ``@task.pydantic_ai``, ``durable_attempt``) and the two
  names a DAG author uses (``DurableCapability``, ``live_tool``); the Airflow side opens an attempt with
  one :class:`AttemptOptions` value (the replay policy and a fixture's steps among its fields);
- ``durable/read.py``: the read side (the ``cache`` and ``fixture`` commands, the view, the pytest plugin);
- ``durable/errors.py``: every error, under one base.

The names below are imported on first use, so a command that only needs the read side or the errors
(``airflow pydantic-ai cache list``) does not pay for importing pydantic-ai.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.faces import load_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.embedding import attempt_block, note_ending
    from airflow_pydantic_ai.durable.attempt.opening import AttemptOptions, Recording
    from airflow_pydantic_ai.durable.attempt.replay_policy import DurableMode, ReplayPolicy, check_mode
    from airflow_pydantic_ai.durable.attempt.run import DurableRun
    from airflow_pydantic_ai.durable.interception.approvals import WaitingForDecisions
    from airflow_pydantic_ai.durable.interception.capability import DurableCapability
    from airflow_pydantic_ai.durable.interception.run_agent import run_agent
    from airflow_pydantic_ai.durable.interception.toolset import live_tool
    from airflow_pydantic_ai.durable.reporting.report import DurableReport
    from airflow_pydantic_ai.durable.reporting.stats import TaskLogger
    from airflow_pydantic_ai.durable.steps.decision import Decision, DecisionStep
    from airflow_pydantic_ai.durable.steps.pending_step import PendingTicket, RequestPending
    from airflow_pydantic_ai.durable.storage.identity import TaskIdentity
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = [
    "AttemptOptions",
    "Decision",
    "DecisionStep",
    "DurableCapability",
    "DurableMode",
    "DurableReport",
    "DurableRun",
    "PendingTicket",
    "Recording",
    "ReplayPolicy",
    "RequestPending",
    "StepStore",
    "TaskIdentity",
    "TaskLogger",
    "WaitingForDecisions",
    "attempt_block",
    "check_mode",
    "live_tool",
    "note_ending",
    "run_agent",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "AttemptOptions": "attempt.opening",
    "Decision": "steps.decision",
    "DecisionStep": "steps.decision",
    "DurableCapability": "interception.capability",
    "DurableMode": "attempt.replay_policy",
    "DurableReport": "reporting.report",
    "DurableRun": "attempt.run",
    "PendingTicket": "steps.pending_step",
    "Recording": "attempt.opening",
    "ReplayPolicy": "attempt.replay_policy",
    "RequestPending": "steps.pending_step",
    "StepStore": "storage.store",
    "TaskIdentity": "storage.identity",
    "TaskLogger": "reporting.stats",
    "WaitingForDecisions": "interception.approvals",
    "attempt_block": "attempt.embedding",
    "check_mode": "attempt.replay_policy",
    "live_tool": "interception.toolset",
    "note_ending": "attempt.embedding",
    "run_agent": "interception.run_agent",
}

# Names docs/api.rst listed on this face before the read side and the errors got faces of their own: users'
# code keeps importing them from here. Not part of the face (the Airflow side uses ``read`` and ``errors``).
_DOCUMENTED_BEFORE = {
    "REPORT_SCHEMA_VERSION": "reporting.report",
    "REPORT_XCOM_KEY": "reporting.report",
    "SUMMARY_TEMPLATE": "reporting.stats",
    "TOOL_CONFIG_KEY": "interception.toolset",
    "CacheReader": "storage.reader",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableStorageError": "errors",
    "Region": "storage.identity",
    "StepDetail": "storage.reader",
    "StepInfo": "storage.reader",
    "attempt_scope": "attempt.nesting",
    "describe_error": "errors",
    "make_private_folders": "storage.identity",
    "secret_check": "attempt.writer",
}


def __getattr__(name: str) -> Any:
    return load_name(globals(), name, {**_DOCUMENTED_BEFORE, **_HOMES})


def __dir__() -> list[str]:
    return sorted(__all__)
