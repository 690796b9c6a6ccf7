"""What a durable task does with its cache when a person cleared it: resume from it, or start over.

A clear starts a new series of tries of the task instance (Airflow sets ``max_tries`` to the last try
number plus the task's ``retries``), so the first try of a series after try 1 is a cleared try; a
retry, a reschedule and a resume after a deferral or a human-input wait are not, and never discard
anything.

- Airflow 3.4 asks the person who clears: the REST API and the UI clear a task instance's task-state
  entries unless ``keep_task_state=true``. Every try of a durable task leaves a marker in its task-state
  store (:data:`MARKER_KEY`); a cleared try that no longer finds it was cleared with
  ``keep_task_state=false`` and discards its cache, one that finds it resumes. Clears that keep task
  state in 3.4 (a DAG run clear, ``airflow tasks clear``) resume.
- Airflow 3.1-3.3 do not ask: ``[pydantic_ai] on_clear`` (or the task's ``on_clear=`` argument)
  decides, ``resume`` by default (what clearing did before this option existed). On 3.4 the option
  applies only when the task-state store cannot be read.

Every cleared try says in its log which happened and why. A try that starts over has the attempt discard
the cache (``AttemptOptions.start_over``), which keeps the calls in doubt it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.tries.settings import on_clear_option

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable import TaskLogger

__all__ = [
    "MARKER_KEY",
    "ClearDecision",
    "decide_after_clear",
    "log_resume_after_clear",
]

MARKER_KEY = "airflow_pydantic_ai.durable"
"""The task-state key every try of a durable task writes on Airflow 3.4 (its value: the try number)."""


@dataclass(frozen=True)
class ClearDecision:
    """What a cleared try does with its cache, and why (for the log)."""

    fresh: bool
    why: str
    """``cleared with keep_task_state=false``, ``cleared with [pydantic_ai] on_clear = resume``..."""


def decide_after_clear(context: Any, on_clear: str | None, *, cleared: bool) -> ClearDecision | None:
    """The decision for a cleared try (None for any other try); leaves this try's marker on Airflow 3.4.

    Checks ``on_clear`` on every try, so a wrong value fails the first try, not a clear weeks later.
    """
    option = on_clear_option(on_clear)
    asks = _compat.clear_asks_to_keep_task_state()
    kept = _task_state_kept(context) if cleared and asks else None
    if asks:
        _leave_marker(context)
    if not cleared:
        return None
    if kept is not None:
        return ClearDecision(fresh=not kept, why=f"cleared with keep_task_state={'true' if kept else 'false'}")
    source = "on_clear=" if on_clear is not None else "[pydantic_ai] on_clear = "
    return ClearDecision(fresh=option == "fresh", why=f"cleared with {source}{option}")


def log_resume_after_clear(decision: ClearDecision, steps_found: int, log: TaskLogger) -> None:
    """The line of a cleared try that keeps its cache."""
    if steps_found:
        log.info(
            "Durable: resumed from the cache after a clear (%s): %d recorded steps replay", decision.why, steps_found
        )
    else:
        log.info("Durable: %s: the cache is kept, but it holds no recorded step", decision.why)


def _task_state_kept(context: Any) -> bool | None:
    """Whether this task instance's marker survived the clear; None when the task-state store cannot be read."""
    store = context.get("task_state_store") if hasattr(context, "get") else None
    if store is None:
        return None
    try:
        return store.get(MARKER_KEY) is not None
    except Exception:
        return None


def _leave_marker(context: Any) -> None:
    store = context.get("task_state_store") if hasattr(context, "get") else None
    if store is None:
        return
    try:
        store.set(MARKER_KEY, {"try": int(getattr(context.get("ti"), "try_number", 0) or 0)})
    except Exception:  # the marker only informs a later clear; never fail a try over it
        return
