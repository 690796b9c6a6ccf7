"""Fixtures of the dags tier (tests/README.rst)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.operator_runs import CALLS


@pytest.fixture
def cache_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point [pydantic_ai] durable_cache_path at a fresh folder (through the environment, as a user would)."""
    base = tmp_path / "durable-cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    CALLS.clear()
    return base
