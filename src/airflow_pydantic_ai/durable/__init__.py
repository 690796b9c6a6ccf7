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
    from airflow_pydantic_ai.durable.capability import DurableCapability
    from airflow_pydantic_ai.durable.errors import DurableConfigError, DurableError, DurableStorageError
    from airflow_pydantic_ai.durable.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.run import SUMMARY_TEMPLATE, DurableRun, empty_summary
    from airflow_pydantic_ai.durable.store import StepStore, TaskIdentity

__all__ = [
    "SUMMARY_TEMPLATE",
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
    "empty_summary",
]

# Which module holds each public name (the one place to update when a name moves).
_HOMES = {
    "SUMMARY_TEMPLATE": "run",
    "CacheReader": "reader",
    "DurableCapability": "capability",
    "DurableConfigError": "errors",
    "DurableError": "errors",
    "DurableRun": "run",
    "DurableStorageError": "errors",
    "StepDetail": "reader",
    "StepInfo": "reader",
    "StepStore": "store",
    "TaskIdentity": "store",
    "empty_summary": "run",
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
