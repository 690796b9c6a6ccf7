"""Everything that differs between the Airflow releases this package supports (3.1 to 3.4), and every
private Airflow name the package uses.

Each difference is one small function, gated on the installed release where the APIs disagree, so
the rest of the package reads the same on every release. Where
``apache-airflow-providers-common-compat`` already offers a stable name, it is used instead of a gate.
A private name (a leading underscore in Airflow or pydantic-ai) is used here only, each with the
releases it was checked on; nothing else in the package reaches into one.
Airflow is imported inside the functions, never at module import, so DAG parsing stays cheap.
The releases this covers are the ones ``constraints/`` pins and ``make matrix`` tests.

The pydantic-ai internals the durable engine reads live in ``durable/_pydantic_ai.py`` (the engine imports
nothing of the Airflow side); the one the Airflow side needs (``set_model_settings``, for the hook) stays
here.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = [
    "agent_capabilities",
    "airflow_version_at_least",
    "batch_model_requests",
    "batch_poll_defaults",
    "clear_asks_to_keep_task_state",
    "cli_command_prefix",
    "durable_batching_unsupported",
    "ensure_metadata_db",
    "get_fernet",
    "hitl_parks_for_input",
    "load_dags",
    "poll_delay",
    "read_xcom",
    "redact",
    "rendered_fields_of",
    "reschedule_count",
    "resumes_after_deferral",
    "retry_can_reschedule",
    "retry_policy_api",
    "run_id_from_view_link",
    "set_model_settings",
    "storage_conn_id",
    "store_dag",
    "task_region",
    "waits_for_a_person",
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
    """``value`` with Airflow's secrets masked: values under sensitive keys (``password``, ``api_key``...)
    and every value registered as a secret, with the task SDK's masker (a worker's) and core's (the
    api-server's), which each process kind fills on its own. The one redactor of the package: the
    secret check before a step is written, the approval request, ``cache show`` and the view. At any depth:
    Airflow's masker stops masking registered secrets in text five levels down; the strings below are masked
    one by one here.

    The task SDK's masker moved between task SDK releases; common.compat's ``redact`` is the stable name
    for it. Core's masker is private (``airflow._shared.secrets_masker``, checked on Airflow 3.2.2 and
    3.3.2; absent on 3.1, where the task SDK's is the only one).
    """
    for mask in _maskers():
        value = mask(value)
    return _masked_below_airflows_depth(value, 0)


_AIRFLOW_MASKING_DEPTH = 5
"""Airflow's masker hides values under sensitive keys at any depth, but masks registered secrets in text only
down to this depth (``SecretsMasker.MAX_RECURSION_DEPTH``); below it, strings come back as they were."""


def _masked_below_airflows_depth(value: Any, depth: int) -> Any:
    """``value`` with every string deeper than Airflow's masker looks masked on its own (as text at depth 0),
    leaf up, at any depth; shallower values are returned as the masker left them."""
    if isinstance(value, str):
        if depth <= _AIRFLOW_MASKING_DEPTH:
            return value
        for mask in _maskers():
            value = mask(value)
        return value
    if isinstance(value, dict):
        return {key: _masked_below_airflows_depth(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_masked_below_airflows_depth(item, depth + 1) for item in value]
        return items if isinstance(value, list) else tuple(items)  # Airflow's masker turns sets into tuples too
    return value


@functools.cache
def _maskers() -> tuple[Any, ...]:
    from airflow.providers.common.compat.sdk import redact as sdk_redact

    try:
        from airflow._shared.secrets_masker import redact as core_redact
    except ImportError:
        return (sdk_redact,)
    return (sdk_redact,) if core_redact is sdk_redact else (sdk_redact, core_redact)


def waits_for_a_person(error: BaseException) -> str:
    """What a try that raised ``error`` waits in (``awaiting_input``, ``deferred``); "" when it failed.

    Airflow 3.3 parks a task waiting for a person with ``TaskAwaitingInput``; 3.1 and 3.2 defer it
    (``TaskDeferred``: in ``airflow.sdk.exceptions`` from 3.2, in core's ``airflow.exceptions`` on 3.1).
    Recognised by type, never by name.
    """
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef,attr-defined,unused-ignore]

    awaiting_input: Any = None
    if airflow_version_at_least(3, 3):
        from airflow.sdk.exceptions import TaskAwaitingInput

        awaiting_input = TaskAwaitingInput
    if awaiting_input is not None and isinstance(error, awaiting_input):
        return "awaiting_input"
    if isinstance(error, TaskDeferred):
        return "deferred"
    return ""


def resumes_after_deferral(ti: Any) -> bool:
    """Whether the running task instance resumes a try (after a deferral or a wait for input).

    The task SDK's runtime task instance keeps the server's start context in a private attribute
    (``_ti_context_from_server.next_method``, checked on task SDK 1.1 to 1.3, Airflow 3.1 to 3.3); no
    public name says it. Without it the answer is False (a fresh try).
    """
    server_context = getattr(ti, "_ti_context_from_server", None)
    return bool(getattr(server_context, "next_method", None))


def rendered_fields_of(task: Any) -> dict[str, Any]:
    """The task's templated fields, serialized as the task SDK sends them as rendered fields.

    The task SDK's own serializer is private (``task_runner._serialize_rendered_fields``, checked on
    task SDK 1.1 to 1.3), so that the fields stay as Airflow shows them.
    """
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields

    return dict(_serialize_rendered_fields(task))


def set_model_settings(model: Any, settings: Any) -> None:
    """Give a model built by ``infer_model()`` its settings (``model.settings`` then returns them).

    ``infer_model()`` takes no settings and a model's settings are set only by its constructor, as the
    private ``_settings`` attribute (checked on pydantic-ai 2.62 to 2.68; a test pins that
    ``model.settings`` reflects it).
    """
    model._settings = settings


BATCH_RELEASE = "2.62"
"""The oldest pydantic-ai-slim this package supports; ``BatchModelRequests`` and ``openai_background`` are in it
(checked in the 2.62, 2.68 and 2.78 wheels)."""


def batch_model_requests() -> Any:
    """pydantic-ai's ``BatchModelRequests`` capability class; an ImportError naming the release that has it."""
    try:
        from pydantic_ai.capabilities import BatchModelRequests
    except ImportError as error:
        raise ImportError(
            "batched model requests (AgentOperator(batch=...), pydantic_ai.capabilities.BatchModelRequests) need "
            f"pydantic-ai-slim {BATCH_RELEASE} or later: pip install 'pydantic-ai-slim>={BATCH_RELEASE}'"
        ) from error
    return BatchModelRequests


DURABLE_BATCH_RELEASE = "2.78"
"""The oldest pydantic-ai-slim whose batch and background requests a durable task records and defers on: the engine
stops a run at a pending request without pydantic-ai cancelling it (``models._continuation.mark_run_suspended``)."""


def durable_batching_unsupported() -> str:
    """Why a durable task cannot batch with the installed pydantic-ai ("" when it can): the error names the release
    that can (feature detection: ``pydantic_ai.models._continuation.mark_run_suspended``, new in 2.78)."""
    try:
        from pydantic_ai.models._continuation import mark_run_suspended  # noqa: F401
    except ImportError:
        return (
            "a durable task records batch and background model requests (BatchModelRequests, batch=, "
            f"openai_background) and waits for them deferred with pydantic-ai-slim {DURABLE_BATCH_RELEASE} or later: "
            f"pip install 'pydantic-ai-slim>={DURABLE_BATCH_RELEASE}' (or run the task without batching)"
        )
    return ""


def agent_capabilities(agent: Any) -> list[Any]:
    """The leaf capabilities an agent was built with (its ``capabilities=``), in application order.

    pydantic-ai keeps them under the private ``Agent._root_capability`` (checked on 2.62, 2.68 and 2.78); empty
    when a release no longer has it.
    """
    root = getattr(agent, "_root_capability", None)
    leaves: list[Any] = []
    if root is not None:
        root.apply(leaves.append)
    return leaves


def batch_poll_defaults() -> tuple[float, float]:
    """pydantic-ai's default ``(poll_interval, max_poll_interval)`` of a batch, in seconds (private
    ``pydantic_ai.models._batch_settings``, checked on 2.62, 2.68 and 2.78; 30 s and 10 min there)."""
    try:
        from pydantic_ai.models._batch_settings import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL
    except ImportError:
        return 30.0, 600.0
    return DEFAULT_POLL_INTERVAL.total_seconds(), DEFAULT_MAX_POLL_INTERVAL.total_seconds()


def poll_delay(checks: int, poll_interval: float, max_poll_interval: float) -> float:
    """Seconds to wait before the next check of a pending request after ``checks`` checks: pydantic-ai's own
    schedule (private ``pydantic_ai.models._batch_settings.poll_delay``, checked on 2.62, 2.68 and 2.78: the wait
    grows by half per check up to the maximum), or that schedule written out where it is missing."""
    from datetime import timedelta

    try:
        from pydantic_ai.models._batch_settings import poll_delay as pydantic_ai_poll_delay
    except ImportError:
        return float(min(poll_interval * 1.5**checks, max_poll_interval))
    return float(pydantic_ai_poll_delay(checks, timedelta(seconds=poll_interval), timedelta(seconds=max_poll_interval)))


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


def task_region(ti: Any, context: Any = None) -> tuple[Any, int, Any] | None:
    """The task instance's region inside an Airflow 3.4 loop, as ``(region_id, region_index, iteration)``
    (what ``Region.of`` takes), else None.

    Airflow 3.4 gives a task instance ``region_id`` / ``region_index`` (the all-zero UUID outside any
    region) and a looped task's context ``loop`` (``index``: the iteration); older releases have neither.
    Only a loop runs one task id (and map index) more than once in a DAG run: the expansion of a mapped
    task outside any loop is a region of its own in 3.4 too, but its map index already tells its task
    instances apart, so it keeps the layout of earlier releases (and the caches they wrote keep replaying).
    """
    region_id = getattr(ti, "region_id", None)
    loop = context.get("loop") if context is not None and hasattr(context, "get") else None
    if region_id is None or loop is None:
        return None
    index = getattr(ti, "region_index", None)
    if index is None:
        index = getattr(ti, "map_index", -1)
    iteration = getattr(loop, "index", None)
    return region_id, -1 if index is None else int(index), iteration


def _dagbag_api() -> tuple[Any, Any]:
    """``(DagBag, sync_bag_to_db)``: in ``airflow.dag_processing.dagbag`` from 3.2, ``airflow.models.dagbag`` before."""
    if airflow_version_at_least(3, 2):
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    else:
        from airflow.models.dagbag import DagBag, sync_bag_to_db  # type: ignore[no-redef]
    return DagBag, sync_bag_to_db


def load_dags(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The DAGs a file or folder defines, by dag id, and its import errors (file -> error)."""
    dagbag_class, _ = _dagbag_api()
    bag = dagbag_class(dag_folder=path)
    return dict(bag.dags), dict(bag.import_errors)


def store_dag(dag: Any) -> None:
    """Store ``dag`` (serialized DAG and version) in the metadata DB under the ``dags-folder`` bundle, which
    ``dag.test()`` needs for a DAG it did not find in a bundle folder itself."""
    import os

    from airflow.dag_processing.bundles.manager import DagBundlesManager

    dagbag_class, sync_bag_to_db = _dagbag_api()
    DagBundlesManager().sync_bundles_to_db()
    bag = dagbag_class(dag_folder=os.devnull, collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def read_xcom(dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1, default: Any = None) -> Any:
    """An XCom of a finished task instance from the metadata DB, decoded as a task would read it."""
    from airflow.models.xcom import XComModel
    from airflow.sdk.execution_time.xcom import XCom
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == map_index,
                XComModel.key == key,
            )
        ).one_or_none()
        return default if row is None else XCom.deserialize_value(row)


def ensure_metadata_db() -> None:
    """Create the metadata DB's tables when it has none (a test session's fresh SQLite file)."""
    from airflow import settings
    from sqlalchemy import inspect

    if not inspect(settings.engine).has_table("dag_run"):
        from airflow.utils.db import initdb

        initdb()


def clear_asks_to_keep_task_state() -> bool:
    """Whether the person who clears a task instance chooses to keep its task state (``keep_task_state``):
    Airflow 3.4 asks, and discards the task-state entries unless kept; 3.1-3.3 have no task state to keep."""
    return airflow_version_at_least(3, 4)


def hitl_parks_for_input() -> bool:
    """Whether a human-in-the-loop wait parks the task in ``awaiting_input`` (Airflow 3.3+, as the standard
    provider's ``version_compat.AIRFLOW_V_3_3_PLUS`` says); before 3.3 it defers to ``HITLTrigger``."""
    from airflow.providers.standard import version_compat

    return bool(version_compat.AIRFLOW_V_3_3_PLUS)


def retry_policy_api() -> tuple[Any, Any, Any]:
    """``(RetryAction, RetryDecision, RetryPolicy)`` from ``airflow.sdk`` (Airflow 3.3+); an ImportError that
    says what to use instead on Airflow 3.1-3.2, which have no retry policies."""
    try:
        from airflow.sdk import RetryAction, RetryDecision, RetryPolicy
    except ImportError as error:  # Airflow 3.1-3.2
        raise ImportError(
            "airflow_pydantic_ai.retry_policy needs Airflow 3.3 or later (retry policies); on Airflow 3.1-3.2 give "
            "the task retries with retry_exponential_backoff=True instead (docs/rate_limits.rst)"
        ) from error
    return RetryAction, RetryDecision, RetryPolicy


def retry_can_reschedule() -> bool:
    """Airflow 3.4's ``RetryAction.RESCHEDULE``: run the try again later without using a retry (3.3: no)."""
    return hasattr(retry_policy_api()[0], "RESCHEDULE")
