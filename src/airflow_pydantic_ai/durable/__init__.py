"""Durable agent runs: record each model response and tool result, replay them on a retry.

This package knows nothing of Airflow operators: it works on any fsspec filesystem, so it can be
used (and tested) without a running Airflow.

The names below are the package's public face. They are imported on first use, so a command that
only needs the read side or the errors (``airflow pydantic-ai cache list``) does not pay for
importing pydantic-ai.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.errors import (
        ApprovalsUnsupported,
        ApprovalTimedOut,
        DurableConfigError,
        DurableError,
        DurableStorageError,
        describe_error,
    )
    from airflow_pydantic_ai.durable.interception.approvals import WaitingForDecisions
    from airflow_pydantic_ai.durable.interception.attempt import run_agent
    from airflow_pydantic_ai.durable.interception.capability import DurableCapability
    from airflow_pydantic_ai.durable.interception.toolset import TOOL_CONFIG_KEY, live_tool
    from airflow_pydantic_ai.durable.steps.decision import Decision, DecisionStep
    from airflow_pydantic_ai.durable.steps.mode import DurableMode, ReplayMiss, check_mode, replay_also
    from airflow_pydantic_ai.durable.steps.nesting import attempt_scope
    from airflow_pydantic_ai.durable.steps.report import REPORT_SCHEMA_VERSION, REPORT_XCOM_KEY, DurableReport
    from airflow_pydantic_ai.durable.steps.run import DurableRun
    from airflow_pydantic_ai.durable.steps.stats import SUMMARY_TEMPLATE, TaskLogger, empty_summary
    from airflow_pydantic_ai.durable.steps.telemetry import telemetry_scope
    from airflow_pydantic_ai.durable.steps.writer import secret_check
    from airflow_pydantic_ai.durable.storage.attempts import AttemptRecord, TryEnding, latest_attempt, record_ending
    from airflow_pydantic_ai.durable.storage.catalog import CacheSummary, list_caches
    from airflow_pydantic_ai.durable.storage.fixtures import FixtureError, read_fixture, write_fixture
    from airflow_pydantic_ai.durable.storage.identity import (
        Region,
        TaskIdentity,
        id_segment,
        is_shortened,
        make_private_folders,
        parse_place,
    )
    from airflow_pydantic_ai.durable.storage.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.storage.step_costs import StepCost, format_usd, replay_total
    from airflow_pydantic_ai.durable.storage.store import StepStore
    from airflow_pydantic_ai.durable.wording import plural

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "REPORT_XCOM_KEY",
    "SUMMARY_TEMPLATE",
    "TOOL_CONFIG_KEY",
    "ApprovalTimedOut",
    "ApprovalsUnsupported",
    "AttemptRecord",
    "CacheReader",
    "CacheSummary",
    "Decision",
    "DecisionStep",
    "DurableCapability",
    "DurableConfigError",
    "DurableError",
    "DurableMode",
    "DurableReport",
    "DurableRun",
    "DurableStorageError",
    "FixtureError",
    "Region",
    "ReplayMiss",
    "StepCost",
    "StepDetail",
    "StepInfo",
    "StepStore",
    "TaskIdentity",
    "TaskLogger",
    "TryEnding",
    "WaitingForDecisions",
    "attempt_scope",
    "check_mode",
    "describe_error",
    "empty_summary",
    "format_usd",
    "id_segment",
    "is_shortened",
    "latest_attempt",
    "list_caches",
    "live_tool",
    "make_private_folders",
    "parse_place",
    "plural",
    "read_fixture",
    "record_ending",
    "replay_also",
    "replay_total",
    "run_agent",
    "secret_check",
    "telemetry_scope",
    "write_fixture",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "REPORT_SCHEMA_VERSION": "steps.report",
    "REPORT_XCOM_KEY": "steps.report",
    "SUMMARY_TEMPLATE": "steps.stats",
    "TOOL_CONFIG_KEY": "interception.toolset",
    "ApprovalTimedOut": "errors",
    "ApprovalsUnsupported": "errors",
    "AttemptRecord": "storage.attempts",
    "CacheReader": "storage.reader",
    "CacheSummary": "storage.catalog",
    "Decision": "steps.decision",
    "DecisionStep": "steps.decision",
    "DurableCapability": "interception.capability",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableMode": "steps.mode",
    "DurableReport": "steps.report",
    "DurableRun": "steps.run",
    "DurableStorageError": "errors",
    "FixtureError": "errors",
    "Region": "storage.identity",
    "ReplayMiss": "errors",
    "StepCost": "storage.step_costs",
    "StepDetail": "storage.reader",
    "StepInfo": "storage.reader",
    "StepStore": "storage.store",
    "TaskIdentity": "storage.identity",
    "TaskLogger": "steps.stats",
    "TryEnding": "storage.attempts",
    "WaitingForDecisions": "interception.approvals",
    "attempt_scope": "steps.nesting",
    "check_mode": "steps.mode",
    "describe_error": "errors",
    "empty_summary": "steps.stats",
    "format_usd": "storage.step_costs",
    "id_segment": "storage.identity",
    "is_shortened": "storage.identity",
    "latest_attempt": "storage.attempts",
    "list_caches": "storage.catalog",
    "live_tool": "interception.toolset",
    "make_private_folders": "storage.identity",
    "parse_place": "storage.identity",
    "plural": "wording",
    "read_fixture": "storage.fixtures",
    "record_ending": "storage.attempts",
    "replay_also": "steps.mode",
    "replay_total": "storage.step_costs",
    "run_agent": "interception.attempt",
    "secret_check": "steps.writer",
    "telemetry_scope": "steps.telemetry",
    "write_fixture": "storage.fixtures",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
