"""Defer a durable try while a model request is pending, and resume it when the provider has the result.

The engine records the submission (the suspended response and its ticket) as a step before the wait, and raises
``RequestPending`` when the attempt is told it can defer (``AttemptOptions.defer_pending``). Here the operator hands
the tickets to :class:`~airflow_pydantic_ai.triggers.pending_request.PendingRequestTrigger`, which checks them in
the triggerer with the model rebuilt from the task's connection, holding no worker slot. Airflow then calls
``operator.resume_after_pending`` on a worker (same try number): the resumed try replays the recorded steps and
the engine collects the result of the pending step.

Where the triggerer cannot rebuild the model (an ``agent=`` given with a ready model object and no connection or
model id), the task defers on a plain timer for pydantic-ai's poll interval and checks once on the worker when it
resumes, deferring again while the request is still pending.

Airflow 3.1-3.4 with the task SDK time ``execution_timeout`` per run of ``execute`` / the resume method on a worker
(``task_runner._execute_task``); the time spent deferred does not count (the execution API leaves the trigger
timeout to the deferral: "TODO: HANDLE execution timeout later", checked on 3.3.2). The deferral's own timeout is
the task's ``pending_timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from airflow_pydantic_ai.pending.settings import PendingSettings

__all__ = ["RESUME_METHOD", "ModelSource", "defer_while_pending", "log_resume", "pending_output"]

RESUME_METHOD = "resume_after_pending"
"""The operator method Airflow calls when the pending requests have their results (``next_method``)."""


@dataclass(frozen=True)
class ModelSource:
    """Where the triggerer rebuilds the model from: the task's connection and/or model id (JSON, nothing else)."""

    llm_conn_id: str | None
    model_id: str | None

    @classmethod
    def of(cls, *, llm_conn_id: str | None, model_id: str | None, agent: Any) -> ModelSource | None:
        """The task's connection and model id; an ``agent=``'s model when it is a model id (a string); None when
        the model is a ready object the triggerer cannot rebuild."""
        if llm_conn_id or model_id:
            return cls(llm_conn_id or None, model_id or None)
        agent_model = getattr(agent, "model", None)
        if isinstance(agent_model, str) and agent_model:
            return cls(None, agent_model)
        return None


def pending_output(output: Any) -> bool:
    """Whether a run ended with ``PendingModelResponse`` (in its ``output_type``): a result still to collect."""
    try:
        from pydantic_ai.output import PendingModelResponse
    except ImportError:  # a pydantic-ai without it cannot end a run so
        return False
    return isinstance(output, PendingModelResponse)


def defer_while_pending(
    operator: Any,
    *,
    tickets: list[Any],
    source: ModelSource | None,
    settings: PendingSettings,
    agent: Any,
    log: Any,
) -> NoReturn:
    """Release the worker until the pending requests have results; Airflow then calls
    ``operator.resume_after_pending``."""
    poll_interval, max_poll_interval = settings.poll_intervals(agent)
    timeout = _remaining(settings.timeout, tickets)
    shown = "; ".join(ticket.describe() for ticket in tickets) or "its ticket is in the cache"
    trigger: Any
    if source is None or not tickets:
        from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

        log.info(
            "Durable: a model request is pending at the provider (%s); %s, so the task defers for %s and checks once "
            "on a worker when it resumes",
            shown,
            "the triggerer cannot rebuild this agent's model (a ready model object, no llm_conn_id / model_id)"
            if tickets
            else "the run ended in a PendingModelResponse",
            _seconds(poll_interval),
        )
        trigger = TimeDeltaTrigger(timedelta(seconds=poll_interval))
    else:
        from airflow_pydantic_ai.triggers.pending_request import PendingRequestTrigger

        log.info(
            "Durable: %d model request(s) pending at the provider (%s); the task defers, the triggerer checks every "
            "%s or more (pending_timeout: %s), and no worker slot is held until the result is ready",
            len(tickets),
            shown,
            _seconds(poll_interval),
            f"{timedelta(seconds=round(timeout.total_seconds()))} left" if timeout is not None else "none",
        )
        trigger = PendingRequestTrigger(
            tickets=[ticket.to_payload() for ticket in tickets],
            llm_conn_id=source.llm_conn_id,
            model_id=source.model_id,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
        )
    operator.defer(trigger=trigger, method_name=RESUME_METHOD, timeout=timeout)
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises


def log_resume(log: Any, event: Any) -> None:
    """The log line of a try resumed after a pending model request: what the triggerer saw, or that the worker
    checks."""
    from airflow_pydantic_ai.triggers.pending_request import PendingCheck

    check = PendingCheck.from_event(event)
    log.info(
        "Durable: resumed after a pending model request: %s",
        f"{check.status} after {check.checks} check(s) in the triggerer {check.detail}".rstrip()
        if check is not None
        else "the wait is over, checking on this worker",
    )


def _remaining(timeout: timedelta | None, tickets: list[Any]) -> timedelta | None:
    """``pending_timeout`` counted from the earliest submission the tickets know (a fresh deferral after a check on
    the worker does not restart the clock); the whole timeout when they do not say."""
    if timeout is None:
        return None
    submitted = [at for at in (_submitted_at(ticket) for ticket in tickets) if at is not None]
    if not submitted:
        return timeout
    waited = datetime.now(UTC) - min(submitted)
    return max(timeout - waited, timedelta(seconds=1))


def _submitted_at(ticket: Any) -> datetime | None:
    at = getattr(ticket, "submitted_at", None)
    if isinstance(at, datetime):
        return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return None


def _seconds(seconds: float) -> str:
    """``30 s``, ``0.05 s``: a poll interval as the log shows it."""
    return f"{seconds:g} s"
