"""Durable agent runs: record each model response and tool result, replay them on a retry.

This package knows nothing of Airflow operators: it works on any fsspec filesystem, so it can be
used (and tested) without a running Airflow.
"""

from __future__ import annotations

from airflow_pydantic_ai.durable.capability import DurableCapability
from airflow_pydantic_ai.durable.reader import CacheReader, StepDetail, StepInfo
from airflow_pydantic_ai.durable.run import SUMMARY_TEMPLATE, DurableRun, DurableStorageError, empty_summary
from airflow_pydantic_ai.durable.store import StepStore, TaskIdentity

__all__ = [
    "SUMMARY_TEMPLATE",
    "CacheReader",
    "DurableCapability",
    "DurableRun",
    "DurableStorageError",
    "StepDetail",
    "StepInfo",
    "StepStore",
    "TaskIdentity",
    "empty_summary",
]
