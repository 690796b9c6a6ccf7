"""One error base: every public exception class the package defines derives from ``DurableError``
(src/airflow_pydantic_ai/durable/errors.py), beside the built-in or pydantic-ai base it always had."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from pydantic_ai.exceptions import UsageLimitExceeded

import airflow_pydantic_ai
from airflow_pydantic_ai.durable.errors import DurableError

# Modules that refuse to import, with an ImportError saying what to use instead, on the Airflow releases
# without the feature they wrap (retry policies: Airflow 3.3 and later). Any other ImportError fails the walk.
_VERSION_GATED = {"airflow_pydantic_ai.retry_policy"}


def _public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(airflow_pydantic_ai.__path__, f"{airflow_pydantic_ai.__name__}."):
        try:
            module = importlib.import_module(module_info.name)
        except ImportError:
            if module_info.name in _VERSION_GATED:
                continue
            raise
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_public_error_derives_from_the_one_base() -> None:
    found = _public_exceptions()
    assert "airflow_pydantic_ai.durable.errors.DurableConfigError" in found  # the walk sees the package
    stray = sorted(name for name, error in found.items() if not issubclass(error, DurableError))
    assert stray == [], "derive these from airflow_pydantic_ai.durable.errors.DurableError (keep their old base too)"


@pytest.mark.parametrize(
    ("name", "old_base"),
    [
        ("airflow_pydantic_ai.durable.reporting.budget.RetryBudgetExceeded", UsageLimitExceeded),
        ("airflow_pydantic_ai.testing.ReplayFailed", AssertionError),
        ("airflow_pydantic_ai.durable.errors.FixtureError", ValueError),
        ("airflow_pydantic_ai.durable.errors.OutsideCacheBase", ValueError),
        ("airflow_pydantic_ai.durable.errors.NoSuchIteration", LookupError),
    ],
)
def test_errors_keep_the_base_they_had(name: str, old_base: type[BaseException]) -> None:
    assert issubclass(_public_exceptions()[name], old_base)
