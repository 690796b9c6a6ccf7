"""Bad durable configuration under real ``dag.test()`` runs: the task fails at its start, before any model
or tool call, with a message that names ``durable_cache_path`` (or the option at fault) and says what
to fix.

The cache location comes either from ``AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH`` (one ``dag.test()``
per case) or from ``AgentOperator(durable_cache_path=...)`` (many tasks in one ``dag.test()``; each
task's exception is recorded: tests/helpers/bad_config.py).
"""

from __future__ import annotations

import pytest
from tests.helpers.airflow_run import run_dag, task_states
from tests.helpers.bad_config import (
    CALLS,
    FIX_HINT,
    assert_failed_at_start,
    immutable,
    recording_dag,
    reset,  # noqa: F401 - an autouse fixture: imported, it applies here
)

pytestmark = pytest.mark.usefixtures("airflow_db")


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
    dr = run_dag(recording_dag(f"bad_input_env_{case.replace('-', '_')}", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", *needles)


def test_unknown_storage_errors_mode_fails_at_start(monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS", "bogus")
    dr = run_dag(recording_dag("bad_input_storage_errors", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_storage_errors", "'bogus'", "warn", "fail")


@pytest.mark.parametrize("value", ["soon", "-5", "0"])
def test_bad_storage_timeout_fails_at_start(monkeypatch, capfd, value):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_TIMEOUT", value)
    dr = run_dag(recording_dag(f"bad_input_timeout_{value.strip('-')}", {"agent": None}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_storage_timeout", "seconds")


def test_a_config_error_is_not_fixed_by_retrying(monkeypatch, capfd):
    """With retries, each try fails the same way at its start; no try reaches the model."""
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", "s4://bucket/prefix")
    dr = run_dag(recording_dag("bad_input_retried", {"agent": None}, retries=2))
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
        dr = run_dag(recording_dag("bad_input_overrides", tasks))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    for task_id, needles in expected.items():
        assert_failed_at_start(dr, out, task_id, "durable_cache_path", *needles)
    assert not list(locked.iterdir())


# --- malformed URLs, and file URLs that are not absolute ----------------------------------------


def test_unparseable_url_names_the_option(capfd):
    dr = run_dag(recording_dag("bad_input_ipv6", {"agent": "s3://[bucket/prefix"}))
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path")


def test_file_url_with_a_relative_path_is_rejected(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    dr = run_dag(recording_dag("bad_input_file_relative", {"agent": "file://relative/cache"}))
    out = capfd.readouterr().out
    assert not (tmp_path / "relative").exists(), "a cache appeared under the current directory"
    assert dr.state == "failed"
    assert_failed_at_start(dr, out, "agent", "durable_cache_path")
