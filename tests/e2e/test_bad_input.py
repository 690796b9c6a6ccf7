"""Bad durable configuration under real ``dag.test()`` runs: the task fails at its start, before any model
or tool call, with a message that names ``durable_cache_path`` (or the option at fault) and says what
to fix.

The cache location comes either from ``AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH`` (one ``dag.test()``
per case) or from ``AgentOperator(durable_cache_path=...)`` (many tasks in one ``dag.test()``; each
task's exception is recorded by the operator subclass below: Airflow 3.1's ``dag.test()`` leaves
``context["exception"]`` out of the failure callback's context, so a callback cannot see it there).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_run import run_dag, task_states

pytestmark = pytest.mark.usefixtures("airflow_db")

CALLS: Counter[str] = Counter()
ERRORS: dict[str, str] = {}
FIX_HINT = "file:///absolute/folder"


def counting_agent(task_id: str) -> Agent[Any, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS[f"{task_id}:model"] += 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("side_effect", {}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def side_effect() -> str:
        CALLS[f"{task_id}:tool"] += 1
        return "done"

    return agent


def recording_operator() -> type:
    """``AgentOperator`` that records the exception its ``execute`` raises in ``ERRORS``, by task id."""
    from airflow_pydantic_ai.operators.agent import AgentOperator

    class RecordingAgentOperator(AgentOperator):
        def execute(self, context: Any) -> Any:
            try:
                return super().execute(context)
            except Exception as error:
                ERRORS[self.task_id] = f"{type(error).__name__}: {error}"
                raise

    return RecordingAgentOperator


@pytest.fixture(autouse=True)
def reset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    CALLS.clear()
    ERRORS.clear()
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path / 'default-cache'}")
    monkeypatch.delenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS", raising=False)


def make_dag(dag_id: str, tasks: dict[str, str | None], retries: int = 0):
    """One durable AgentOperator per entry: task_id -> durable_cache_path override (None: the config)."""
    from airflow.sdk import DAG

    operator = recording_operator()
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        default_args={"retries": retries, "retry_delay": timedelta(0)},
    ) as dag:
        for task_id, override in tasks.items():
            operator(
                task_id=task_id,
                prompt="Do the thing once.",
                agent=counting_agent(task_id),
                durable=True,
                durable_cache_path=override,
            )
    return dag


@contextlib.contextmanager
def immutable(folder: Path):
    """A folder that even root cannot write into (``chattr +i``); skips where that is not possible."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not available: cannot make a folder root cannot write to")
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not supported here ({done.stderr.strip()}); root can write anywhere else")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def assert_failed_at_start(dr: Any, out: str, task_id: str, *needles: str) -> None:
    assert task_states(dr)[(task_id, -1)] == ("failed", 1)
    assert CALLS[f"{task_id}:model"] == 0 and CALLS[f"{task_id}:tool"] == 0, "nothing ran before the check"
    error = ERRORS.get(task_id, "")
    for needle in needles:
        assert needle in error, f"{task_id}: {needle!r} not in {error!r}"
    assert "DurableConfigError" in error, error
    # The attempt failed before any step: it still reports, with nothing replayed or executed.
    assert "Durable: replayed 0 cached steps (0 model, 0 tool), executed 0 new steps (0 model, 0 tool)" in out


# --- through [pydantic_ai] durable_cache_path (the environment) -------------------------------------


ENV_CASES = {
    "unknown-scheme": ("s4://bucket/prefix", ["durable_cache_path", "unknown scheme 's4'", FIX_HINT]),
    "relative-path": ("cache/relative", ["durable_cache_path", "neither a URL nor an absolute path", FIX_HINT]),
    "missing-connection": (
        "s3://no_such_conn@bucket/prefix",
        ["durable_cache_path", "no_such_conn", "AIRFLOW_CONN_NO_SUCH_CONN"],
    ),
    "parent-is-a-file": ("{tmp}/a-file/cache", ["durable_cache_path", "cannot create the folder", "Not a directory"]),
    "no-bucket": ("s3://aws_default@", ["durable_cache_path", "names no bucket", "s3://conn_id@bucket/prefix"]),
}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_bad_cache_path_in_the_config_fails_at_start(case, tmp_path, monkeypatch, capfd):
    url, needles = ENV_CASES[case]
    (tmp_path / "a-file").write_text("a regular file where a folder should be")
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", url.format(tmp=tmp_path))
    dr = run_dag(make_dag(f"bad_input_env_{case.replace('-', '_')}", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", *needles)


def test_unknown_storage_errors_mode_fails_at_start(monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS", "bogus")
    dr = run_dag(make_dag("bad_input_storage_errors", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_storage_errors", "'bogus'", "warn", "fail")


@pytest.mark.parametrize("value", ["soon", "-5", "0"])
def test_bad_storage_timeout_fails_at_start(monkeypatch, capfd, value):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_TIMEOUT", value)
    dr = run_dag(make_dag(f"bad_input_timeout_{value.strip('-')}", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_storage_timeout", "seconds")


@pytest.mark.s3
def test_an_invalid_bucket_name_is_a_configuration_error_not_an_outage(s3_bucket, monkeypatch, capfd):
    """S3 refuses the name before sending anything: no amount of waiting or retrying fixes that."""
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"s3://{s3_bucket.CONN_ID}@Bad_Bucket!/cache")
    dr = run_dag(make_dag("bad_input_bucket_name", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path", "cannot write to", "bucket name")
    assert "unreachable" not in ERRORS["agent"]


def test_a_config_error_is_not_fixed_by_retrying(monkeypatch, capfd):
    """With retries, each try fails the same way at its start; no try reaches the model."""
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", "s4://bucket/prefix")
    dr = run_dag(make_dag("bad_input_retried", {"agent": None}, retries=2))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    state, tries = task_states(dr)[("agent", -1)]
    assert state == "failed"
    assert out.count("has an unknown scheme 's4'") >= 1
    assert CALLS["agent:model"] == 0 and CALLS["agent:tool"] == 0
    print(f"\na misconfigured durable task used {tries} tries")


# --- through AgentOperator(durable_cache_path=...): many tasks, one dag.test() -------------------------


def test_bad_cache_path_overrides_fail_at_start(tmp_path, monkeypatch, capfd):
    (tmp_path / "a-file").write_text("a regular file where a folder should be")
    in_the_way = tmp_path / "in-the-way"
    in_the_way.mkdir()
    (in_the_way / "bad_input_overrides").write_text("a file where the dag's folder should be")
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "locked"
    tasks = {
        "unknown_scheme": "s4://bucket/prefix",
        "single_slash": "s3:/bucket/prefix",
        "no_scheme_name": "://bucket/prefix",
        "relative_path": "relative/dir",
        "windows_path": "C:\\cache",
        "read_only_scheme": "http://example.com/cache",
        "unregistered_filesystem": "ftp://example.com/cache",
        "missing_connection": "s3://no_such_conn@bucket/prefix",
        "parent_is_a_file": f"file://{tmp_path}/a-file/cache",
        "file_in_the_way": f"file://{in_the_way}",
        "immutable_folder": f"file://{locked}",
        "immutable_parent": f"file://{locked}/cache",
    }
    expected = {
        "unknown_scheme": ["unknown scheme 's4'", FIX_HINT],
        "single_slash": ["neither a URL nor an absolute path", FIX_HINT],
        "no_scheme_name": ["neither a URL nor an absolute path", FIX_HINT],
        "relative_path": ["neither a URL nor an absolute path", FIX_HINT],
        "windows_path": ["neither a URL nor an absolute path", FIX_HINT],
        "read_only_scheme": ["read-only", FIX_HINT],
        "unregistered_filesystem": ["'ftp://example.com/cache' has an unknown scheme 'ftp'", FIX_HINT],
        "missing_connection": ["no_such_conn", "cannot be found", "AIRFLOW_CONN_NO_SUCH_CONN"],
        "parent_is_a_file": ["cannot create the folder", "Not a directory"],
        "file_in_the_way": ["cannot write to", "list, get, put and delete permission"],
        "immutable_folder": ["not writable by this worker"],
        "immutable_parent": ["cannot create the folder", "Operation not permitted"],
    }
    with immutable(locked):
        dr = run_dag(make_dag("bad_input_overrides", tasks))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    for task_id, needles in expected.items():
        assert_failed_at_start(dr, out, task_id, "durable_cache_path", *needles)
    assert not list(locked.iterdir())


# --- malformed URLs, and file URLs that are not absolute ----------------------------------------


def test_unparseable_url_names_the_option(capfd):
    dr = run_dag(make_dag("bad_input_ipv6", {"agent": "s3://[bucket/prefix"}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path")


def test_file_url_with_a_relative_path_is_rejected(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    dr = run_dag(make_dag("bad_input_file_relative", {"agent": "file://relative/cache"}))
    out = capfd.readouterr().out
    assert not (tmp_path / "relative").exists(), "a cache appeared under the current directory"
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path")
