"""What ``AgentOperator`` checks of an agent before it runs it, and how its output becomes an XCom value.

Each check fails before any step, with the fix: external tools (whose results no task can wait for), tools that
need approval without ``durable=True``. Imported when a try starts, never at DAG parsing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai import Agent

__all__ = [
    "refuse_approvals_without_durable",
    "refuse_external_tools",
    "to_xcom",
    "tools_needing_approval",
    "waits_for_a_person",
]


def refuse_external_tools(agent: Agent[Any, Any]) -> None:
    """Calls answered by work done outside the agent (external tools) cannot be waited for: say so before any step."""
    from pydantic_ai.toolsets import ExternalToolset

    def visit(toolset: Any) -> None:
        if isinstance(toolset, ExternalToolset):
            names = ", ".join(sorted(tool.name for tool in toolset.tool_defs)) or "(none)"
            raise ValueError(
                f"the agent has external tools ({names}) whose calls are answered by work done outside the agent; "
                "AgentOperator cannot wait for such results (only for a person's approval). Turn them into function "
                "tools, with requires_approval=True if a person should confirm them."
            )

    for toolset in agent.toolsets:
        toolset.apply(visit)


def tools_needing_approval(agent: Agent[Any, Any]) -> list[str]:
    """The names of the agent's tools declared with ``requires_approval=True``."""
    needing: list[str] = []
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if isinstance(tools, dict):
            needing += [name for name, tool in tools.items() if getattr(tool, "requires_approval", False)]
    return sorted(needing)


def refuse_approvals_without_durable(agent: Agent[Any, Any]) -> None:
    """Tools that need approval wait for a person, and only the durable cache keeps the run through the wait."""
    needing = tools_needing_approval(agent)
    if needing:
        raise ValueError(
            f"the tool(s) {', '.join(needing)} need approval (requires_approval=True); the run has to survive "
            "the wait for a person's answer, which only the durable cache provides. Set durable=True on the "
            "AgentOperator / @task.pydantic_ai."
        )


def waits_for_a_person(error: BaseException) -> bool:
    """The try parks (``awaiting_input``) or defers until a person answers: it has not failed."""
    from airflow_pydantic_ai import _compat

    return bool(_compat.waits_for_a_person(error))


def to_xcom(output: Any) -> Any:
    """JSON-friendly form of an agent output (a pydantic model becomes its JSON dict)."""
    if output is None or isinstance(output, (str, int, float, bool)):
        return output
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(output)
