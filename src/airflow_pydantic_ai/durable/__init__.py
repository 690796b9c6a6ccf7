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
    from airflow_pydantic_ai.durable.approvals import WaitingForDecisions
    from airflow_pydantic_ai.durable.attempt import run_agent
    from airflow_pydantic_ai.durable.attempts import AttemptRecord, TryEnding, latest_attempt, record_ending
    from airflow_pydantic_ai.durable.capability import DurableCapability
    from airflow_pydantic_ai.durable.catalog import CacheSummary, list_caches
    from airflow_pydantic_ai.durable.decision import Decision, DecisionStep
    from airflow_pydantic_ai.durable.errors import DurableConfigError, DurableError, DurableStorageError, describe_error
    from airflow_pydantic_ai.durable.identity import TaskIdentity, id_segment, is_shortened, make_private_folders
    from airflow_pydantic_ai.durable.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.run import DurableRun
    from airflow_pydantic_ai.durable.stats import SUMMARY_TEMPLATE, TaskLogger, empty_summary, plural
    from airflow_pydantic_ai.durable.store import StepStore
    from airflow_pydantic_ai.durable.writer import secret_check

__all__ = [
    "SUMMARY_TEMPLATE",
    "AttemptRecord",
    "CacheReader",
    "CacheSummary",
    "Decision",
    "DecisionStep",
    "DurableCapability",
    "DurableConfigError",
    "DurableError",
    "DurableRun",
    "DurableStorageError",
    "StepDetail",
    "StepInfo",
    "StepStore",
    "TaskIdentity",
    "TaskLogger",
    "TryEnding",
    "WaitingForDecisions",
    "describe_error",
    "empty_summary",
    "id_segment",
    "is_shortened",
    "latest_attempt",
    "list_caches",
    "make_private_folders",
    "plural",
    "record_ending",
    "run_agent",
    "secret_check",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "SUMMARY_TEMPLATE": "stats",
    "AttemptRecord": "attempts",
    "CacheReader": "reader",
    "CacheSummary": "catalog",
    "Decision": "decision",
    "DecisionStep": "decision",
    "DurableCapability": "capability",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableRun": "run",
    "DurableStorageError": "errors",
    "StepDetail": "reader",
    "StepInfo": "reader",
    "StepStore": "store",
    "TaskIdentity": "identity",
    "TaskLogger": "stats",
    "TryEnding": "attempts",
    "WaitingForDecisions": "approvals",
    "describe_error": "errors",
    "empty_summary": "stats",
    "id_segment": "identity",
    "is_shortened": "identity",
    "latest_attempt": "attempts",
    "list_caches": "catalog",
    "make_private_folders": "identity",
    "plural": "stats",
    "record_ending": "attempts",
    "run_agent": "attempt",
    "secret_check": "writer",
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
