"""The command line of ``airflow pydantic-ai``: its commands and their options, nothing else.

Airflow 3.2 and later read the provider metadata's ``cli`` entry and call :func:`get_cli_commands`
when they build ``airflow``'s parser, so this module stays cheap to import: the commands themselves
(:mod:`airflow_pydantic_ai.cli.cache_command`, ``task_cache_command.py``...) load only when one runs. Airflow 3.1
does not read the ``cli`` entry; there the same commands run as the ``airflow-pydantic-ai`` console script
(:mod:`airflow_pydantic_ai.cli.standalone`), built from the same definitions.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from airflow.cli.cli_config import ARG_OUTPUT, ARG_YES, ActionCommand, Arg, GroupCommand, lazy_load_command

if TYPE_CHECKING:
    from airflow.cli.cli_config import CLICommand

__all__ = ["CACHE_COMMANDS", "get_cli_commands"]

_COMMANDS = "airflow_pydantic_ai.cli.cache_command"
_TASK_COMMANDS = "airflow_pydantic_ai.cli.task_cache_command"
_FIXTURE_COMMANDS = "airflow_pydantic_ai.cli.fixture_command"
_RESOLVE_COMMAND = "airflow_pydantic_ai.cli.resolve_command"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"steps are numbered from 1, got {value}")
    return value


ARG_DAG_ID = Arg(("dag_id",), help="The dag id of the task instance")
ARG_RUN_ID = Arg(("run_id",), help="The run id of the DAG run")
ARG_TASK_ID = Arg(("task_id",), help="The task id")
ARG_MAP_INDEX = Arg(
    ("--map-index",), type=int, default=-1, help="The map index of a mapped task instance (default: -1, unmapped)"
)
ARG_ITERATION = Arg(
    ("--iteration",),
    type=int,
    default=None,
    metavar="N",
    help="The loop iteration (0-based) of a task inside an Airflow 3.4 task-group loop (cache list shows them)",
)
ARG_FILTER_DAG_ID = Arg(("dag_id",), nargs="?", default=None, help="Only the caches of this dag")
ARG_FILTER_RUN_ID = Arg(("run_id",), nargs="?", default=None, help="Only the caches of this DAG run (after DAG_ID)")
ARG_FILTER_TASK_ID = Arg(("task_id",), nargs="?", default=None, help="Only the caches of this task (after RUN_ID)")
# The options that named the ids in 0.2, still accepted but not shown (cli/spellings.py reads them).
ARG_OLD_DAG_ID = Arg(("--dag-id",), dest="old_dag_id", help=argparse.SUPPRESS)
ARG_OLD_RUN_ID = Arg(("--run-id",), dest="old_run_id", help=argparse.SUPPRESS)
ARG_OLD_TASK_ID = Arg(("--task-id",), dest="old_task_id", help=argparse.SUPPRESS)
ARG_OLDER_THAN = Arg(
    ("--older-than",),
    metavar="AGE",
    help="Only caches last written longer ago than AGE: a number and a unit, s, m, h, d or w (e.g. 7d, 12h)",
)
ARG_STEP = Arg(("--step",), type=_positive, metavar="N", help="Print step N decoded (numbered as in the listing)")
ARG_FULL = Arg(("--full",), action="store_true", help="With --step: print the whole entry, however large")
ARG_RAW = Arg(
    ("--raw",),
    action="store_true",
    help='With --step: print the recorded value as stored (the cache\'s tagged form, {"type": ..., "value": ...})',
)
ARG_CALLS = Arg(
    ("--calls",),
    action="store_true",
    help=(
        "List the at_most_once() tool calls instead of the steps: each start, its try and time, and whether it "
        "finished, was cut off (its outcome unknown) or was answered since (-o json for scripts)"
    ),
)
ARG_FROM_STEP = Arg(
    ("--from-step",),
    type=_positive,
    metavar="N",
    help="Delete step N and every later step only: the next try replays steps 1..N-1 and runs live from step N",
)
ARG_DRY_RUN = Arg(("--dry-run",), action="store_true", help="Print what would be deleted; delete nothing")
ARG_FORCE = Arg(
    ("--force",),
    action="store_true",
    help="Delete even while the task instance is active (running, queued, deferred, awaiting input...)",
)
ARG_DEST = Arg(("dest",), metavar="DEST", help="The fixture folder to write the task's fixture into (one per DAG)")
ARG_VERIFY_RUN_ID = Arg(
    ("run_id",), nargs="?", default=None, help="The DAG run whose kept caches to verify (none with --fixtures)"
)
ARG_FIXTURES = Arg(
    ("--fixtures",),
    metavar="FOLDER",
    help="Verify the fixtures in FOLDER instead of a run's caches: DAG_ID [TASK_ID] --fixtures FOLDER",
)
ARG_VERIFY_TASK_ID = Arg(
    ("task_id",), nargs="?", default=None, help="Only this agent task (default: every agent task of the DAG)"
)
ARG_SUBDIR = Arg(
    ("--subdir",), metavar="PATH", help="The DAG file or folder to load the DAG from (default: [core] dags_folder)"
)
ARG_CALL = Arg(
    ("--call",),
    required=True,
    metavar="REF",
    help="The call in doubt: the start of its key (its ref, as the task log and the error show it) or its tool call id",
)
ARG_HAPPENED = Arg(
    ("--happened",),
    action="store_true",
    help="Its side effect happened: the call is not run again, and the model is given --result as what it returned",
)
ARG_RESULT = Arg(
    ("--result",),
    metavar="JSON_OR_TEXT",
    help="With --happened: what the call returned, given to the model (read as JSON when it parses, else as text)",
)
ARG_NO_RESULT = Arg(
    ("--no-result",),
    action="store_true",
    help="With --happened, instead of --result: its result is unknown; the model is told the call happened, its "
    "result is unknown, and not to call it again",
)
ARG_FORGET_CALLS_IN_DOUBT = Arg(
    ("--forget-calls-in-doubt",),
    action="store_true",
    help="Delete a cache that holds a call in doubt (an at_most_once() call a try started and never finished) all "
    "the same, naming each call: a later try may run it again. Without it such a cache is kept",
)
ARG_RERUN = Arg(("--rerun",), action="store_true", help="Run the call once more (its side effect may happen twice)")
ARG_FAIL = Arg(("--fail",), action="store_true", help="Fail the task when a try reaches the call")

CACHE_COMMANDS = (
    ActionCommand(
        name="list",
        help="List the durable caches under durable_cache_path, one row per task instance",
        func=lazy_load_command(f"{_COMMANDS}.cache_list"),
        args=(
            ARG_FILTER_DAG_ID,
            ARG_FILTER_RUN_ID,
            ARG_FILTER_TASK_ID,
            ARG_OLDER_THAN,
            ARG_OUTPUT,
            ARG_OLD_DAG_ID,
            ARG_OLD_RUN_ID,
            ARG_OLD_TASK_ID,
        ),
    ),
    ActionCommand(
        name="show",
        help="Show the steps of a task instance's durable cache in recorded order, or one step decoded",
        func=lazy_load_command(f"{_TASK_COMMANDS}.cache_show"),
        args=(
            ARG_DAG_ID,
            ARG_RUN_ID,
            ARG_TASK_ID,
            ARG_MAP_INDEX,
            ARG_ITERATION,
            ARG_STEP,
            ARG_FULL,
            ARG_RAW,
            ARG_CALLS,
            ARG_OUTPUT,
        ),
    ),
    ActionCommand(
        name="rm",
        help="Delete a task instance's durable cache (its next try runs live), or only from step N on",
        func=lazy_load_command(f"{_TASK_COMMANDS}.cache_rm"),
        args=(
            ARG_DAG_ID,
            ARG_RUN_ID,
            ARG_TASK_ID,
            ARG_MAP_INDEX,
            ARG_ITERATION,
            ARG_FROM_STEP,
            ARG_DRY_RUN,
            ARG_YES,
            ARG_FORCE,
            ARG_FORGET_CALLS_IN_DOUBT,
        ),
    ),
    ActionCommand(
        name="resolve",
        help=(
            "Record what happened to an at_most_once() tool call a try started and never finished (it happened, "
            "with its result; run it again; or fail the task); the next try applies it"
        ),
        func=lazy_load_command(f"{_RESOLVE_COMMAND}.cache_resolve"),
        args=(
            ARG_DAG_ID,
            ARG_RUN_ID,
            ARG_TASK_ID,
            ARG_CALL,
            ARG_HAPPENED,
            ARG_RESULT,
            ARG_NO_RESULT,
            ARG_RERUN,
            ARG_FAIL,
            ARG_MAP_INDEX,
            ARG_ITERATION,
        ),
    ),
    ActionCommand(
        name="gc",
        help=(
            "Delete every durable cache no task instance will read again (succeeded, failed for good, "
            "removed, skipped, or its DAG run deleted)"
        ),
        func=lazy_load_command(f"{_COMMANDS}.cache_gc"),
        args=(ARG_OLDER_THAN, ARG_DRY_RUN, ARG_YES, ARG_OUTPUT, ARG_FORGET_CALLS_IN_DOUBT),
    ),
    ActionCommand(
        name="export",
        help="Write a task instance's kept cache as a test fixture (readable JSON, no run id, secrets masked)",
        func=lazy_load_command(f"{_FIXTURE_COMMANDS}.cache_export"),
        args=(ARG_DAG_ID, ARG_RUN_ID, ARG_TASK_ID, ARG_DEST, ARG_MAP_INDEX),
    ),
    ActionCommand(
        name="verify",
        help=(
            "Replay a run's kept caches or a fixture folder against the DAG's current code, calling no model and "
            "no tool: per task, 'replays cleanly' or the first step that diverges and why (exit code 1)"
        ),
        func=lazy_load_command(f"{_FIXTURE_COMMANDS}.cache_verify"),
        args=(
            ARG_DAG_ID,
            ARG_VERIFY_RUN_ID,
            ARG_VERIFY_TASK_ID,
            ARG_FIXTURES,
            ARG_MAP_INDEX,
            ARG_SUBDIR,
            ARG_OLD_TASK_ID,
        ),
    ),
)


def get_cli_commands() -> list[CLICommand]:
    """The provider's commands, for Airflow's ``cli`` provider entry: ``airflow pydantic-ai cache ...``."""
    return [
        GroupCommand(
            name="pydantic-ai",
            help="Manage airflow-pydantic-ai (durable agent caches)",
            subcommands=[
                GroupCommand(
                    name="cache",
                    help=(
                        "List, show, delete, clean up, export and verify the durable caches of agent tasks, and "
                        "resolve calls whose outcome is unknown"
                    ),
                    subcommands=CACHE_COMMANDS,
                )
            ],
        )
    ]
