"""The cache commands' pieces that need no metadata DB: encrypted caches, ages, the console script's parser.

The commands themselves run as the real ``airflow`` CLI in tests/system/test_cache_cli.py; here ``show``
is called in-process on a cache written with and without the Fernet key.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.compat import airflow_reads_provider_cli, clear_fernet_cache
from tests.helpers.durable import local_store, task_identity

from airflow_pydantic_ai._compat import get_fernet
from airflow_pydantic_ai.cli import cache_command
from airflow_pydantic_ai.durable.storage.entry import StepEntry

IDENTITY = task_identity("secret_dag", "triage", run_id="manual__1")


@pytest.fixture
def fernet(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
    clear_fernet_cache()
    yield get_fernet()
    clear_fernet_cache()


def _args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "dag_id": IDENTITY.dag_id,
        "run_id": IDENTITY.run_id,
        "task_id": IDENTITY.task_id,
        "map_index": -1,
        "step": None,
        "full": False,
        "raw": False,
        "calls": False,
        "output": "json",
    }
    values.update(overrides)
    return argparse.Namespace(**values)


def test_show_decrypts_with_the_key_and_reports_encrypted_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fernet: object, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    store = local_store(base, IDENTITY, cipher=fernet)  # type: ignore[arg-type]
    store.put(StepEntry("tool", "a" * 64, 1, 1, "fetch_ticket", {"outcome": "return", "value": "the ticket"}))

    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ENCRYPT", "True")
    cache_command.cache_show(_args(step=1))
    with_key = capsys.readouterr().out
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ENCRYPT", "False")
    cache_command.cache_show(_args(step=1))
    without_key = capsys.readouterr().out

    assert "Step 1: tool fetch_ticket" in with_key and "the ticket" in with_key
    assert "Step 1: encrypted" in without_key and "durable_encrypt is off" in without_key
    assert "the ticket" not in without_key


def test_a_misconfigured_cache_path_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", "relative/folder")

    with pytest.raises(SystemExit) as stopped:
        cache_command.cache_show(_args())

    assert str(stopped.value.code).startswith("error: durable_cache_path 'relative/folder' is neither a URL")
    assert "\n" not in str(stopped.value.code)


@pytest.fixture
def one_step_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    store = local_store(base, IDENTITY)
    store.put(StepEntry("tool", "a" * 64, 1, 1, "fetch_ticket", {"outcome": "return", "value": "the ticket"}))


@pytest.mark.usefixtures("one_step_cache")
def test_json_and_yaml_keep_numbers_as_numbers_and_the_table_shows_them(capsys: pytest.CaptureFixture[str]) -> None:
    from airflow.utils import yaml

    cache_command.cache_show(_args(output="json"))
    as_json = json.loads(capsys.readouterr().out)
    cache_command.cache_show(_args(output="yaml"))
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    cache_command.cache_show(_args(output="plain"))
    as_plain = capsys.readouterr().out

    assert as_yaml == as_json
    [step] = as_json
    assert (step["step"], step["kind"], step["name"], step["attempt"]) == (1, "tool", "fetch_ticket", 1)
    assert type(step["bytes"]) is int and step["bytes"] > 0
    header, values, total = as_plain.splitlines()
    assert header.split() == list(step)
    assert total == "A retry replays 1 step (0 model): 0 tokens (0 input, 0 output)"
    assert values.split()[:3] == ["1", "tool", "fetch_ticket"] and str(step["bytes"]) in values.split()


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_off_a_terminal_the_document_is_what_airflows_formatter_prints(
    output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.cli.simple_table import AirflowConsole

    rows = [
        {"dag_id": "etl", "map_index": -1, "bytes": 3681, "last_written": None, "location": "s3://c@b/etl/ü/-1/"},
        {"dag_id": "x" * 300, "map_index": 10, "bytes": 0, "last_written": "2026-11-24T19:33:37+00:00", "location": ""},
    ]
    printer = AirflowConsole().print_as_json if output == "json" else AirflowConsole().print_as_yaml

    cache_command._print_rows(rows, output)
    ours = capsys.readouterr().out
    printer(rows)  # type: ignore[arg-type]
    airflows = capsys.readouterr().out

    assert ours == airflows


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", dt.timedelta(seconds=90)), ("30m", dt.timedelta(minutes=30)), ("7d", dt.timedelta(days=7))],
)
def test_ages(text: str, expected: dt.timedelta) -> None:
    assert cache_command.parse_age(text) == expected


@pytest.mark.parametrize("text", ["7", "d", "7 days", "-1d", ""])
def test_a_malformed_age_names_the_form(text: str) -> None:
    with pytest.raises(cache_command._UserError, match="write a number and a unit"):
        cache_command.parse_age(text)


@pytest.mark.skipif(
    not airflow_reads_provider_cli(),
    reason="Airflow 3.1 does not read providers' cli entry: there is no `airflow pydantic-ai` to compare with",
)
def test_the_console_script_has_the_same_commands_and_options_as_airflow() -> None:
    from airflow.cli.cli_parser import get_parser

    from airflow_pydantic_ai.cli.standalone import build_parser

    def options(parser: argparse.ArgumentParser, path: list[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.update(options(sub, [*path, name]))
        flags = {flag for action in parser._actions for flag in (action.option_strings or [action.dest])}
        found[" ".join(path)] = flags - {"-h", "--help", "subcommand", "func"}
        return found

    airflow = options(get_parser(), [])
    script = options(build_parser(), [])

    cache_commands = {name: flags for name, flags in airflow.items() if name.startswith("pydantic-ai cache ")}
    commands = ("list", "show", "rm", "resolve", "gc", "export", "verify")
    assert set(cache_commands) == {f"pydantic-ai cache {name}" for name in commands}
    for name, flags in cache_commands.items():
        assert script[name.removeprefix("pydantic-ai ")] == flags, name
    assert {"--yes", "--dry-run", "--force", "--from-step", "--map-index"} <= cache_commands["pydantic-ai cache rm"]
    assert {"--output", "--older-than", "--dag-id"} <= cache_commands["pydantic-ai cache list"]


def test_show_says_how_the_latest_try_ended_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_pydantic_ai.durable.storage.notes import AttemptRecord, TryEnding, record_attempt, record_ending

    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    store = local_store(base, IDENTITY)
    store.put(StepEntry("tool", "a" * 64, 1, 1, "fetch_ticket", {"outcome": "return", "value": "the ticket"}))
    summary = "Durable: replayed 0 cached steps (0 model, 0 tool), executed 2 new steps (1 model, 1 tool)"
    record_attempt(store, AttemptRecord(attempt=1, summary=summary), warn=pytest.fail)
    ending = TryEnding(attempt=1, how="failed", error_class="ConnectionError", message="chat API down")
    record_ending(store, ending, warn=pytest.fail)

    cache_command.cache_show(_args(output="plain"))
    captured = capsys.readouterr()

    assert f"Latest try 1: {summary}" in captured.err.splitlines()
    assert "How it ended: Failed: ConnectionError: chat API down" in captured.err.splitlines()
    assert "How it ended" not in captured.out, "stdout stays the table"


# --- one convention for the ids: DAG_ID RUN_ID TASK_ID as arguments (issue 28) --------------------


def _cache_parsers() -> dict[str, argparse.ArgumentParser]:
    """Command name -> its parser, in the console script (built from the definitions `airflow` uses)."""
    from airflow_pydantic_ai.cli.standalone import build_parser

    [commands] = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    [cache] = [
        action for action in commands.choices["cache"]._actions if isinstance(action, argparse._SubParsersAction)
    ]
    return dict(cache.choices)


@pytest.mark.parametrize(
    ("command", "after"), [("list", []), ("show", []), ("rm", []), ("export", ["out"]), ("verify", [])]
)
def test_every_cache_command_takes_dag_run_and_task_as_arguments(command: str, after: list[str]) -> None:
    args = _cache_parsers()[command].parse_args(["etl", "manual__1", "triage", *after])

    assert (args.dag_id, args.run_id, args.task_id) == ("etl", "manual__1", "triage")


def test_help_shows_one_convention_for_the_ids() -> None:
    for name, parser in _cache_parsers().items():
        text = parser.format_help()
        assert not {"--dag-id", "--run-id", "--task-id"} & set(text.split()), name


def test_verify_still_takes_the_task_as_an_option_and_says_how_to_write_it_now(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow_pydantic_ai.cli.spellings import verify_target

    args = _cache_parsers()["verify"].parse_args(["etl", "manual__1", "--task-id", "triage"])
    verify_target(args)

    assert (args.run_id, args.task_id) == ("manual__1", "triage")
    assert capsys.readouterr().err.strip() == (
        "note: `cache verify --task-id` is deprecated; give the ids as arguments: cache verify DAG_ID RUN_ID TASK_ID"
    )


def test_list_still_filters_by_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_pydantic_ai.cli.spellings import adopt_older_spellings

    args = _cache_parsers()["list"].parse_args(["--task-id", "triage", "--run-id", "manual__1", "-o", "json"])
    adopt_older_spellings(args, "list")

    assert (args.dag_id, args.run_id, args.task_id) == (None, "manual__1", "triage")
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_verify_with_fixtures_takes_the_task_after_the_dag(capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_pydantic_ai.cli.spellings import verify_target

    parse = _cache_parsers()["verify"].parse_args
    one_task = parse(["etl", "triage", "--fixtures", "fixtures"])
    every_task = parse(["etl", "--fixtures", "fixtures"])
    by_option = parse(["etl", "--fixtures", "fixtures", "--task-id", "triage"])
    a_run_too = parse(["etl", "manual__1", "triage", "--fixtures", "fixtures"])
    verify_target(one_task)
    verify_target(every_task)
    verify_target(by_option)

    assert (one_task.run_id, one_task.task_id) == (None, "triage")
    assert (every_task.run_id, every_task.task_id) == (None, None)
    assert (by_option.run_id, by_option.task_id) == (None, "triage")
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("give the ids as arguments: cache verify DAG_ID TASK_ID --fixtures FOLDER")
    )
    with pytest.raises(cache_command._UserError, match="with --fixtures there is no run to name"):
        verify_target(a_run_too)


def test_an_id_given_both_ways_must_agree() -> None:
    from airflow_pydantic_ai.cli.spellings import verify_target

    args = _cache_parsers()["verify"].parse_args(["etl", "manual__1", "triage", "--task-id", "notify"])

    with pytest.raises(cache_command._UserError, match="TASK_ID is 'triage' and --task-id is 'notify'"):
        verify_target(args)
