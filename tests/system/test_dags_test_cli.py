"""``airflow dags test`` in a subprocess: a tool result whose class the DAG file defines replays on the retry.

Airflow 3's ``dag.test()`` parses the dags folder again to sync it, importing the DAG file a second time
under the same module name: the task runs the first import's tools while ``sys.modules`` holds the second
import's classes. The codec must still record (and replay) the first import's values, type for type.
"""

from __future__ import annotations

import textwrap
from collections import Counter

from tests.helpers.airflow_cli import CliAirflow

DAG_FILE = textwrap.dedent(
    '''
    import dataclasses
    import os
    from datetime import datetime, timedelta

    from airflow.sdk import DAG, get_current_context
    from pydantic import BaseModel
    from pydantic_ai.toolsets import FunctionToolset

    from airflow_pydantic_ai.operators.agent import AgentOperator


    class Invoice(BaseModel):
        number: int
        total: float


    @dataclasses.dataclass
    class Customer:
        name: str
        invoices: list[Invoice]


    def _mark(tool: str) -> int:
        try_number = get_current_context()["ti"].try_number
        with open(os.environ["DAGS_TEST_MARKER"], "a") as handle:
            handle.write(f"{tool} {try_number}\\n")
        return try_number


    def fetch_customer(customer_id: int) -> Customer:
        """Fetch a customer and their invoices."""
        _mark("fetch_customer")
        return Customer(name="Ada", invoices=[Invoice(number=customer_id, total=12.5)])


    def notify_team(customer_id: int) -> str:
        """Notify the team; the chat API is down on the first try."""
        if _mark("notify_team") == 1:
            raise ConnectionError("chat API down (first try only)")
        return "posted"


    with DAG(dag_id="cli_dags_test", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        AgentOperator(
            task_id="billing",
            prompt="Look up customer 7 and notify the team.",
            model_id="test",
            toolsets=[FunctionToolset([fetch_customer, notify_team])],
            durable=True,
            retries=1,
            retry_delay=timedelta(seconds=0),
        )
    '''
)


def test_a_class_defined_in_the_dag_file_is_recorded_and_replayed_under_airflow_dags_test(tmp_path):
    marker = tmp_path / "tool-calls.txt"
    airflow = CliAirflow.create(tmp_path, "cli_dags_test.py", DAG_FILE, DAGS_TEST_MARKER=str(marker))
    assert airflow.run("db", "migrate").returncode == 0

    result = airflow.run("dags", "test", "cli_dags_test")
    out = result.stdout + result.stderr
    context = out[-6000:]

    calls = Counter(line.split()[0] for line in marker.read_text().splitlines())
    assert calls == {"fetch_customer": 1, "notify_team": 2}, context
    assert "does not come back identical" not in out, context
    assert "Durable: replayed 2 cached steps (1 model, 1 tool)" in out, context
    finished = [line for line in out.splitlines() if "DagRun Finished" in line]
    assert len(finished) == 1 and "state=success" in finished[0], context
