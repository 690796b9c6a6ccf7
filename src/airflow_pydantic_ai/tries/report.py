"""Where a durable try's report goes on the Airflow side: the XCom ``durable_report`` and Airflow's ``Stats``.

:func:`publish_report` is given the report when the try ends (``Attempt.when_ended``), whatever the
outcome: the operator and ``durable_attempt()`` both use it. Neither the push nor the metrics can fail the
task: each failure is one WARNING.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable import DurableReport, TaskLogger

__all__ = ["publish_report"]


def publish_report(context: Any, report: DurableReport, *, log: TaskLogger, push: bool = True) -> None:
    """Count ``report`` in Airflow's ``Stats`` and, with ``push``, push it as the task instance's XCom
    ``durable_report`` (also on a failed try: Airflow keeps it until the next try starts)."""
    from airflow_pydantic_ai.tries.metrics import count_attempt, metric_tags

    value = report.to_json()
    ti = context["ti"]
    count_attempt(value, tags=metric_tags(ti), warn=log.warning)
    if not push:
        return
    try:
        ti.xcom_push(key=report.xcom_key, value=value)
    except Exception as error:
        log.warning("Durable: could not push the durable report to XCom: %s", error)
