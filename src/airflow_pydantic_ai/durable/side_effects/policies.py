"""The table of tool policies: which a tool has, read from its definition, and the guard of one live call.

- ``live`` (recognised by ``live_tool()`` metadata or ``Tool(durable=False)``): its calls are never recorded nor
  replayed; no guard;
- ``at most once`` (``at_most_once()`` metadata, ``once.py``): its guard (``OnceGuard``) settles an earlier start
  that never finished, records this start right before the call, and forgets it when the call ends with an error.

A tool without any runs as any recorded tool. ``CachingToolset`` asks :func:`policies_of` and :func:`guard_of`; the
tool step calls the guard's hooks (``tool_policy.CallGuard``). A new policy is a :class:`ToolPolicy` in its own module
and one line in :data:`POLICIES` (the recipe is in ``docs/architecture.rst``).

Not policies of this table: a call that waits for a person's approval (``requires_approval``, ``ApprovalRequired``)
is a *decision* step before the call (``interception/approvals.py``, ``steps/decision.py``), and a checkpoint
(``tool_checkpoint()``) is a facility inside any call (``checkpoint.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.side_effects.once import AT_MOST_ONCE
from airflow_pydantic_ai.durable.side_effects.tool_policy import (
    TOOL_CONFIG_KEY,
    CallGuard,
    Guards,
    ToolPolicy,
    tool_config,
)

if TYPE_CHECKING:
    from pydantic_ai.tools import ToolDefinition

    from airflow_pydantic_ai.durable.attempt.run import DurableRun
    from airflow_pydantic_ai.durable.steps.tool_step import ToolStep

__all__ = ["AT_MOST_ONCE", "LIVE", "NO_GUARD", "POLICIES", "guard_of", "is_live_tool", "live_tool", "policies_of"]


def live_tool() -> dict[str, Any]:
    """Tool metadata that makes a tool run live on every try (never recorded, never replayed).

    ``@agent.tool_plain(metadata=live_tool())``, ``Tool(fn, metadata=live_tool())``,
    ``FunctionToolset(..., metadata=live_tool())``: for a clock, a status check, a lock.
    """
    return {TOOL_CONFIG_KEY: False}


def is_live_tool(tool_def: ToolDefinition) -> bool:
    """Whether the tool opts out of replay: its metadata says so (``{TOOL_CONFIG_KEY: False}``, :func:`live_tool`),
    or pydantic-ai's own per-tool opt-out does (``Tool(durable=False)``, pydantic-ai 2.78; the field does not
    exist before). As pydantic-ai's engines do, this engine's metadata key wins when it is set on the tool."""
    config = tool_config(tool_def)
    if config is not None:
        return config is False
    return getattr(tool_def, "durable", None) is False


LIVE = ToolPolicy("live", recognises=is_live_tool, recorded=False)
POLICIES: tuple[ToolPolicy, ...] = (LIVE, AT_MOST_ONCE)
"""Every tool policy, in the order their guards run."""
NO_GUARD = CallGuard()
"""The guard of a call no policy guards (every hook does nothing)."""


def policies_of(tool_def: ToolDefinition) -> tuple[ToolPolicy, ...]:
    """The policies a tool has (often none)."""
    return tuple(policy for policy in POLICIES if policy.recognises(tool_def))


def guard_of(policies: tuple[ToolPolicy, ...], run: DurableRun, step: ToolStep) -> CallGuard:
    """The guard of one live call of a tool with ``policies`` (:data:`NO_GUARD` when none has one)."""
    guards = tuple(policy.guard(run, step) for policy in policies if policy.guard is not None)
    if not guards:
        return NO_GUARD
    return guards[0] if len(guards) == 1 else Guards(guards)
