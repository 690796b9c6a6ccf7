"""Everything that differs between the Airflow releases this package supports (3.1, 3.2, 3.3), and the one
private pydantic-ai attribute the package reads (:func:`agent_has_output_validators`).

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
    "agent_has_output_validators",
    "airflow_version_at_least",
    "cli_command_prefix",
    "get_fernet",
    "redact",
    "run_id_from_view_link",
    "storage_conn_id",
]


def agent_has_output_validators(agent: Any) -> bool | None:
    """Whether a pydantic-ai agent has output validators (``@agent.output_validator``); None when unknown.

    pydantic-ai refuses a run ``output_type`` beside output validators and has no public way to ask
    whether an agent has any: ``Agent._output_validators`` (2.62 to 2.68) is read here, and nowhere else.
    """
    validators = getattr(agent, "_output_validators", None)
    return None if validators is None else bool(validators)


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
