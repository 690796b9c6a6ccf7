"""``airflow pydantic-ai cache list|show|rm|gc``: the real ``airflow`` CLI in a subprocess.

The caches come from real ``dag.test()`` runs in this test session's metadata DB (the CLI subprocess
shares ``AIRFLOW_HOME``): a task that failed for good, a task up for retry (a failed run whose state
is then set through the DB, as the scheduler would leave it), a task that succeeded with a leftover
cache, a task whose DAG run was deleted, and the two map indexes 1 and 10 of a mapped task. Each
scenario runs on ``file://`` and on the moto S3 server, beside neighbours that share the base's
string prefix (``{base}-old/...``, ``{base}x/...``), which must never be listed nor deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_cli import AIRFLOW_BIN
from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states
from tests.helpers.compat import airflow_reads_provider_cli
from tests.helpers.operator_runs import durable_operator

pytestmark = pytest.mark.usefixtures("airflow_db")

CONSOLE_SCRIPT = Path(sys.executable).parent / "airflow-pydantic-ai"
# The commands as users reach them: `airflow pydantic-ai ...`, or the console script on Airflow 3.1,
# which does not read providers' cli entry.
CLI = AIRFLOW_BIN if airflow_reads_provider_cli() else CONSOLE_SCRIPT
LIST_KEYS = [
    "dag_id",
    "run_id",
    "task_id",
    "map_index",
    "iteration",
    "entries",
    "model_steps",
    "tool_steps",
    "bytes",
    "last_written",
    "task_state",
    "calls_in_doubt",
    "location",
]
NEIGHBOURS = ("-old/d/r/t/-1/model-x.json", "x/d/r/t/-1/tool-y.json", ".json")


@dataclass
class Scenario:
    """One backend's cache base, the DAG runs that wrote into it and the env for the CLI subprocess."""

    backend: str
    base_url: str
    env: dict[str, str]
    fs: Any
    root: str
    runs: dict[str, str] = field(default_factory=dict)
    """Scenario name -> the run id of its DAG run."""

    def cli(self, *args: str, env: dict[str, str] | None = None, script: Path = CLI) -> CLIResult:
        prefix = [] if script == CONSOLE_SCRIPT else ["pydantic-ai"]
        result = subprocess.run(
            [str(script), *prefix, "cache", *args],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env, **(env or {})},
        )
        return CLIResult(result.returncode, result.stdout, result.stderr)

    def files(self) -> list[str]:
        """Every file under the base and its neighbours, relative to the bucket or the temp folder."""
        parent = self.root.rsplit("/", 1)[0]
        self.fs.invalidate_cache()
        return sorted(path[len(parent) + 1 :] for path in self.fs.find(parent))


@dataclass
class CLIResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        # Unit-test mode logs a line ("[info ] Unit test configuration loaded...") before the document.
        lines = self.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(("[{", "[]", "{")))
        return json.loads("\n".join(lines[start:]))


def _agent_task(task_id: str, fail_on_try: int | None, **kwargs: Any) -> Any:
    def fetch_ticket(ticket_id: int) -> dict[str, Any]:
        """Fetch a ticket."""
        return {"id": ticket_id, "title": "Login page times out", "password": "hunter2-in-a-tool-result"}

    def notify_team(ticket_id: int) -> str:
        """Notify the team."""
        if fail_on_try is not None and current_try() <= fail_on_try:
            raise ConnectionError("chat API down")
        return "posted"

    return durable_operator(fetch_ticket, notify_team, task_id=task_id, **kwargs)


def _dag(dag_id: str, retries: int = 0, on_retry_callback: Any = None) -> Any:
    return make_dag(dag_id, retries=retries, on_retry_callback=on_retry_callback)


def _set_state(dag_id: str, run_id: str, task_id: str, state: str) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
            .values(state=state)
        )


def _delete_run(dag_id: str, run_id: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        session.delete(session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).one())


def _build(backend: str, base_url: str, fs: Any, root: str, suffix: str) -> Scenario:
    """Run the DAGs of a scenario (the cache path is already configured) and return it."""
    scenario = Scenario(backend=backend, base_url=base_url, env={}, fs=fs, root=root)

    # A task that failed for good: the model answer and fetch_ticket are cached, notify_team failed.
    with _dag(f"cli_failed_{suffix}") as dag:
        _agent_task("triage", fail_on_try=1)
    dr = run_dag(dag)
    assert dr.state == "failed"
    scenario.runs["failed"] = dr.run_id

    # The same, then marked up for retry as the scheduler leaves a task between its tries.
    with _dag(f"cli_retry_{suffix}") as dag:
        _agent_task("triage", fail_on_try=1)
    dr = run_dag(dag)
    assert dr.state == "failed"
    _set_state(dr.dag_id, dr.run_id, "triage", "up_for_retry")
    scenario.runs["retry"] = dr.run_id

    # A task that succeeded on its retry, with its first try's cache put back afterwards (a leftover, as
    # when deleting it failed). The cache is snapshot between the tries.
    saved: dict[str, bytes] = {}

    def snapshot(context: Any) -> None:
        fs.invalidate_cache()
        saved.update({path: fs.cat_file(path) for path in fs.find(root)})

    with _dag(f"cli_success_{suffix}", retries=1, on_retry_callback=snapshot) as dag:
        _agent_task("triage", fail_on_try=1)
    dr = run_dag(dag)
    assert dr.state == "success" and task_states(dr)[("triage", -1)] == ("success", 2)
    assert saved
    for path, data in saved.items():
        fs.pipe_file(path, data)
    scenario.runs["success"] = dr.run_id

    # A task whose DAG run was deleted afterwards.
    with _dag(f"cli_deleted_{suffix}") as dag:
        _agent_task("triage", fail_on_try=1)
    dr = run_dag(dag)
    assert dr.state == "failed"
    _delete_run(dr.dag_id, dr.run_id)
    scenario.runs["deleted"] = dr.run_id

    # A mapped task with map indexes 1 and 10 ("1" is a string prefix of "10"), failed for good.
    with _dag(f"cli_mapped_{suffix}") as dag:
        from airflow_pydantic_ai.operators.agent import AgentOperator

        AgentOperator.partial(
            task_id="triage",
            model_id="test",
            toolsets=[FunctionToolset([_failing_tool])],
            durable=True,
        ).expand(prompt=[f"Ticket {index}" for index in range(11)])
    dr = run_dag(dag)
    assert dr.state == "failed"
    scenario.runs["mapped"] = dr.run_id

    for neighbour in NEIGHBOURS:
        fs.pipe_file(f"{root}{neighbour}", b"{}")
    fs.pipe_file(f"{root}/README.txt", b"not a cache")
    return scenario


def _failing_tool(ticket_id: int) -> str:
    """Always fails."""
    raise ConnectionError("down")


@pytest.fixture(scope="module", params=["file", "s3"])
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    suffix = uuid.uuid4().hex[:6]
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "file":
            import fsspec

            folder = tmp_path_factory.mktemp("cli") / "cache"
            base_url, root, env = f"file://{folder}", str(folder), {}
            fs = fsspec.filesystem("file", auto_mkdir=True)
        else:
            from tests.helpers.s3 import S3Bucket

            server = request.getfixturevalue("s3_server")
            bucket = server.create_bucket()
            conn = {f"AIRFLOW_CONN_{S3Bucket.CONN_ID.upper()}": server.connection_json()}
            patch.setenv(*next(iter(conn.items())))
            import s3fs

            fs = s3fs.S3FileSystem(key="x", secret="x", client_kwargs={"endpoint_url": server.endpoint_url})
            base_url, root, env = bucket.url("cache"), f"{bucket.name}/cache", conn
        env["AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH"] = base_url
        patch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", base_url)
        built = _build(request.param, base_url, fs, root, suffix)
        built.env = env
        yield built


def _rows(result: CLIResult) -> dict[tuple[str, int], dict[str, Any]]:
    assert result.code == 0, result.stderr
    return {(row["dag_id"].rsplit("_", 1)[0], row["map_index"]): row for row in result.json()}


def test_list_shows_every_cache_with_its_task_state(scenario: Scenario) -> None:
    rows = _rows(scenario.cli("list", "-o", "json"))

    assert set(rows) == {
        ("cli_failed", -1),
        ("cli_retry", -1),
        ("cli_success", -1),
        ("cli_deleted", -1),
        *((("cli_mapped", index)) for index in range(11)),
    }
    assert all(list(row) == LIST_KEYS for row in rows.values())
    states = {key: row["task_state"] for key, row in rows.items() if key[0] != "cli_mapped"}
    assert states == {
        ("cli_failed", -1): "failed",
        ("cli_retry", -1): "up_for_retry",
        ("cli_success", -1): "success",
        ("cli_deleted", -1): "missing",
    }
    failed = rows[("cli_failed", -1)]
    # The model's first answer (calling both tools) and fetch_ticket; notify_team failed, so it is not cached.
    assert (failed["entries"], failed["model_steps"], failed["tool_steps"]) == (2, 1, 1)
    assert type(failed["bytes"]) is int and failed["bytes"] > 0  # a JSON number, not Airflow's "3681"
    assert failed["run_id"] == scenario.runs["failed"]
    assert failed["location"] == f"{scenario.base_url}/{failed['dag_id']}/{failed['run_id']}/triage/-1/"
    written = datetime.fromisoformat(failed["last_written"])
    assert written.tzinfo is not None and abs(datetime.now(UTC) - written) < timedelta(hours=1)
    assert rows[("cli_mapped", 10)]["task_state"] == "failed"


def test_list_filters_by_ids_and_age(scenario: Scenario) -> None:
    failed_dag = _dag_id(scenario, "failed")

    only_failed = scenario.cli("list", "--dag-id", failed_dag, "-o", "json")
    only_index = scenario.cli("list", "--task-id", "triage", "--run-id", scenario.runs["mapped"], "-o", "json")
    old = scenario.cli("list", "--older-than", "1h", "-o", "json")
    table = scenario.cli("list", "--dag-id", failed_dag)

    assert [row["dag_id"] for row in only_failed.json()] == [failed_dag]
    assert sorted(row["map_index"] for row in only_index.json()) == list(range(11))
    assert old.code == 0 and old.json() == []
    assert table.code == 0
    assert "task_state" in table.stdout and failed_dag in table.stdout


def test_list_takes_the_ids_as_arguments_and_still_accepts_the_options(scenario: Scenario) -> None:
    failed_dag, mapped_dag = _dag_id(scenario, "failed"), _dag_id(scenario, "mapped")

    by_dag = scenario.cli("list", failed_dag, "-o", "json")
    by_task = scenario.cli("list", mapped_dag, scenario.runs["mapped"], "triage", "-o", "json")
    by_options = scenario.cli("list", "--dag-id", mapped_dag, "--run-id", scenario.runs["mapped"], "-o", "json")

    assert [row["dag_id"] for row in by_dag.json()] == [failed_dag]
    assert sorted(row["map_index"] for row in by_task.json()) == list(range(11))
    assert by_options.json() == by_task.json()
    assert "note: `cache list --dag-id` is deprecated; give the ids as arguments" in by_options.stderr
    # The ids as arguments draw no note of ours (Airflow 3.1 prints deprecation warnings of its own on stderr).
    assert "note: `cache list" not in by_task.stderr, by_task.stderr


def _dag_id(scenario: Scenario, name: str) -> str:
    rows = scenario.cli("list", "--run-id", scenario.runs[name], "-o", "json").json()
    [dag_id] = {row["dag_id"] for row in rows if row["dag_id"].startswith(f"cli_{name}")}
    return dag_id


def test_show_lists_the_steps_and_decodes_one_with_secrets_masked(scenario: Scenario) -> None:
    dag_id = _dag_id(scenario, "failed")
    ids = (dag_id, scenario.runs["failed"], "triage")

    steps = scenario.cli("show", *ids, "-o", "json")
    step = scenario.cli("show", *ids, "--step", "2")
    missing = scenario.cli("show", *ids, "--step", "9")

    assert steps.code == 0, steps.stderr
    assert [(row["step"], row["kind"], row["name"]) for row in steps.json()] == [
        (1, "model", "test:test"),
        (2, "tool", "fetch_ticket"),
    ]
    assert steps.json()[1]["call_id"] == "pyd_ai_tool_call_id__fetch_ticket"
    assert steps.json()[1]["attempt"] == 1
    assert step.code == 0, step.stderr
    assert "Step 2: tool fetch_ticket" in step.stdout
    assert "Login page times out" in step.stdout
    assert "hunter2-in-a-tool-result" not in step.stdout and "***" in step.stdout
    assert missing.code == 1 and "no step 9" in missing.stderr and "Traceback" not in missing.stderr


def test_show_a_damaged_entry_says_so(scenario: Scenario) -> None:
    dag_id = _dag_id(scenario, "retry")
    ids = (dag_id, scenario.runs["retry"], "triage")
    prefix = f"{scenario.root}/{dag_id}/{scenario.runs['retry']}/triage/-1"
    scenario.fs.invalidate_cache()
    # The failed try packed its steps: the tool call's entry inside the pack is edited (its checksum fails).
    [pack] = [path for path in scenario.fs.find(prefix) if path.endswith(".pack")]
    original = scenario.fs.cat_file(pack)
    document = json.loads(original)
    [tool] = [name for name in document["entries"] if name.startswith("tool-")]
    document["entries"][tool]["label"] = "forged"
    scenario.fs.pipe_file(pack, json.dumps(document).encode())
    try:
        steps = scenario.cli("show", *ids, "-o", "json")
        step = scenario.cli("show", *ids, "--step", "2")
    finally:
        scenario.fs.pipe_file(pack, original)

    assert [row["kind"] for row in steps.json()] == ["model", "damaged"]
    assert step.code == 0 and "cannot be shown" in step.stdout and "Traceback" not in step.stderr


def test_no_cache_and_bad_configuration_fail_in_one_line(scenario: Scenario) -> None:
    from airflow_pydantic_ai.durable.errors import DurableConfigError
    from airflow_pydantic_ai.tries.settings import resolve_cache_path

    none = scenario.cli("show", "no_such_dag", "no_such_run", "triage")
    rm_none = scenario.cli("rm", "no_such_dag", "no_such_run", "triage", "--yes")
    bad = scenario.cli("list", env={"AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": "s4://bucket/x"})
    with pytest.raises(DurableConfigError) as task_error:
        resolve_cache_path("s4://bucket/x")

    assert none.code == 1
    # The error is the last line (Airflow may log before it, e.g. where a connection came from).
    assert none.stderr.strip().splitlines()[-1] == (
        f"error: no durable cache for dag_id='no_such_dag' run_id='no_such_run' task_id='triage' map_index=-1 "
        f"(looked at {scenario.base_url}/no_such_dag/no_such_run/triage/-1/)"
    )
    assert "Traceback" not in none.stderr + bad.stderr
    assert rm_none.code == 1 and "no durable cache for" in rm_none.stderr
    assert bad.code == 1
    assert bad.stderr.strip().splitlines()[-1] == f"error: {task_error.value}".replace(
        "AgentOperator(durable_cache_path=...)", "durable_cache_path"
    )


def test_rm_asks_refuses_while_running_and_deletes_one_map_index_only(scenario: Scenario) -> None:
    mapped = _dag_id(scenario, "mapped")
    ids = (mapped, scenario.runs["mapped"], "triage", "--map-index", "1")

    no_tty = scenario.cli("rm", *ids)
    dry = scenario.cli("rm", *ids, "--dry-run")
    _set_state(mapped, scenario.runs["mapped"], "triage", "running")
    try:
        running = scenario.cli("rm", *ids, "--yes")
        forced_dry = scenario.cli("rm", *ids, "--yes", "--force", "--dry-run")
    finally:
        _set_state(mapped, scenario.runs["mapped"], "triage", "failed")
    before = scenario.files()
    deleted = scenario.cli("rm", *ids, "--yes")
    after = scenario.files()

    assert no_tty.code == 1 and "add --yes" in no_tty.stderr
    assert dry.code == 0 and "Would delete the whole cache (1 step" in dry.stdout
    assert running.code == 1 and "is running" in running.stderr and "--force" in running.stderr
    assert forced_dry.code == 0, forced_dry.stderr
    assert deleted.code == 0, deleted.stderr
    gone = sorted(set(before) - set(after))
    assert gone and all(f"/{scenario.runs['mapped']}/triage/1/" in path for path in gone), gone
    rows = _rows(scenario.cli("list", "--run-id", scenario.runs["mapped"], "-o", "json"))
    assert sorted(index for _, index in rows) == [0, *range(2, 11)]


def test_rm_from_step_keeps_the_steps_before(scenario: Scenario) -> None:
    dag_id = _dag_id(scenario, "deleted")
    ids = (dag_id, scenario.runs["deleted"], "triage")

    too_far = scenario.cli("rm", *ids, "--from-step", "3", "--yes")
    forked = scenario.cli("rm", *ids, "--from-step", "2", "--yes")
    steps = scenario.cli("show", *ids, "-o", "json")

    assert too_far.code == 1 and "--from-step must be 1..2" in too_far.stderr
    assert forked.code == 0, forked.stderr
    assert "the next try replays steps 1..1" in forked.stdout
    assert [(row["step"], row["kind"]) for row in steps.json()] == [(1, "model")]


@pytest.mark.skipif(
    CLI == CONSOLE_SCRIPT, reason="Airflow 3.1 has no `airflow pydantic-ai` (no providers' cli entry) to compare with"
)
def test_console_script_runs_the_same_commands(scenario: Scenario) -> None:
    via_airflow = scenario.cli("list", "-o", "json")
    via_script = scenario.cli("list", "-o", "json", script=CONSOLE_SCRIPT)

    assert via_script.code == 0, via_script.stderr
    assert via_script.json() == via_airflow.json()


def test_gc_deletes_only_caches_no_task_instance_will_read(scenario: Scenario) -> None:
    # Runs last in this module: it deletes most caches of the scenario.
    young = scenario.cli("gc", "--older-than", "1h", "--yes")
    before = scenario.files()
    dry = scenario.cli("gc", "--dry-run", "-o", "json")
    after_dry_run = scenario.files()
    no_tty = scenario.cli("gc")
    deleted = scenario.cli("gc", "--yes")
    rows = _rows(scenario.cli("list", "-o", "json"))
    after = scenario.files()

    assert young.code == 0 and "Nothing to delete" in young.stdout
    assert dry.code == 0, dry.stderr
    doomed = {(row["dag_id"].rsplit("_", 1)[0], row["map_index"]) for row in dry.json()}
    assert ("cli_retry", -1) not in doomed
    assert {("cli_failed", -1), ("cli_success", -1), ("cli_deleted", -1), ("cli_mapped", 10)} <= doomed
    assert "Would delete" in dry.stderr and "bytes" in dry.stderr
    assert after_dry_run == before
    assert no_tty.code == 1 and "add --yes" in no_tty.stderr
    assert deleted.code == 0, deleted.stderr
    assert "Deleted" in deleted.stdout and "freed" in deleted.stdout
    assert set(rows) == {("cli_retry", -1)}
    base = scenario.root.rsplit("/", 1)[-1]
    for neighbour in NEIGHBOURS:
        assert f"{base}{neighbour}" in after
    assert f"{base}/README.txt" in after


def test_the_task_log_names_the_command_that_deletes_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import re
    import shlex

    from airflow_pydantic_ai.operators.agent import AgentOperator

    base_url = f"file://{tmp_path / 'cache'}"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", base_url)
    with _dag(f"cli_log_{uuid.uuid4().hex[:6]}") as dag:
        AgentOperator.partial(
            task_id="triage", model_id="test", toolsets=[FunctionToolset([_failing_tool])], durable=True
        ).expand(prompt=["Ticket 1"])
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed"
    [command] = re.findall(r"\(delete it to force a fresh run: (airflow[ -]pydantic-ai cache rm [^)]*)\)", out)
    prefix = ["airflow", "pydantic-ai"] if CLI == AIRFLOW_BIN else ["airflow-pydantic-ai"]

    assert shlex.split(command) == [*prefix, "cache", "rm", dr.dag_id, dr.run_id, "triage", "--map-index", "0"]
    pasted = subprocess.run(
        [str(CLI), *shlex.split(command)[1:], "--yes"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": base_url},
    )
    assert pasted.returncode == 0, pasted.stderr
    assert "Deleted the whole cache (1 step" in pasted.stdout
    assert not (tmp_path / "cache" / dr.dag_id).exists()


def test_the_task_log_and_cache_show_give_each_step_the_same_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """One numbering: every ``step N: ...`` line of both tries' logs is step N of ``cache show``."""
    import re

    base_url = f"file://{tmp_path / 'cache'}"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", base_url)
    with _dag(f"cli_numbers_{uuid.uuid4().hex[:6]}", retries=1) as dag:
        _agent_task("triage", fail_on_try=2)  # notify_team fails on both tries: the cache is kept
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed" and task_states(dr)[("triage", -1)] == ("failed", 2)

    ids = (dr.dag_id, dr.run_id, "triage")
    logged = re.findall(r"Durable: step (\d+): (model|tool) (\S+)[^\n]*?(replayed from the cache|ran live|failed)", out)
    show = subprocess.run(
        [str(CLI), *([] if CLI == CONSOLE_SCRIPT else ["pydantic-ai"]), "cache", "show", *ids, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": base_url},
    )
    listed = {row["step"]: (row["kind"], row["name"]) for row in CLIResult(show.returncode, show.stdout, "").json()}

    numbered = [(int(number), happened) for number, _, _, happened in logged]
    # The two tools run in parallel and each try logs them in the order they end (notify_team may fail first):
    # the numbers, not the order of the lines, are what must agree.
    assert [sorted(numbered[:3]), sorted(numbered[3:])] == [
        [(1, "ran live"), (2, "ran live"), (3, "failed")],  # notify_team: not recorded; step 3 on both tries
        [(1, "replayed from the cache"), (2, "replayed from the cache"), (3, "failed")],
    ]
    assert listed == {1: ("model", "test:test"), 2: ("tool", "fetch_ticket")}
    for number, kind, name, happened in logged:
        if happened != "failed":
            assert listed[int(number)] == (kind, name)


def test_show_names_the_calls_in_doubt_and_how_to_resolve_them(tmp_path: Path) -> None:
    """Issue 29, part 6, through the real CLI: a cache written by real attempts with an at_most_once() call in each
    state (tests/helpers/calls_in_doubt.py)."""
    from tests.helpers.calls_in_doubt import API_KEY, RECEIPT, write_three_calls
    from tests.helpers.durable import RUN_ID, DurableHarness

    harness = DurableHarness(base=str(tmp_path / "cache"))
    write_three_calls(harness)
    env = {"AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{harness.base}"}
    cli = Scenario(backend="file", base_url=env["AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH"], env=env, fs=None, root="")

    table = cli.cli("show", "dag", RUN_ID, "task")
    rows = cli.cli("show", "dag", RUN_ID, "task", "--calls", "-o", "json")
    steps = cli.cli("show", "dag", RUN_ID, "task", "-o", "json")

    assert table.code == 0, table.stderr
    section = table.stdout.split("Calls in doubt (2):", 1)[1]
    assert "tool charge_card  call c2: asked for by step 3, started by try 1 at " in section
    assert "cut off; ana answered 'it happened' (the Required Actions page)" in section
    assert f"result given: {RECEIPT}" in section
    assert "tool send_invoice  call c3: outcome unknown: asked for by step 5, started by try 3 at " in section
    invoice = rows.json()[2]
    command = (
        f"{'airflow pydantic-ai' if CLI == AIRFLOW_BIN else 'airflow-pydantic-ai'} cache resolve dag {RUN_ID} task"
    )
    assert f"resolve: {command} --call {invoice['ref']} --happened --result" in section
    assert "reserve_seat" not in section and API_KEY not in table.stdout + rows.stdout
    assert [(row["tool"], row["state"]) for row in rows.json()] == [
        ("reserve_seat", "finished"),
        ("charge_card", "resolved"),
        ("send_invoice", "unfinished"),
    ]
    assert [row["step"] for row in steps.json()] == [1, 2, 3, 4, 5]  # charge_card: the answer try 3 used
    assert "2 calls in doubt (started, cut off): add --calls to list them" in steps.stderr


def test_rm_gc_and_list_never_forget_a_call_in_doubt_without_a_word(tmp_path: Path) -> None:
    """Issue 35 item 2, through the real CLI: a cache whose send_invoice call was cut off and never answered."""
    from tests.helpers.calls_in_doubt import write_three_calls
    from tests.helpers.durable import RUN_ID, DurableHarness

    harness = DurableHarness(base=str(tmp_path / "cache"))
    write_three_calls(harness)
    env = {"AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{harness.base}"}
    cli = Scenario(backend="file", base_url=env["AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH"], env=env, fs=None, root="")
    held = sorted(path.name for path in harness.root.iterdir())
    invoice = "tool send_invoice (call c3) (ref "

    listed = cli.cli("list", "-o", "json")
    table = cli.cli("list")
    refused = cli.cli("rm", "dag", RUN_ID, "task", "--yes")
    dry = cli.cli("gc", "--dry-run")
    kept = cli.cli("gc", "--yes")
    assert sorted(path.name for path in harness.root.iterdir()) == held, "nothing was deleted"
    forget_dry = cli.cli("rm", "dag", RUN_ID, "task", "--dry-run", "--forget-calls-in-doubt")
    forgotten = cli.cli("gc", "--yes", "--forget-calls-in-doubt")

    assert [row["calls_in_doubt"] for row in listed.json()] == [1], listed.stderr
    assert "calls_in_doubt" in table.stdout
    assert refused.code == 1
    assert "holds 1 call in doubt" in refused.stderr and invoice in refused.stderr
    assert "started by try 3 at " in refused.stderr and "--forget-calls-in-doubt" in refused.stderr
    assert "cache resolve dag" in refused.stderr
    assert dry.code == 0 and "Nothing to delete" in dry.stdout, dry.stderr
    assert "holds calls in doubt, which gc keeps (delete it with --forget-calls-in-doubt)" in dry.stdout
    assert invoice in dry.stdout
    assert kept.code == 0 and "Nothing to delete" in kept.stdout, kept.stderr
    assert forget_dry.code == 0 and f"and forget the calls in doubt: {invoice}" in forget_dry.stdout
    assert forgotten.code == 0, forgotten.stderr
    assert "which gc forgets (--forget-calls-in-doubt)" in forgotten.stdout and "Deleted 1 cache" in forgotten.stdout
    assert not harness.root.exists() or not list(harness.root.iterdir())
