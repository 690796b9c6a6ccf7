"""The example DAG that ``make demo`` runs, under dag.test() with its real retries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.compat import dagbag_api

pytestmark = pytest.mark.usefixtures("airflow_db")

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(
    r"replayed \d+ cached steps \(\d+ model, \d+ tool\), executed \d+ new steps \(\d+ model, \d+ tool\)"
)


def test_example_dag_tells_its_story_in_order(capfd, caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/cache")
    DagBag, _ = dagbag_api()

    bag = DagBag(dag_folder=str(ROOT / "example_dags" / "example_durable_agent.py"))
    assert not bag.import_errors
    dag = bag.dags["example_durable_agent"]
    dr = run_dag(dag, logical_date=None)  # as a manual trigger runs it on Airflow 3: no logical date
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert task_states(dr)[("triage_ticket", -1)] == ("success", 2)
    # The scripted model asks for the ticket the prompt names (the tools log through the logging module,
    # which pytest captures apart from the task's stdout).
    tool_lines = caplog.text + out
    assert "fetch_ticket(42) called on try 1" in tool_lines
    assert "fetch_ticket(0)" not in tool_lines
    assert xcom_value(dr, "triage_ticket").startswith("Ticket 42 triaged")

    # One task after the other (make demo's log reads in order): the summaries come try by try.
    assert dag.task_dict["prompt_changes_between_tries"].upstream_task_ids == {"triage_ticket"}
    assert dag.task_dict["summarize_ticket"].upstream_task_ids == {"prompt_changes_between_tries"}
    assert [match.group(0) for match in SUMMARY.finditer(out)] == [
        "replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (1 model, 2 tool)",
        "replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)",
        "replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (1 model, 2 tool)",
        "replayed 0 cached steps (0 model, 0 tool), executed 4 new steps (2 model, 2 tool)",
        "replayed 0 cached steps (0 model, 0 tool), executed 1 new steps (1 model, 0 tool)",
    ]
