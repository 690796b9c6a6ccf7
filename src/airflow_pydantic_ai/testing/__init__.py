"""Testing agent DAGs: the pytest plugin (``plugin.py``, the ``durable_replay`` fixture) and ``cache verify``
(``verify.py``: replay a cache or a fixture against the current code, with no live call).

``airflow_pydantic_ai.testing`` is the ``pytest11`` entry point: pytest reads the plugin's hook and fixture
from here. They are imported on first use, so that ``verify.py`` (which the CLI uses) never imports pytest.
``ReplayFailed`` is defined here, where its dotted name, ``airflow_pydantic_ai.testing.ReplayFailed``, is
the one pytest prints for a failed replay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.errors import DurableError

if TYPE_CHECKING:
    from airflow_pydantic_ai.testing.plugin import DurableReplay, DurableTestResult, durable_replay, pytest_addoption

__all__ = ["DurableReplay", "DurableTestResult", "ReplayFailed", "durable_replay", "pytest_addoption"]

_FROM_PLUGIN = ("DurableReplay", "DurableTestResult", "durable_replay", "pytest_addoption")


class ReplayFailed(DurableError, AssertionError):
    """An agent task did not replay: a step was not recorded (the message says which, and what changed)."""


def __getattr__(name: str) -> Any:
    if name not in _FROM_PLUGIN:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.plugin"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_PLUGIN})
