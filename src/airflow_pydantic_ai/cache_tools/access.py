"""Open one task instance's durable cache from its ids, outside the task (UI view, CLI commands).

The one way both the view and ``airflow pydantic-ai cache show|rm`` open a cache, render a step and list the
calls in doubt (``at_most_once()`` calls a try started and never finished) with the command that resolves one. The
store is built exactly as the task builds it (:mod:`airflow_pydantic_ai.tries.lifecycle`): the configured
``[pydantic_ai] durable_cache_path``, the Fernet cipher when ``durable_encrypt`` is on, the storage
timeout. So both read what the task wrote, with the same step numbering.

Guarantees: whatever ids it is given (``..``, slashes, encoded slashes, another DAG's ids), the
prefix it opens is one folder of four encoded segments under the configured base, never outside it
(:class:`OutsideCacheBase` otherwise); without the key an encrypted entry is listed as encrypted and
never decrypted; a step is shown with Airflow's secrets masked (:func:`~airflow_pydantic_ai._compat.redact`).
A task given its own ``durable_cache_path=`` argument writes elsewhere; that place is not known here.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable import StepStore, TaskIdentity
from airflow_pydantic_ai.durable.errors import NoSuchIteration, OutsideCacheBase
from airflow_pydantic_ai.durable.read import (
    CacheReader,
    CacheSummary,
    MarkedCall,
    StepDetail,
    StepInfo,
    list_caches,
    marked_calls,
)

__all__ = [
    "STEP_LIMIT",
    "CacheAccess",
    "NoSuchIteration",
    "OutsideCacheBase",
    "ShownCall",
    "loop_caches",
    "open_cache",
]

STEP_LIMIT = 4096
"""Characters of a decoded step shown unless the whole step is asked for."""
_RESULT_PLACEHOLDER = "'<JSON or text for the model>'"


@dataclass(frozen=True)
class CacheAccess:
    """One task instance's cache, opened for reading and deleting."""

    identity: TaskIdentity
    store: StepStore
    reader: CacheReader

    @property
    def location(self) -> str:
        return self.store.location

    def render_step(
        self, number: int, *, limit: int | None = STEP_LIMIT, raw: bool = False, see_all: str = ""
    ) -> tuple[StepInfo, str]:
        """Step ``number`` as people see it: indented JSON, secrets masked, cut after ``limit`` characters.

        The recorded value is shown plain (``raw``: as stored, in the codec's tagged form). ``see_all``
        says how to see the rest of a cut step. Raises ``KeyError`` when there is no such step.
        """
        detail = self.reader.read(number)
        content = detail.content if raw else detail.plain
        text = StepDetail(detail.info, _compat.redact(content)).render(limit=None, redact=_compat.redact)
        if limit is not None and len(text) > limit:
            rest = f"{len(text) - limit} more characters not shown"
            text = f"{text[:limit]}\n... ({rest}{'; ' + see_all if see_all else ''})"
        return detail.info, text

    def calls(self) -> list[ShownCall]:
        """The ``at_most_once()`` calls that left a start mark, oldest first (unfinished, resolved or finished),
        as people see them: arguments and result masked, with the command that resolves an unfinished one."""
        shown = []
        for call in marked_calls(self.reader):
            command = ""
            if call.state == "unfinished":
                from airflow_pydantic_ai.tries.lifecycle import cache_resolve_command

                command = (
                    f"{cache_resolve_command(self.identity)} --call {call.ref} --happened --result "
                    f"{_RESULT_PLACEHOLDER} | --rerun"
                )
            shown.append(ShownCall(call, call.arguments(_compat.redact), call.result(_compat.redact), command))
        return shown


@dataclass(frozen=True)
class ShownCall:
    """An ``at_most_once()`` call as ``cache show`` and the view show it."""

    call: MarkedCall
    arguments: str
    """As the model sent them, secrets masked, cut at 500 characters."""
    result: str | None
    """For an answer "it happened": the result the model is given, masked and cut."""
    resolve: str
    """For an unfinished call: the command that answers about it (it happened, or run it again); "" otherwise."""

    def as_row(self) -> dict[str, Any]:
        """The call as a flat dict (``cache show --calls``, also as JSON or YAML)."""
        call = self.call.call
        started, answer = call.started, call.resolution
        return {
            "ref": call.ref,
            "tool": started.tool,
            "call_id": started.call_id or "",
            "state": self.call.state,
            "attempt": started.attempt,
            "started_at": dt.datetime.fromtimestamp(started.started_at, tz=dt.UTC).isoformat(),
            "arguments": self.arguments,
            "answer": answer.answer if answer is not None else "",
            "answered_by": (answer.answered_by or "") if answer is not None else "",
            "via": answer.via if answer is not None else "",
            "result": self.result or "",
            "checkpoints": ", ".join(self.call.checkpoints),
            "problem": self.call.problem,
            "resolve": self.resolve,
        }


def loop_caches(base: Any, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[CacheSummary]:
    """The caches a task (one map index of it) left inside an Airflow 3.4 loop, one per iteration, in path order.

    ``base``: the opened cache base (``tries.settings.open_cache_base()``). Lists only the task's prefix.
    """
    within = TaskIdentity(dag_id=dag_id, run_id=run_id, task_id=task_id).segments()[:3]
    return [
        cache
        for cache in list_caches(base.fs, base.root, base.url, within=within)
        if cache.region is not None and cache.map_index == int(map_index)
    ]


def open_cache(
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int = -1,
    *,
    iteration: int | None = None,
    warn: Callable[[str], Any] = lambda message: None,
) -> CacheAccess:
    """The cache of task instance (``dag_id``, ``run_id``, ``task_id``, ``map_index``), in loop ``iteration``.

    Raises :class:`~airflow_pydantic_ai.durable.DurableConfigError` when the configuration is
    wrong (the message names the option), :class:`OutsideCacheBase` if the prefix escapes the base,
    :class:`NoSuchIteration` when ``iteration`` is given and that iteration left no cache.
    """
    from airflow_pydantic_ai.tries.settings import open_cache_base

    identity = TaskIdentity(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=int(map_index))
    base = open_cache_base()
    if iteration is not None:
        identity = _iteration_identity(base, identity, iteration)
    store = base.store_for(identity, warn=warn)
    _check_inside(base.root, store.root)
    return CacheAccess(identity=identity, store=store, reader=CacheReader(store))


def _iteration_identity(base: Any, identity: TaskIdentity, iteration: int) -> TaskIdentity:
    caches = loop_caches(base, identity.dag_id, identity.run_id, identity.task_id, identity.map_index)
    found = [cache.identity for cache in caches if cache.iteration == iteration]
    if not found or found[0] is None:
        left = sorted({cache.iteration for cache in caches if cache.iteration is not None})
        others = f"; it has caches of loop iterations {', '.join(map(str, left))}" if left else ""
        raise NoSuchIteration(f"no durable cache for {identity.describe()} in loop iteration {iteration}{others}")
    if len(found) > 1:
        raise NoSuchIteration(
            f"{identity.describe()} has {len(found)} caches in loop iteration {iteration} (nested loops); "
            "read or delete them by their location (cache list)"
        )
    return found[0]


def _check_inside(base: str, root: str) -> None:
    """``root`` is exactly four plain segments below ``base``."""
    base_clean = posixpath.normpath(base.rstrip("/") or "/")
    if posixpath.normpath(root) != root.rstrip("/"):
        raise OutsideCacheBase(f"the cache prefix {root!r} is not a plain path")
    relative = posixpath.relpath(root, base_clean)
    segments = relative.split("/")
    if len(segments) != 4 or any(segment in ("", ".", "..") for segment in segments):
        raise OutsideCacheBase(f"the cache prefix {root!r} is not a task instance folder under {base_clean!r}")
