"""Waiting for a model request the provider is still working on (a batch, an OpenAI background response) without
holding a worker: the Airflow side of issue 38.

Rooms: :mod:`.settings` (the task's ``pending_timeout`` and ``batch=`` shortcut, read once; the WARNING of a task
that batches without ``durable=True``), :mod:`.wait` (defer to the triggerer while a request is pending, and what the
resumed try is told). The trigger itself is :mod:`airflow_pydantic_ai.triggers.pending_request`; the engine records
the submission as a step and collects the result (``RequestPending``, ``PendingTicket``, ``check_pending``).
"""

from __future__ import annotations

from airflow_pydantic_ai.pending.settings import DEFAULT_PENDING_TIMEOUT, PendingSettings
from airflow_pydantic_ai.pending.wait import RESUME_METHOD, ModelSource, defer_while_pending, pending_output

__all__ = [
    "DEFAULT_PENDING_TIMEOUT",
    "RESUME_METHOD",
    "ModelSource",
    "PendingSettings",
    "defer_while_pending",
    "pending_output",
]
