"""Fixtures of the unit tier (tests/README.rst)."""

from __future__ import annotations

import pytest
from tests.helpers.durable import DurableHarness


@pytest.fixture
def harness(tmp_path) -> DurableHarness:
    """Attempts of one task instance on a store in a fresh local folder (``tmp_path / "cache"``)."""
    return DurableHarness(base=str(tmp_path / "cache"))
