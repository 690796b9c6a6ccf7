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
    from airflow_pydantic_ai.durable.errors import DurableConfigError, DurableError, DurableStorageError, describe_error
    from airflow_pydantic_ai.durable.interception.attempt import run_agent
    from airflow_pydantic_ai.durable.interception.capability import DurableCapability
    from airflow_pydantic_ai.durable.steps.report import REPORT_SCHEMA_VERSION, REPORT_XCOM_KEY, DurableReport
    from airflow_pydantic_ai.durable.steps.run import DurableRun
    from airflow_pydantic_ai.durable.steps.stats import SUMMARY_TEMPLATE, empty_summary
    from airflow_pydantic_ai.durable.steps.writer import secret_check
    from airflow_pydantic_ai.durable.storage.identity import TaskIdentity, make_private_folders
    from airflow_pydantic_ai.durable.storage.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "REPORT_XCOM_KEY",
    "SUMMARY_TEMPLATE",
    "CacheReader",
    "DurableCapability",
    "DurableConfigError",
    "DurableError",
    "DurableReport",
    "DurableRun",
    "DurableStorageError",
    "StepDetail",
    "StepInfo",
    "StepStore",
    "TaskIdentity",
    "describe_error",
    "empty_summary",
    "make_private_folders",
    "run_agent",
    "secret_check",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "REPORT_SCHEMA_VERSION": "steps.report",
    "REPORT_XCOM_KEY": "steps.report",
    "SUMMARY_TEMPLATE": "steps.stats",
    "CacheReader": "storage.reader",
    "DurableCapability": "interception.capability",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableReport": "steps.report",
    "DurableRun": "steps.run",
    "DurableStorageError": "errors",
    "StepDetail": "storage.reader",
    "StepInfo": "storage.reader",
    "StepStore": "storage.store",
    "TaskIdentity": "storage.identity",
    "describe_error": "errors",
    "empty_summary": "steps.stats",
    "make_private_folders": "storage.identity",
    "run_agent": "interception.attempt",
    "secret_check": "steps.writer",
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
