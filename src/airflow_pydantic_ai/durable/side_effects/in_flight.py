"""The tool call running now: what ``idempotency_key()`` and ``tool_checkpoint()`` read from inside a tool.

:class:`~airflow_pydantic_ai.durable.interception.toolset.CachingToolset` makes the call current (:func:`running_call`)
while a tool runs live, in the tool's own context: an async tool's task, or the worker thread of a sync
tool (pydantic-ai copies the context into it). Outside a tool, or for an agent without
``DurableCapability``, there is no current call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.encoding.allowed_types import AllowedTypes

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["CallInFlight", "current_call", "running_call"]


@dataclass(frozen=True)
class CallInFlight:
    """A tool call running live: the attempt it belongs to (None outside a durable attempt) and its identity."""

    tool_name: str
    call_id: str | None
    key: str | None
    """The call's step key (the same on every try for the same call); None outside an attempt, or when the call
    could not be fingerprinted."""
    run: AgentRun | None
    run_id: str | None = None
    """The agent run's id (pydantic-ai's ``ctx.run_id``), for a call outside a durable attempt."""
    answer_number: int = 0
    """The model step whose answer asked for the call."""
    live: bool = False
    """A live tool's call (``live_tool()``): it runs on every try by design, so it has no key across tries."""
    allowed: AllowedTypes = field(default_factory=AllowedTypes, compare=False, repr=False)
    """The classes its checkpoints may name (``allowed_types.py``): the tool's declared types and module's own."""
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)
    """What ``tool_checkpoint().save`` saved during this call, by name, encoded (``checkpoint.py``): read back
    first, so that a value saved now wins over one an earlier try saved, stored or not."""


_CURRENT: ContextVar[CallInFlight | None] = ContextVar("airflow_pydantic_ai_call_in_flight", default=None)


def current_call() -> CallInFlight | None:
    """The tool call running in this context, if any."""
    return _CURRENT.get()


@contextmanager
def running_call(call: CallInFlight) -> Iterator[CallInFlight]:
    """Make ``call`` current for the code it wraps (the tool's run)."""
    token = _CURRENT.set(call)
    try:
        yield call
    finally:
        _CURRENT.reset(token)
