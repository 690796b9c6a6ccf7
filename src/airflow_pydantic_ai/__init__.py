"""Run pydantic-ai agents in Apache Airflow tasks, durable across retries.

``__version__`` is read from the installed package's metadata, whose one source is ``version`` in
``pyproject.toml``; ``get_provider_info()["versions"][0]`` and ``provider.yaml`` repeat it, and
``tests/unit/test_version.py`` keeps all of them equal.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("airflow-pydantic-ai")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
