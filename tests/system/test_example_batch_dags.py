"""The batch and background example DAGs under dag.test(), against the local OpenAI batch server with the real
``openai`` SDK: the task defers while the batch (or background response) is pending, the trigger checks it with the
model rebuilt from the connection, and the task resumes in the same try and succeeds; one batch is submitted."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.helpers.airflow_run import run_dag, task_states, xcom_value
from tests.helpers.batch_servers import batching, fast_background
from tests.helpers.compat import dagbag_api, requires_pydantic_ai

pytestmark = [
    pytest.mark.usefixtures("airflow_db"),
    requires_pydantic_ai("2.78", "a durable run stopped at a pending request"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
TRIGGERER_CHECKS = "the task defers, the triggerer checks every"
NIGHT = datetime(2026, 12, 5, tzinfo=UTC)
READY = "resumed after a pending model request: ready after"


def _example(name: str) -> object:
    DagBag, _ = dagbag_api()
    bag = DagBag(dag_folder=str(EXAMPLES / f"{name}.py"))
    assert not bag.import_errors
    return bag.dags[name]


def test_the_nightly_batch_example_defers_and_collects_its_batch(
    openai_batch_server, monkeypatch, tmp_path, capfd
) -> None:
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/cache")
    openai_batch_server.connect(monkeypatch, "openai_batch", model="")
    openai_batch_server.knobs.polls_until_end = 2  # the provider still works at the first check
    dag: object = _example("example_batch_agent")
    task = dag.task_dict["summarize_day"]  # type: ignore[attr-defined]
    task.batch = batching()  # test-sized waits: submitted after 0.05 s, checked every 0.05 s

    dr = run_dag(dag, logical_date=NIGHT)  # type: ignore[arg-type]  # a scheduled run: its prompt names {{ ds }}
    out = capfd.readouterr().out

    assert dr.state == "success", out
    assert task_states(dr)[("summarize_day", -1)] == ("success", 1)
    assert xcom_value(dr, "summarize_day").startswith("answer to: Summarize the tickets of 2026-12-05:")
    assert openai_batch_server.counters.batches_created == 1
    assert TRIGGERER_CHECKS in out and READY in out


def test_the_background_example_defers_while_the_response_runs(
    openai_batch_server, monkeypatch, tmp_path, capfd
) -> None:
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/cache")
    openai_batch_server.connect(monkeypatch, "openai_background", model="")
    openai_batch_server.knobs.background_polls = 2
    fast_background(monkeypatch)

    dr = run_dag(_example("example_background_agent"), logical_date=None)  # type: ignore[arg-type]
    out = capfd.readouterr().out

    assert dr.state == "success", out
    assert task_states(dr)[("research_report", -1)] == ("success", 1)
    report = xcom_value(dr, "research_report")
    assert report == "answer to: Write a report on the reliability of nightly data pipelines."
    assert openai_batch_server.counters.background_creates == 1
    assert TRIGGERER_CHECKS in out
