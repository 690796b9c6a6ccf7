"""``airflow tasks test`` in a subprocess: its temporary DAG runs never replay another run's cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_BIN = Path(sys.executable).parent / "airflow"

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


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AIRFLOW_BIN), *args], capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT
    )


def test_airflow_tasks_test_runs_every_step_live_and_leaves_the_failed_runs_cache(tmp_path):
    home = tmp_path / "home"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "cli_tasks_test.py").write_text(DAG_FILE)
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{cache}",
        "PYTHONPATH": str(REPO_ROOT),
    }
    assert _airflow(env, "db", "migrate").returncode == 0
    assert _airflow(env, "dags", "reserialize").returncode == 0

    outputs = []
    for _ in range(2):
        result = _airflow(env, "tasks", "test", "cli_tasks_test", "triage")
        outputs.append(result.stdout + result.stderr)
    runs = sorted(path.name for path in (cache / "cli_tasks_test").iterdir())

    for out in outputs:
        assert "TOOL notify_team ran: run_id=__airflow_temporary_run_" in out, out[-3000:]
        assert "try_number=0" in out
        assert "Durable: replayed 0 cached steps" in out
        assert "left by an earlier run" not in out
    # Each temporary run is deleted by the command; its cache (the try failed) is left behind, unread.
    assert len(runs) == 2 and all(name.startswith("__airflow_temporary_run_") for name in runs)
