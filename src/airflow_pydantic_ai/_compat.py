"""Everything that differs between the Airflow releases this package supports (3.1 to 3.4).

Each difference is one small function, gated on the installed release where the APIs disagree, so
the rest of the package reads the same on every release. Where
``apache-airflow-providers-common-compat`` already offers a stable name, it is used instead of a gate.
Airflow is imported inside the functions, never at module import, so DAG parsing stays cheap.
The releases this covers are the ones ``constraints/`` pins and ``make matrix`` tests.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = [
    "airflow_version_at_least",
    "cli_command_prefix",
    "get_fernet",
    "redact",
    "reschedule_count",
    "run_id_from_view_link",
    "storage_conn_id",
    "task_region",
]


@functools.cache
def _airflow_release() -> tuple[int, int]:
    from airflow import __version__

    major, minor = __version__.split(".")[:2]
    return int(major), int(minor)


def airflow_version_at_least(major: int, minor: int) -> bool:
    """True when the installed Airflow is ``major.minor`` or newer (pre-releases count as their release)."""
    return _airflow_release() >= (major, minor)


def cli_command_prefix() -> list[str]:
    """The words that start this provider's commands: ``airflow pydantic-ai`` where Airflow reads providers'
    ``cli`` entry (3.2 and later), else the console script ``airflow-pydantic-ai`` (Airflow 3.1)."""
    if airflow_version_at_least(3, 2):
        return ["airflow", "pydantic-ai"]
    return ["airflow-pydantic-ai"]


def get_fernet() -> Any:
    """Airflow's Fernet object for ``[core] fernet_key`` (a ``NullFernet`` when the key is empty).

    The task SDK has it as ``airflow.sdk.crypto.get_fernet`` from Airflow 3.2; 3.1 keeps it in core's
    ``airflow.models.crypto``, and common.compat has no name for it.
    """
    if airflow_version_at_least(3, 2):
        from airflow.sdk.crypto import get_fernet as airflow_get_fernet
    else:
        from airflow.models.crypto import get_fernet as airflow_get_fernet  # type: ignore[no-redef]
    return airflow_get_fernet()


def redact(value: Any) -> Any:
    """``value`` with every secret registered with Airflow's secrets masker replaced by ``***``.

    The masker moved between task SDK releases; common.compat's ``redact`` is the stable name for it.
    """
    from airflow.providers.common.compat.sdk import redact as airflow_redact

    return airflow_redact(value)


def run_id_from_view_link(run_id: str) -> str:
    """The run id as the task instance has it, from the ``run_id`` of the UI's link to an external view.

    Airflow 3.2 percent-encodes the ids it puts into the link; 3.1 puts them in raw, so the ``+`` of a run
    id (``manual__2026-11-23T10:00:00+00:00``) arrives as a space. A run id holds no space (``[scheduler]
    allowed_run_id_pattern`` and Airflow's own ids), so on 3.1 every space is turned back into ``+``.
    """
    if airflow_version_at_least(3, 2):
        return run_id
    return run_id.replace(" ", "+")


def storage_conn_id(path: Any) -> str | None:
    """The connection id an ``ObjectStoragePath`` was built with (``s3://conn_id@bucket/...``), or None.

    Airflow 3.2 made it the ``conn_id`` property; 3.1 keeps it in ``storage_options``.
    """
    if airflow_version_at_least(3, 2):
        return path.conn_id
    return path.storage_options.get("conn_id")


def reschedule_count(context: Any) -> int:
    """How often Airflow rescheduled the running try so far (0 when it never was).

    The context's ``task_reschedule_count`` (the server counts the try's reschedule records); read from
    the task instance's server context when a caller built its own context without it.
    """
    count = context.get("task_reschedule_count") if hasattr(context, "get") else None
    if count is None:
        server_context = getattr(
            context.get("ti") if hasattr(context, "get") else None, "_ti_context_from_server", None
        )
        count = getattr(server_context, "task_reschedule_count", None)
    try:
        return int(count or 0)
    except (TypeError, ValueError):
        return 0


def task_region(ti: Any, context: Any = None) -> Any:
    """The task instance's region inside an Airflow 3.4 loop (a ``durable.identity.Region``), else None.

    Airflow 3.4 gives a task instance ``region_id`` / ``region_index`` (the all-zero UUID outside any
    region) and a looped task's context ``loop`` (``index``: the iteration); older releases have neither.
    Only a loop runs one task id (and map index) more than once in a DAG run: the expansion of a mapped
    task outside any loop is a region of its own in 3.4 too, but its map index already tells its task
    instances apart, so it keeps the layout of earlier releases (and the caches they wrote keep replaying).
    """
    from airflow_pydantic_ai.durable.identity import Region

    region_id = getattr(ti, "region_id", None)
    loop = context.get("loop") if context is not None and hasattr(context, "get") else None
    if region_id is None or loop is None:
        return None
    index = getattr(ti, "region_index", None)
    if index is None:
        index = getattr(ti, "map_index", -1)
    iteration = getattr(loop, "index", None)
    return Region.of(region_id, -1 if index is None else int(index), iteration)
