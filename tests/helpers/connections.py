"""Airflow connections for the hook tests, defined through ``AIRFLOW_CONN_*`` environment variables."""

from __future__ import annotations

import json
from typing import Any

import pytest

CONN_ID = "llm_test"


def set_connection(
    monkeypatch: pytest.MonkeyPatch, conn_id: str = CONN_ID, conn_type: str = "pydantic_ai", **fields: Any
) -> None:
    """Define an Airflow connection (of type pydantic_ai unless told) through its AIRFLOW_CONN_ env var (JSON form)."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields}))


def set_common_ai_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    """A connection as apache-airflow-providers-common-ai stores it: type pydanticai, same fields."""
    set_connection(monkeypatch, conn_id, conn_type="pydanticai", **fields)


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import it into a test module: keys and URLs from the developer's shell must not stand in for the
    connection's."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
