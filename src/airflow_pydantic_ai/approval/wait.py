"""Waiting for a person's answer through Airflow's human-in-the-loop machinery, without holding a worker.

VERSION GATE (the only place in the approval flow that asks which Airflow runs; merge it with
``_compat.py``): on Airflow 3.3+ the task parks in the ``awaiting_input`` state (``TaskAwaitingInput``:
no trigger, no triggerer; the api-server's response handler or the scheduler's timeout sweep resumes
it); on 3.1/3.2 it defers to the standard provider's ``HITLTrigger`` (the triggerer polls the answer).
Either way the worker slot is released, and the task resumes in the method named here with the answer
as ``event``, exactly as ``HITLOperator`` does.

Airflow keeps one request per task-instance try: a later round in the same try keeps the first
round's subject, text and fields (the upsert only clears the previous response), so the resumed task
is told whether the request it wrote is the one Airflow shows (``request_ti`` / ``shown_refs``), and
every round's request is also written to the task's rendered fields as ``approval_request`` (shown on
the Rendered Templates tab, and in the REST API's ``hitlDetails`` answer under
``task_instance.rendered_fields``), which Airflow does refresh within a try.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.approval.request import ApprovalRequest

__all__ = [
    "RENDERED_FIELD",
    "RESUME_METHOD",
    "parks_for_input",
    "publish_request",
    "wait_for_answer",
    "why_no_human_in_the_loop",
]

RENDERED_FIELD = "approval_request"
"""The rendered field that always shows the current round's request."""

RESUME_METHOD = "resume_after_approval"
"""The operator method Airflow calls with the answer (``next_method``)."""


def _standard_provider() -> Any:
    try:
        from airflow.providers.standard import version_compat
    except ImportError as error:  # pragma: no cover - the provider is a dependency
        raise RuntimeError(
            "asking a person (tool calls that need approval, calls whose outcome is unknown) uses Airflow's "
            "human-in-the-loop support from apache-airflow-providers-standard (Airflow 3.1+), which is not installed"
        ) from error
    if not version_compat.AIRFLOW_V_3_1_PLUS:  # pragma: no cover - this package needs 3.1
        raise RuntimeError(
            "asking a person (tool calls that need approval, calls whose outcome is unknown) needs Airflow 3.1 or "
            "later (human-in-the-loop)"
        )
    return version_compat


def why_no_human_in_the_loop() -> str:
    """Why this Airflow cannot ask a person (the standard provider's human-in-the-loop is missing); "" when it can."""
    try:
        _standard_provider()
    except RuntimeError as error:
        return str(error)
    return ""


def parks_for_input() -> bool:
    """Airflow 3.3+: the task waits in ``awaiting_input``; before: it defers to ``HITLTrigger``."""
    _standard_provider()
    return _compat.hitl_parks_for_input()


def publish_request(context: Any, request: ApprovalRequest, assigned_users: list[dict[str, str]] | None) -> str:
    """Write the request where the "Required Actions" page and the REST API read it.

    Returns why the request could not also be shown in the rendered fields ("" when it was).
    """
    _standard_provider()
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    upsert_hitl_detail(
        ti_id=context["task_instance"].id,
        options=request.options,
        subject=request.subject,
        body=request.body,
        defaults=request.defaults,
        multiple=False,
        params=request.params,
        assigned_users=assigned_users or None,  # type: ignore[arg-type]
    )
    try:
        _show_in_rendered_fields(context, request)
    except Exception as error:  # the request itself is written: showing it twice is a convenience
        return f"{type(error).__name__}: {error}"
    return ""


def _show_in_rendered_fields(context: Any, request: ApprovalRequest) -> None:
    """Add the request to the task's rendered fields (Airflow rewrites them on every call).

    Uses the task SDK's own serializer of rendered fields (through :mod:`~airflow_pydantic_ai._compat`),
    so that the operator's templated fields stay as Airflow shows them.
    """
    from airflow.sdk.execution_time.comms import SetRenderedFields
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    fields = _compat.rendered_fields_of(context["task"])
    fields[RENDERED_FIELD] = f"{request.subject}\n\n{request.body}"
    SUPERVISOR_COMMS.send(SetRenderedFields(rendered_fields=fields))


def wait_for_answer(
    operator: Any,
    context: Any,
    request: ApprovalRequest,
    *,
    timeout: timedelta | None,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Release the worker until the answer comes; Airflow then calls ``operator.resume_after_approval``."""
    if parks_for_input():
        from airflow.sdk.exceptions import TaskAwaitingInput

        raise TaskAwaitingInput(method_name=RESUME_METHOD, kwargs=kwargs, timeout=timeout)
    # Airflow 3.1 / 3.2: the triggerer polls the answer (and applies the defaults at the timeout).
    from airflow.providers.standard.triggers.hitl import HITLTrigger
    from airflow.sdk.timezone import utcnow

    operator.defer(
        trigger=HITLTrigger(
            ti_id=context["task_instance"].id,
            options=request.options,
            defaults=request.defaults,
            params=request.params,
            multiple=False,
            timeout_datetime=utcnow() + timeout if timeout else None,
        ),
        method_name=RESUME_METHOD,
        kwargs=kwargs,
    )
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises
