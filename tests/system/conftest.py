"""Fixtures and hooks of the system tier (tests/README.rst)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.helpers.crash_worker import ForkServer

SKIP_SCHEDULER = "AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip each test marked ``scheduler`` (it starts a real Airflow: about a minute) when
    AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1; ``-m "not scheduler"`` deselects them too."""
    if os.environ.get(SKIP_SCHEDULER) != "1":
        return
    skip = pytest.mark.skip(reason=f"{SKIP_SCHEDULER}=1")
    for item in items:
        if item.get_closest_marker("scheduler") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[ForkServer]:
    """The fork server of tests/helpers/crash_worker.py, shared by a module's tests (it pays the imports once)."""
    from tests.helpers.crash_worker import ForkServer

    server = ForkServer()
    try:
        yield server
    finally:
        server.close()
