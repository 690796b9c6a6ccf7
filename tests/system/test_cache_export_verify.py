"""``airflow pydantic-ai cache export`` and ``cache verify``: the real CLI in a subprocess, on caches kept by real
``dag.test()`` runs of the example agent DAG (recorded against the OpenAI-compatible test server)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.compat import airflow_reads_provider_cli, requires_pydantic_ai
from tests.helpers.example_llm import EXAMPLE_DAG, TRIAGE, support_llm_connection, triage_script
from tests.helpers.openai_server import ScriptedOpenAIServer

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable.storage.fixtures import fixture_path
from airflow_pydantic_ai.testing import DurableReplay

pytestmark = pytest.mark.usefixtures("airflow_db")

BIN = Path(sys.executable).parent
CLI = [str(BIN / "airflow"), "pydantic-ai"] if airflow_reads_provider_cli() else [str(BIN / "airflow-pydantic-ai")]
SECRET = "sk-export-secret-91c"
TOOL_CALLED = "fetch_ticket(42) called"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ \[")
NEW_TOOL_DOC = "Fetch a ticket (with its customer) from the helpdesk."
FAILING_TOOL = """    log.info("fetch_ticket(%s) called", ticket_id)  # a real one would call the helpdesk's API
    if os.environ.get("HELPDESK_DOWN"):
        raise ConnectionError("helpdesk API unavailable")
"""


def _dag_file(folder: Path, *, fails: bool = False, tool_doc: str | None = None) -> Path:
    """A copy of the example DAG: its tool failing while ``HELPDESK_DOWN`` is set, or with another description."""
    text = EXAMPLE_DAG.read_text().replace("import logging\n", "import logging\nimport os\n", 1)
    if fails:
        text = text.replace(
            '    log.info("fetch_ticket(%s) called", ticket_id)  # a real one would call the helpdesk\'s API\n',
            FAILING_TOOL,
        )
        text = text.replace("        retries=1,\n", "        retries=0,\n")
    if tool_doc is not None:
        text = text.replace('"""Fetch a support ticket from the helpdesk."""', f'"""{tool_doc}"""')
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / EXAMPLE_DAG.name
    path.write_text(text)
    return path


def _load(path: Path) -> Any:
    dags, errors = _compat.load_dags(str(path))
    assert not errors
    return dags["example_tested_agent"]


@pytest.fixture
def server(monkeypatch, tmp_path):
    with ScriptedOpenAIServer(triage_script) as running:
        monkeypatch.setenv("AIRFLOW_CONN_SUPPORT_LLM", support_llm_connection(running.base_url, SECRET))
        monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}/cache")
        yield running


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command's result, its stdout without Airflow's own log lines (unit test mode logs one at start)."""
    result = subprocess.run(
        [*CLI, "cache", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={key: value for key, value in os.environ.items() if key != "HELPDESK_DOWN"},
    )
    result.stdout = "".join(line for line in result.stdout.splitlines(keepends=True) if not LOG_LINE.match(line))
    return result


def test_export_a_record_runs_kept_cache_and_replay_it(server, tmp_path, monkeypatch):
    dag = _load(EXAMPLE_DAG)
    triage = dag.task_dict["triage"]
    triage.prompt = f"Triage ticket 42. Key {SECRET}."
    triage.durable_mode, triage.durable_keep_cache = "record", True
    dr = run_dag(dag.partial_subset(task_ids=["triage"], include_upstream=False))
    assert dr.state == "success"

    fixtures = tmp_path / "fixtures"
    exported = _cli("export", "example_tested_agent", dr.run_id, "triage", str(fixtures))

    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("Exported 3 steps of dag_id='example_tested_agent' run_id=")
    text = fixture_path(fixtures, "triage").read_text()
    assert dr.run_id not in text
    assert SECRET not in text
    assert json.loads(text)["steps"][0]["components"]["texts"]["user_prompt"] == "Triage ticket 42. Key ***."

    triage.durable_mode, triage.durable_keep_cache = None, False
    requests = len(server.requests)
    result = DurableReplay(record=False, cache_base=tmp_path / "replay")(dag, "triage", fixtures=fixtures)
    assert result.state == "success"
    assert result.xcom == TRIAGE
    assert len(server.requests) == requests


def test_export_of_a_task_with_no_cache_says_so(server, tmp_path):
    missing = _cli("export", "example_tested_agent", "manual__nothing", "triage", str(tmp_path / "fixtures"))
    assert missing.returncode == 1
    # Airflow 3.1's console script logs its plugin set-up before the command's own line.
    assert any(
        line.startswith("error: no durable cache for dag_id='example_tested_agent'")
        for line in missing.stderr.splitlines()
    ), missing.stderr


def test_verify_a_failed_runs_kept_cache_against_unchanged_and_changed_code(server, tmp_path, monkeypatch):
    deployed = _dag_file(tmp_path / "deployed", fails=True)
    monkeypatch.setenv("HELPDESK_DOWN", "1")
    dr = run_dag(_load(deployed).partial_subset(task_ids=["triage"], include_upstream=False))
    monkeypatch.delenv("HELPDESK_DOWN")
    assert task_states(dr)[("triage", -1)][0] == "failed"
    requests = len(server.requests)
    assert requests == 1  # the model asked for the tool, which failed: one model step is kept

    clean = _cli("verify", "example_tested_agent", dr.run_id, "--subdir", str(deployed))
    edited = _dag_file(
        tmp_path / "edited", fails=True, tool_doc="Fetch a ticket (with its customer) from the helpdesk."
    )
    diverged = _cli("verify", "example_tested_agent", dr.run_id, "--subdir", str(edited))

    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.startswith(
        "example_tested_agent.triage: replays cleanly up to model step 1, where the recording ends (1 model and 0 "
        "tool steps from the kept cache at file://"
    )
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    assert diverged.stdout.startswith(
        "example_tested_agent.triage: diverges: model step 1 (openai:gpt-4o-mini) of the agent of task 'triage' "
        "does not match the kept cache at file://"
    )
    assert "changed: tool definitions (~fetch_ticket)." in diverged.stdout
    assert len(server.requests) == requests
    for result in (clean, diverged):
        assert TOOL_CALLED not in result.stdout + result.stderr

    # One convention with show, rm and export: the task id is the third argument; 0.2's --task-id still works.
    by_argument = _cli("verify", "example_tested_agent", dr.run_id, "triage", "--subdir", str(deployed))
    by_option = _cli("verify", "example_tested_agent", dr.run_id, "--task-id", "triage", "--subdir", str(deployed))
    no_such_task = _cli("verify", "example_tested_agent", dr.run_id, "nope", "--subdir", str(deployed))
    assert by_argument.returncode == by_option.returncode == 0, by_argument.stderr + by_option.stderr
    assert by_argument.stdout == by_option.stdout == clean.stdout
    assert "note: `cache verify --task-id` is deprecated" in by_option.stderr
    assert no_such_task.returncode == 1
    assert "error: example_tested_agent has no agent task 'nope'" in no_such_task.stderr


@requires_pydantic_ai(
    "2.68",
    "replaying the example fixture, recorded with pydantic-ai 2.68 (a fixture is tied to the release "
    "that recorded it: docs/testing.rst)",
)
def test_verify_fixtures_against_the_current_dag(server, tmp_path, monkeypatch):
    fixtures = Path(__file__).resolve().parents[2] / "example_dags" / "tests" / "fixtures" / "example_tested_agent"
    edited = _dag_file(tmp_path / "edited", tool_doc=NEW_TOOL_DOC)

    clean = _cli("verify", "example_tested_agent", "--fixtures", str(fixtures), "--subdir", str(EXAMPLE_DAG))
    diverged = _cli("verify", "example_tested_agent", "--fixtures", str(fixtures), "--subdir", str(edited))
    neither = _cli("verify", "example_tested_agent", "--subdir", str(EXAMPLE_DAG))
    one_task = _cli(
        "verify", "example_tested_agent", "triage", "--fixtures", str(fixtures), "--subdir", str(EXAMPLE_DAG)
    )

    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip() == (
        f"example_tested_agent.triage: replays cleanly (2 model and 1 tool steps from the fixture "
        f"{fixture_path(fixtures, 'triage')})"
    )
    assert diverged.returncode == 1
    assert "changed: tool definitions (~fetch_ticket)." in diverged.stdout
    assert one_task.returncode == 0, one_task.stdout + one_task.stderr
    assert one_task.stdout == clean.stdout
    assert neither.returncode == 1
    assert "give the run whose kept caches to verify (RUN_ID) or a fixture folder (--fixtures)" in neither.stderr
    assert server.requests == []
    for result in (clean, diverged):
        assert TOOL_CALLED not in result.stdout + result.stderr
