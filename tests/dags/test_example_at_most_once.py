"""``example_dags/example_at_most_once.py`` under dag.test(): the payment tool runs once, its start is recorded,
and the ledger holds one payment under the call's idempotency key. (Cutting a try off mid-call needs a
process to kill: ``tests/system/test_side_effect_kills.py``.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.compat import dagbag_api

pytestmark = pytest.mark.usefixtures("airflow_db")

ROOT = Path(__file__).resolve().parents[2]


def test_the_payment_happens_once_and_the_model_reads_its_receipt(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/cache")
    monkeypatch.setenv("EXAMPLE_PAYMENTS_DB", str(tmp_path / "payments.db"))
    DagBag, _ = dagbag_api()
    bag = DagBag(dag_folder=str(ROOT / "example_dags" / "example_at_most_once.py"))
    assert not bag.import_errors
    dr = run_dag(bag.dags["example_at_most_once"], logical_date=None)

    assert dr.state == "success"
    assert task_states(dr)[("settle_invoice", -1)] == ("success", 1)
    with sqlite3.connect(tmp_path / "payments.db") as ledger:
        rows = ledger.execute("SELECT idempotency_key, customer, amount_cents FROM payments").fetchall()
    assert [(customer, amount) for _, customer, amount in rows] == [("acme", 4200)]
    key = rows[0][0]
    assert xcom_value(dr, "settle_invoice") == f"Invoice settled: receipt {key[-8:]} for 4200 cents"
    assert f"idempotency key {key}" in caplog.text
