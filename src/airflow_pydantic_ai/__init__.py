"""Run pydantic-ai agents in Apache Airflow tasks, durable across retries.

``__version__`` is read from the installed package's metadata, whose one source is ``version`` in
``pyproject.toml``; ``get_provider_info()["versions"][0]`` and ``provider.yaml`` repeat it, and
``tests/unit/test_version.py`` keeps all of them equal.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "DurableCapability",
    "__version__",
    "at_most_once",
    "durable_attempt",
    "idempotency_key",
    "live_tool",
    "tool_checkpoint",
]


def __getattr__(name: str) -> Any:
    """The names a DAG author uses to make agents durable, imported on first use (this module stays light)."""
    if name in ("DurableCapability", "live_tool"):
        from airflow_pydantic_ai import durable

        return getattr(durable, name)
    if name == "at_most_once":
        from airflow_pydantic_ai.durable.side_effects import at_most_once

        return at_most_once
    if name == "idempotency_key":
        from airflow_pydantic_ai.durable.side_effects import idempotency_key

        return idempotency_key
    if name == "tool_checkpoint":
        from airflow_pydantic_ai.durable.side_effects import tool_checkpoint

        return tool_checkpoint
    if name == "durable_attempt":
        from airflow_pydantic_ai.tries.lifecycle import durable_attempt

        return durable_attempt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    __version__ = version("airflow-pydantic-ai")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
