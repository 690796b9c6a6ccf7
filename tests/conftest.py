"""Test-session setup for Airflow 3, and the tiers (tests/README.rst says which test goes where).

Each test gets the marker of its tier folder (``unit``, ``dags``, ``system``), so that
``pytest -m unit`` selects the fast tier wherever the paths given are.

Everything at module level runs when pytest imports this file, which happens before
any test module (and therefore before anything imports ``airflow``). Airflow reads
its configuration at import time, so the environment must be in place here.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:
    # ``tests`` is not a package (no ``tests/__init__.py``); putting the repo root on
    # sys.path makes ``tests.helpers`` importable from any test module.
    sys.path.insert(0, str(_REPO_ROOT))

if "airflow" in sys.modules:  # pragma: no cover - a guard, not a code path
    raise RuntimeError("airflow was imported before tests/conftest.py could configure AIRFLOW_HOME")

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-pydantic-ai-tests-"))
_DAGS_FOLDER = _AIRFLOW_HOME / "dags"
_DAGS_FOLDER.mkdir()
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "True"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_DAGS_FOLDER)
# Dummy AWS credentials so boto never looks at ~/.aws, instance metadata or a real account.
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

# Session-end cleanup. atexit (rather than a fixture finalizer) also covers runs that
# never request a fixture, e.g. ``pytest --collect-only``.
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)

import pytest  # noqa: E402
from tests.helpers.batch_servers import anthropic_batch_server, openai_batch_server  # noqa: E402, F401
from tests.helpers.s3 import S3Bucket, S3Server  # noqa: E402

TIERS = ("unit", "dags", "system")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, the folder under tests/ it lives in; a test outside them is an error."""
    tests = _REPO_ROOT / "tests"
    for item in items:
        tier = item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else None
        if tier not in TIERS:
            raise pytest.UsageError(
                f"{item.nodeid}: put it in one of tests/{', tests/'.join(TIERS)} (tests/README.rst)"
            )
        item.add_marker(tier)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The temporary ``AIRFLOW_HOME`` of this test session."""
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> None:
    """Create a fresh metadata DB (SQLite in ``airflow_home``) once per session."""
    from airflow.utils.db import resetdb

    resetdb()


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on a free local port for the whole session."""
    server = S3Server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    """A fresh, uniquely named bucket plus the ``s3_test`` Airflow connection pointing at it."""
    bucket = s3_server.create_bucket()
    monkeypatch.setenv(f"AIRFLOW_CONN_{S3Bucket.CONN_ID.upper()}", s3_server.connection_json())
    return bucket
