"""Test-side gates for the releases the version matrix runs (Airflow 3.1-3.3, pydantic-ai-slim 2.62-2.68).

The tests use a few Airflow internals that moved between releases (storing a DAG defined inside a
test), and a few pydantic-ai features newer than the lowest supported release; each such difference
lives here, gated on the installed release, so the test modules stay the same on every combination.
Runtime gates of the package itself live in ``airflow_pydantic_ai._compat``.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest
from packaging.version import Version


def airflow_version() -> Version:
    """The installed Airflow release, without pre-release or local parts (``3.1.8``)."""
    from airflow import __version__

    return Version(Version(__version__).base_version)


def dagbag_api() -> tuple[Any, Any]:
    """``(DagBag, sync_bag_to_db)``: in ``airflow.dag_processing.dagbag`` from 3.2, ``airflow.models.dagbag`` before."""
    if airflow_version() >= Version("3.2"):
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    else:
        from airflow.models.dagbag import DagBag, sync_bag_to_db  # type: ignore[no-redef]
    return DagBag, sync_bag_to_db


def requires_pydantic_ai(minimum: str, feature: str) -> pytest.MarkDecorator:
    """Skip a test on a pydantic-ai-slim older than ``minimum``, where ``feature`` does not exist."""
    installed = Version(version("pydantic-ai-slim"))
    return pytest.mark.skipif(
        installed < Version(minimum), reason=f"{feature} needs pydantic-ai-slim>={minimum} (installed: {installed})"
    )


def task_runtime_providers_manager() -> Any:
    """The providers manager that serves hooks and task decorators to tasks.

    The task SDK's ``ProvidersManagerTaskRuntime`` from Airflow 3.2; before, core's ``ProvidersManager``.
    """
    if airflow_version() >= Version("3.2"):
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

        return ProvidersManagerTaskRuntime()
    from airflow.providers_manager import ProvidersManager

    return ProvidersManager()


def connection_form_metadata_loads() -> bool:
    """Whether Airflow reads hooks' connection-form metadata here.

    Airflow 3.1 imports ``wtforms`` (shipped with the FAB provider) for it and leaves every hook's form
    metadata out when it is missing; 3.2 and later need no UI package.
    """
    if airflow_version() >= Version("3.2"):
        return True
    try:
        import wtforms  # noqa: F401
    except ImportError:
        return False
    return True


def skip_without_connection_form_metadata() -> None:
    """Skip the calling test where :func:`connection_form_metadata_loads` is False."""
    if not connection_form_metadata_loads():
        pytest.skip("Airflow 3.1 loads connection-form metadata only with wtforms (the FAB provider) installed")


def skip_strict_provider_schema_before_3_2() -> None:
    """Skip the calling test on Airflow 3.1, whose strict ``provider.yaml`` schema allows one tag from a list
    without ``ai`` / ``llm`` (3.2 added them). The runtime schema, which 3.1 does enforce, accepts them."""
    if airflow_version() < Version("3.2"):
        pytest.skip("Airflow 3.1's strict provider.yaml schema predates the ai / llm integration tags")


def clear_fernet_cache() -> None:
    """Forget the Fernet object Airflow keeps per process, so the next use reads ``[core] fernet_key`` again.

    From 3.2 ``airflow.sdk.crypto.get_fernet`` is an ``functools.cache``; 3.1's ``airflow.models.crypto`` keeps
    it in the module global ``_fernet``.
    """
    if airflow_version() >= Version("3.2"):
        from airflow.sdk.crypto import get_fernet

        get_fernet.cache_clear()
    else:
        import airflow.models.crypto

        airflow.models.crypto._fernet = None  # type: ignore[attr-defined]


def airflow_reads_provider_cli() -> bool:
    """Whether ``airflow`` itself has the providers' commands (their ``cli`` entry): Airflow 3.2 and later.

    On 3.1 the console script ``airflow-pydantic-ai`` is the way to the same commands.
    """
    return airflow_version() >= Version("3.2")


def requires_approval_parking() -> pytest.MarkDecorator:
    """Skip an approval test that answers under ``dag.test()`` where the task defers instead of parking.

    Before Airflow 3.3 a task waiting for approval defers to the standard provider's ``HITLTrigger``;
    ``dag.test()`` runs that trigger in-process, and the in-process supervisor does not serve the trigger's
    request for the answer ("Unhandled request GetHITLDetailResponse"), so no answer ever reaches it. There
    a real triggerer is needed (``airflow triggerer``); from 3.3 the task parks in ``awaiting_input``.
    """
    installed = airflow_version()
    return pytest.mark.skipif(
        installed < Version("3.3"),
        reason=f"Airflow {installed} defers approvals to HITLTrigger, which dag.test() runs in-process without "
        "serving its GetHITLDetail request (a triggerer is needed); parking in awaiting_input needs 3.3",
    )


def keep_task_state_to_resume() -> bool | None:
    """The ``keep_task_state`` of a REST clear meant to resume from the durable cache.

    Airflow 3.4's clear discards the task's state (and so its durable cache) unless asked to keep it; older
    releases have no such field (None: send none).
    """
    return True if airflow_version() >= Version("3.4") else None
