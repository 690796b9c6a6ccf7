"""A tool policy: how the calls of a tool are treated, recognised from the tool's definition.

A :class:`ToolPolicy` says how it is recognised (``recognises``: the tool's ``ToolDefinition``, its metadata under
:data:`TOOL_CONFIG_KEY` or pydantic-ai's own fields), whether the calls are recorded at all (``recorded``), and what
it does around one live call (``guard``: a :class:`CallGuard` made for that call, holding the policy's state for it).
The table of policies is ``policies.py``; the tool step calls the guard's hooks and knows nothing else of a policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

    from airflow_pydantic_ai.durable.attempt.run import DurableRun
    from airflow_pydantic_ai.durable.steps.tool_step import ToolStep

__all__ = ["TOOL_CONFIG_KEY", "CallGuard", "Guards", "ToolPolicy", "tool_config"]

TOOL_CONFIG_KEY = "airflow_pydantic_ai"
"""The tool metadata key of this engine's per-tool durable configuration (pydantic-ai's ``tool_config_key``)."""


def tool_config(tool_def: ToolDefinition) -> Any:
    """What the tool's metadata says under :data:`TOOL_CONFIG_KEY` (None: nothing)."""
    return (tool_def.metadata or {}).get(TOOL_CONFIG_KEY)


class CallGuard:
    """What a policy does around one live call of its tool; each hook does nothing unless a policy says otherwise.

    The order for a call the cache has no outcome for: :meth:`before`; then, unless the step replays after all,
    :meth:`starting` right before the call; then one of :meth:`retry_recorded` (a retry outcome was recorded) or
    :meth:`ended_without_outcome` (it raised an exception of its own); :meth:`on_retry` when the log says what a
    retry does with a call this try did not finish; :meth:`replayed_as` when the step replays what :meth:`before`
    gave it."""

    def before(self) -> None:
        """Before the call runs live: may make the step replay an outcome given elsewhere, or raise."""

    def starting(self) -> None:
        """Right before the call runs, once nothing else can refuse it (the budget across tries allowed it)."""

    def retry_recorded(self) -> None:
        """A retry outcome (``ModelRetry``, a retry in pydantic-ai's form) was recorded: it may be forgotten with its
        answer (``forget_what_failed``)."""

    def ended_without_outcome(self, error: Exception) -> None:
        """The call raised an exception of its own (it ran to its end and said it failed): no outcome is recorded."""

    def on_retry(self) -> str | None:
        """What a retry does with this call when this try does not finish it (None: it runs again, as any call)."""
        return None

    def replayed_as(self) -> str | None:
        """Where the outcome the step replays came from, when :meth:`before` gave it (None: from the cache)."""
        return None


@dataclass(frozen=True)
class Guards(CallGuard):
    """The guards of every policy a tool has, as one (each hook in turn; the first answer wins)."""

    each: tuple[CallGuard, ...]

    def before(self) -> None:
        for guard in self.each:
            guard.before()

    def starting(self) -> None:
        for guard in self.each:
            guard.starting()

    def retry_recorded(self) -> None:
        for guard in self.each:
            guard.retry_recorded()

    def ended_without_outcome(self, error: Exception) -> None:
        for guard in self.each:
            guard.ended_without_outcome(error)

    def on_retry(self) -> str | None:
        return next((said for guard in self.each if (said := guard.on_retry()) is not None), None)

    def replayed_as(self) -> str | None:
        return next((said for guard in self.each if (said := guard.replayed_as()) is not None), None)


@dataclass(frozen=True)
class ToolPolicy:
    """One way a tool's calls are treated: how it is recognised, whether calls are recorded, what guards a call."""

    name: str
    recognises: Callable[[ToolDefinition], bool]
    """Whether a tool has this policy, from its definition (its metadata, pydantic-ai's own fields)."""
    recorded: bool = True
    """False: its calls run on every try and are never recorded nor replayed (a live tool)."""
    guard: Callable[[DurableRun, ToolStep], CallGuard] | None = None
    """The guard of one live call (made once the cache has no outcome for it); None: nothing around the call."""
