"""The ``airflow`` CLI in a subprocess, on an Airflow home of its own that holds one DAG file (``airflow tasks
test``, ``airflow dags test``, statsd: tests/system/test_tasks_test_cli.py and its neighbours)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AIRFLOW_BIN", "REPO_ROOT", "CliAirflow"]

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_BIN = Path(sys.executable).parent / "airflow"


@dataclass(frozen=True)
class CliAirflow:
    """``AIRFLOW_HOME`` in ``tmp_path / "home"`` with ``dag_source`` as its one DAG file, the durable cache in
    ``tmp_path / "cache"``, and the repo root on ``PYTHONPATH``; ``extra_env`` adds to that environment."""

    env: dict[str, str]

    @classmethod
    def create(cls, tmp_path: Path, dag_file: str, dag_source: str, **extra_env: str) -> CliAirflow:
        home = tmp_path / "home"
        (home / "dags").mkdir(parents=True)
        (home / "dags" / dag_file).write_text(dag_source)
        return cls(
            {
                **os.environ,
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{tmp_path / 'cache'}",
                **extra_env,
                "PYTHONPATH": str(REPO_ROOT),
            }
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``airflow ARGS`` from the repo root, five minutes at the most; the output is captured as text."""
        return subprocess.run(
            [str(AIRFLOW_BIN), *args], capture_output=True, text=True, timeout=300, env=self.env, cwd=REPO_ROOT
        )
