"""The prompt templates the README, the docs and the example DAGs show render in every kind of run.

Airflow 3 triggers a manual run without a logical date (the UI's and ``airflow dags trigger``'s default):
``{{ ds }}`` and ``{{ logical_date }}`` are undefined there, so a template built on them fails the task
before the agent runs. Every template shown to users runs here in such a run, beside ``{{ ds }}`` itself,
which must fail (or the run below would not be the kind of run that catches it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.helpers.airflow_run import make_dag, run_dag, task_states, xcom_value

pytestmark = pytest.mark.usefixtures("airflow_db")

ROOT = Path(__file__).resolve().parents[2]
PROMPT = re.compile(r'prompt="([^"]*\{\{[^"]*)"')
# What troubleshooting.rst recommends as values that stay the same between the tries of a run.
STABLE_VALUES = (
    "{{ run_id }}",
    "{{ dag_run.run_after | ds }}",
    "{{ (dag_run.logical_date or dag_run.run_after) | ds }}",
)


def shown_templates() -> list[str]:
    """Every templated prompt in the README, the docs and the example DAGs, and the recommended values."""
    sources = [
        ROOT / "README.rst",
        *sorted((ROOT / "docs").glob("*.rst")),
        *sorted((ROOT / "example_dags").glob("*.py")),
    ]
    prompts = [prompt for source in sources for prompt in PROMPT.findall(source.read_text())]
    troubleshooting = (ROOT / "docs" / "troubleshooting.rst").read_text()
    for value in STABLE_VALUES:
        assert f"``{value}``" in troubleshooting, f"troubleshooting.rst no longer recommends {value}"
    return [*prompts, *(f"Summarize the incidents of {value}." for value in STABLE_VALUES)]


def test_every_shown_template_renders_in_a_run_without_a_logical_date() -> None:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    templates = shown_templates()
    assert any("Summarize the incidents of" in template for template in templates[: -len(STABLE_VALUES)]), (
        "the README's first example has no templated prompt any more: update this test"
    )
    with make_dag("doc_templates", retries=0) as dag:
        for number, template in enumerate(templates):
            AgentOperator(task_id=f"shown_{number}", prompt=template, model_id="test")
        AgentOperator(task_id="logical_date_only", prompt="Summarize the incidents of {{ ds }}.", model_id="test")

    dr = run_dag(dag, logical_date=None)

    assert dr.logical_date is None
    states = task_states(dr)
    assert states[("logical_date_only", -1)][0] == "failed"
    for number, template in enumerate(templates):
        assert states[(f"shown_{number}", -1)][0] == "success", f"{template!r} does not render without a logical date"
        assert xcom_value(dr, f"shown_{number}") is not None
