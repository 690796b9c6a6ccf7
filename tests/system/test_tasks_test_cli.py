"""``airflow tasks test`` in a subprocess: its temporary DAG runs never replay another run's cache."""

from __future__ import annotations

import textwrap

from tests.helpers.airflow_cli import CliAirflow

DAG_FILE = textwrap.dedent(
    '''
    from datetime import datetime

    from airflow.sdk import DAG, get_current_context
    from pydantic_ai.toolsets import FunctionToolset

    from airflow_pydantic_ai.operators.agent import AgentOperator


    def notify_team(ticket_id: int) -> str:
        """Notify the team."""
        ti = get_current_context()["ti"]
        print(f"TOOL notify_team ran: run_id={ti.run_id} try_number={ti.try_number}", flush=True)
        raise ConnectionError("chat API down")


    with DAG(dag_id="cli_tasks_test", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        AgentOperator(
            task_id="triage",
            prompt="Triage ticket 42.",
            model_id="test",
            toolsets=[FunctionToolset([notify_team])],
            durable=True,
        )
    '''
)


def test_airflow_tasks_test_runs_every_step_live_and_leaves_the_failed_runs_cache(tmp_path):
    airflow = CliAirflow.create(tmp_path, "cli_tasks_test.py", DAG_FILE)
    cache = tmp_path / "cache"
    assert airflow.run("db", "migrate").returncode == 0
    assert airflow.run("dags", "reserialize").returncode == 0

    outputs = []
    for _ in range(2):
        result = airflow.run("tasks", "test", "cli_tasks_test", "triage")
        outputs.append(result.stdout + result.stderr)
    runs = sorted(path.name for path in (cache / "cli_tasks_test").iterdir())

    for out in outputs:
        assert "TOOL notify_team ran: run_id=__airflow_temporary_run_" in out, out[-3000:]
        assert "try_number=0" in out
        assert "Durable: replayed 0 cached steps" in out
        assert "left by an earlier run" not in out
    # Each temporary run is deleted by the command; its cache (the try failed) is left behind, unread.
    assert len(runs) == 2 and all(name.startswith("__airflow_temporary_run_") for name in runs)
