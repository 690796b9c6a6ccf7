"""``cache list``'s table fits a terminal; the location and the step counts are in ``-o json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from tests.helpers.durable import local_store

from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.storage.entry import StepEntry

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_the_table_fits_200_columns_and_json_keeps_every_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_pydantic_ai.cli.cache_command import LIST_COLUMNS, cache_list

    base = tmp_path / "a-deployments-cache-folder" / "pydantic_ai" / "durable_cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    monkeypatch.setenv("COLUMNS", "200")
    identity = TaskIdentity("example_durable_agent", "manual__2026-11-25T10:00:00.123456+00:00", "triage_ticket", -1)
    local_store(base, identity).put(
        StepEntry(kind="model", key="a" * 64, step=1, attempt=1, label="test", payload={"response": {}})
    )

    cache_list(argparse.Namespace(dag_id=None, run_id=None, task_id=None, older_than=None, output="table"))
    table = capsys.readouterr().out.splitlines()
    cache_list(argparse.Namespace(dag_id=None, run_id=None, task_id=None, older_than=None, output="json"))
    [row] = json.loads(capsys.readouterr().out)

    lines = [line.rstrip() for line in table if line.strip() and "Unit test configuration" not in line]
    assert len(lines) == 3, table  # header, rule, one row: nothing wrapped
    assert all(len(line) <= 200 for line in lines), max(map(len, lines))
    assert "location" not in lines[0] and "triage_ticket" in lines[2] and "missing" in lines[2]
    assert list(row) == list(LIST_COLUMNS)
    assert row["location"].startswith(f"file://{base}/example_durable_agent/")
