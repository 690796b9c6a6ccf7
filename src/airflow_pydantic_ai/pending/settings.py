"""What a task says about its pending model requests, read once per try: how long the deferral may wait
(``pending_timeout``) and whether the operator adds pydantic-ai's ``BatchModelRequests`` (``batch=``)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = [
    "DEFAULT_PENDING_TIMEOUT",
    "LOST_WORKER_WARNING",
    "PendingSettings",
    "refuse_unsupported_batching",
    "uses_provider_side_work",
]

DEFAULT_PENDING_TIMEOUT = timedelta(hours=24)
"""The providers' completion window: OpenAI's and Anthropic's batches end within 24 hours (expired otherwise)."""

LOST_WORKER_WARNING = (
    "%s sends its model requests through the provider's batch API (or OpenAI's background mode) without "
    "durable=True: the submission is not recorded, so a worker lost while the provider works (hours, for a "
    "batch) leaves a retry that submits the requests again and pays twice, and the worker slot is held through "
    "the whole wait. Set durable=True to record the submission and wait in the triggerer (docs/batch.rst)."
)
"""The WARNING of a task that batches without ``durable=True``."""


@dataclass(frozen=True)
class PendingSettings:
    """The task's ``pending_timeout`` and ``batch=`` as one value."""

    timeout: timedelta | None = DEFAULT_PENDING_TIMEOUT
    """How long one deferral waits for a pending request; None waits without limit."""
    batch: Any = None
    """None / False: the agent's own capabilities decide; True: a default ``BatchModelRequests()``; or the user's
    ``BatchModelRequests(...)`` instance."""

    @classmethod
    def checked(cls, pending_timeout: Any, batch: Any) -> PendingSettings:
        """The settings of a task, checked where the DAG is parsed (a rendered template is read again per try)."""
        if batch not in (None, False, True) and not isinstance(batch, _batch_class()):
            raise TypeError(f"batch= takes True or a pydantic_ai.capabilities.BatchModelRequests(...), got {batch!r}")
        return cls(timeout=_duration(pending_timeout), batch=batch)

    def capabilities(self) -> list[Any]:
        """What the operator adds to the run: the batching capability of ``batch=``, or nothing."""
        if self.batch is None or self.batch is False:
            return []
        if self.batch is True:
            return [_batch_class()()]
        return [self.batch]

    def batching(self, agent: Any) -> Any:
        """The ``BatchModelRequests`` the run uses (``batch=``, else the agent's own); None when it batches nothing."""
        added = self.capabilities()
        if added:
            return added[0]
        from airflow_pydantic_ai import _compat

        batch_class = _batch_class()
        return next((cap for cap in _compat.agent_capabilities(agent) if isinstance(cap, batch_class)), None)

    def poll_intervals(self, agent: Any) -> tuple[float, float]:
        """``(poll_interval, max_poll_interval)`` in seconds: the run's ``BatchModelRequests``' own, else
        pydantic-ai's defaults."""
        from airflow_pydantic_ai import _compat

        batching = self.batching(agent)
        if batching is None:
            return _compat.batch_poll_defaults()
        return batching.poll_interval.total_seconds(), batching.max_poll_interval.total_seconds()


def _duration(value: Any) -> timedelta | None:
    """A timedelta from a timedelta, seconds, or a rendered template (seconds, or an ISO 8601 duration)."""
    if value is None or isinstance(value, timedelta):
        return value
    from pydantic import TypeAdapter, ValidationError

    if isinstance(value, str):
        value = value.strip()
        with suppress(ValueError):  # else an ISO 8601 duration, or a mistake the adapter names
            value = float(value)  # a rendered template of seconds
    try:
        duration = TypeAdapter(timedelta).validate_python(value)
    except ValidationError:
        raise ValueError(
            f"pending_timeout={value!r} is not a duration: give a timedelta, seconds (86400) or an ISO 8601 "
            "duration ('PT24H'), or None to wait without limit"
        ) from None
    if duration <= timedelta(0):
        raise ValueError(f"pending_timeout={value!r} must be positive (or None to wait without limit)")
    return duration


def _batch_class() -> Any:
    from airflow_pydantic_ai import _compat

    return _compat.batch_model_requests()


def uses_provider_side_work(agent: Any, settings: PendingSettings, model: Any = None) -> bool:
    """Whether the run sends requests the provider works on in the background: a batch (``batch=``, the agent's
    ``BatchModelRequests``) or OpenAI's background mode (``openai_background`` in the agent's or model's settings)."""
    if settings.batching(agent) is not None:
        return True
    for source in (getattr(agent, "model_settings", None), getattr(model, "settings", None)):
        if isinstance(source, dict) and source.get("openai_background"):
            return True
    agent_model = getattr(agent, "model", None)
    settings_of_model = getattr(agent_model, "settings", None)
    return isinstance(settings_of_model, dict) and bool(settings_of_model.get("openai_background"))


def refuse_unsupported_batching(agent: Any, settings: PendingSettings, model: Any = None) -> None:
    """A durable run that batches (or uses background mode) under a pydantic-ai that cannot be recorded so fails
    before any request, naming the release to install."""
    from airflow_pydantic_ai import _compat

    why = _compat.durable_batching_unsupported()
    if why and uses_provider_side_work(agent, settings, model):
        raise RuntimeError(why)
