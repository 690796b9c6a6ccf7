"""Run pydantic-ai agents in Apache Airflow tasks, durable across retries.

``__version__`` is read from the installed package's metadata, whose one source is ``version`` in
``pyproject.toml``; ``get_provider_info()["versions"][0]`` and ``provider.yaml`` repeat it, and
``tests/unit/test_version.py`` keeps all of them equal.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = ["DurableCapability", "__version__", "durable_attempt", "live_tool"]

# The names a DAG author uses to make agents durable, imported on first use (this module stays light).
_LAZY = {
    "DurableCapability": "airflow_pydantic_ai.durable",
    "live_tool": "airflow_pydantic_ai.durable",
    "durable_attempt": "airflow_pydantic_ai.durability",
}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


try:
    __version__ = version("airflow-pydantic-ai")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
