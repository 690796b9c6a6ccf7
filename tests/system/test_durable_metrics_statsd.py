"""Airflow's Stats, for real: ``airflow tasks test`` in a subprocess with statsd on, read off a local UDP socket."""

from __future__ import annotations

import socket
import textwrap

from tests.helpers.airflow_cli import CliAirflow

DAG_FILE = textwrap.dedent(
    '''
    from datetime import datetime

    from airflow.sdk import DAG
    from pydantic_ai.toolsets import FunctionToolset

    from airflow_pydantic_ai.operators.agent import AgentOperator


    def fetch_ticket(ticket_id: int) -> dict:
        """Fetch a ticket."""
        return {"id": ticket_id, "title": "Login page times out"}


    with DAG(dag_id="statsd_metrics", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        AgentOperator(
            task_id="triage",
            prompt="Triage ticket 42.",
            model_id="test",
            toolsets=[FunctionToolset([fetch_ticket])],
            durable=True,
        )
    '''
)


def _packets(sock: socket.socket) -> dict[str, int]:
    """Every ``name:value|c`` counter received so far, summed by name."""
    counters: dict[str, int] = {}
    sock.settimeout(1.0)
    while True:
        try:
            data = sock.recv(65536).decode()
        except TimeoutError:
            return counters
        for line in data.splitlines():
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            if kind.startswith("c"):
                counters[name] = counters.get(name, 0) + int(float(value))


def test_a_durable_try_is_counted_in_airflows_statsd_under_the_documented_prefix(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        airflow = CliAirflow.create(
            tmp_path,
            "statsd_metrics.py",
            DAG_FILE,
            AIRFLOW__METRICS__STATSD_ON="True",
            AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
            AIRFLOW__METRICS__STATSD_PORT=str(sock.getsockname()[1]),
            AIRFLOW__METRICS__STATSD_PREFIX="airflow",
        )
        assert airflow.run("db", "migrate").returncode == 0
        assert airflow.run("dags", "reserialize").returncode == 0
        result = airflow.run("tasks", "test", "statsd_metrics", "triage")
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        counters = _packets(sock)

    ours = {name: value for name, value in counters.items() if name.startswith("airflow.pydantic_ai.durable.")}
    # TestModel: one model step that calls fetch_ticket, then the final answer; nothing replayed on try 1.
    assert ours["airflow.pydantic_ai.durable.steps.executed.model"] == 2, counters
    assert ours["airflow.pydantic_ai.durable.steps.executed.tool"] == 1
    assert ours["airflow.pydantic_ai.durable.attempts.succeeded"] == 1
    assert ours["airflow.pydantic_ai.durable.tokens.live.input"] > 0
    assert not any(".steps.replayed." in name for name in ours)
