"""The pytest plugin (``durable_replay``, ``--durable-record``) as a DAG author uses it: the example test beside the
example DAG, run by pytest in a fresh process (``pytester``) on a copy of the example folder."""

from __future__ import annotations

import shutil

import pytest
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.example_llm import EXAMPLE_DAG, support_llm_connection, triage_script
from tests.helpers.openai_server import ScriptedOpenAIServer

pytest_plugins = ["pytester"]

FIXTURE = "tests/fixtures/example_tested_agent/triage.json"


@pytest.fixture
def example(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A copy of ``example_dags/`` (the DAG, its test, its conftest and its fixture) as the test project."""
    shutil.copy(EXAMPLE_DAG, pytester.path / EXAMPLE_DAG.name)
    shutil.copytree(EXAMPLE_DAG.parent / "tests", pytester.path / "tests")
    monkeypatch.delenv("AIRFLOW_CONN_SUPPORT_LLM", raising=False)
    return pytester


def _edit_prompt(example: pytest.Pytester, prompt: str) -> None:
    dag = example.path / EXAMPLE_DAG.name
    dag.write_text(dag.read_text().replace('prompt="Triage ticket 42."', f'prompt="{prompt}"'))


@requires_pydantic_ai(
    "2.68",
    "replaying the example fixture, recorded with pydantic-ai 2.68 (a fixture is tied to the release "
    "that recorded it: docs/testing.rst)",
)
def test_the_example_test_replays_its_committed_fixture(example):
    result = example.runpytest_subprocess("-p", "no:cacheprovider", "tests")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*HTTP Request*")


def test_a_prompt_changed_without_recording_fails_the_test_and_says_what_changed(example):
    _edit_prompt(example, "Triage ticket 42 and flag VIPs.")
    result = example.runpytest_subprocess("-p", "no:cacheprovider", "tests")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E*ReplayFailed: task triage: model step 1 (openai:gpt-4o-mini) of the agent of task 'triage' does not "
            "match the fixture*changed: user prompt.*",
            "E*--- recorded user prompt",
            "E*+++ current user prompt",
            "E*@@ -1 +1 @@",
            "E*-Triage ticket 42.",
            "E*+Triage ticket 42 and flag VIPs.",
        ]
    )


def test_durable_record_refreshes_the_fixture_against_a_model(example, monkeypatch):
    _edit_prompt(example, "Triage ticket 42 and flag VIPs.")
    before = (example.path / FIXTURE).read_text()
    with ScriptedOpenAIServer(triage_script) as server:
        monkeypatch.setenv("AIRFLOW_CONN_SUPPORT_LLM", support_llm_connection(server.base_url))
        recorded = example.runpytest_subprocess("-p", "no:cacheprovider", "tests", "--durable-record")
    recorded.assert_outcomes(passed=1)
    assert len(server.requests) == 2
    after = (example.path / FIXTURE).read_text()
    assert after != before
    assert "Triage ticket 42 and flag VIPs." in after

    monkeypatch.delenv("AIRFLOW_CONN_SUPPORT_LLM")
    replayed = example.runpytest_subprocess("-p", "no:cacheprovider", "tests")
    replayed.assert_outcomes(passed=1)
