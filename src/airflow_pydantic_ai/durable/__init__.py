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
    from airflow_pydantic_ai.durable.interception.toolset import TOOL_CONFIG_KEY, live_tool
    from airflow_pydantic_ai.durable.steps.nesting import attempt_scope
    from airflow_pydantic_ai.durable.steps.run import DurableRun
    from airflow_pydantic_ai.durable.steps.stats import SUMMARY_TEMPLATE, empty_summary
    from airflow_pydantic_ai.durable.steps.writer import secret_check
    from airflow_pydantic_ai.durable.storage.identity import TaskIdentity, make_private_folders
    from airflow_pydantic_ai.durable.storage.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = [
    "SUMMARY_TEMPLATE",
    "TOOL_CONFIG_KEY",
    "CacheReader",
    "DurableCapability",
    "DurableConfigError",
    "DurableError",
    "DurableRun",
    "DurableStorageError",
    "StepDetail",
    "StepInfo",
    "StepStore",
    "TaskIdentity",
    "attempt_scope",
    "describe_error",
    "empty_summary",
    "live_tool",
    "make_private_folders",
    "run_agent",
    "secret_check",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "SUMMARY_TEMPLATE": "steps.stats",
    "TOOL_CONFIG_KEY": "interception.toolset",
    "CacheReader": "storage.reader",
    "DurableCapability": "interception.capability",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableRun": "steps.run",
    "DurableStorageError": "errors",
    "StepDetail": "storage.reader",
    "StepInfo": "storage.reader",
    "StepStore": "storage.store",
    "TaskIdentity": "storage.identity",
    "attempt_scope": "steps.nesting",
    "describe_error": "errors",
    "empty_summary": "steps.stats",
    "live_tool": "interception.toolset",
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
