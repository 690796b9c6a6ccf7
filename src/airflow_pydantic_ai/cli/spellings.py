"""One convention for the ids of the cache commands: ``DAG_ID RUN_ID TASK_ID``, as arguments, in that order.

``show``, ``rm`` and ``export`` always took them so; ``list`` takes them as a filter (``list DAG_ID``, ``list DAG_ID
RUN_ID``...) and ``verify`` as what to verify (``verify DAG_ID RUN_ID TASK_ID``, or ``verify DAG_ID [TASK_ID]
--fixtures FOLDER``, where no run is involved). The options that named them in 0.2 (``list --dag-id / --run-id /
--task-id``, ``verify --task-id``) are still accepted, hidden from ``--help``: :func:`adopt_older_spellings` moves
their values onto the arguments and says on stderr how to write the command now.
"""

from __future__ import annotations

import sys
from typing import Any

from airflow_pydantic_ai.cli.mistakes import _UserError

__all__ = ["adopt_older_spellings", "verify_target"]

_IDS = ("dag_id", "run_id", "task_id")
_IDS_SHOWN = {"list": "[DAG_ID [RUN_ID [TASK_ID]]]", "verify": "DAG_ID RUN_ID TASK_ID"}
_FIXTURE_IDS = "DAG_ID TASK_ID --fixtures FOLDER"


def adopt_older_spellings(args: Any, command: str) -> None:
    """Give ``args.dag_id`` / ``run_id`` / ``task_id`` the values of their 0.2 options (``args.old_*``), if given.

    An id given both ways must agree; every 0.2 option used gets one note on stderr (stdout stays the output).
    """
    for name in _IDS:
        old = getattr(args, f"old_{name}", None)
        if old is None:
            continue
        option = "--" + name.replace("_", "-")
        given = getattr(args, name, None)
        if given is not None and given != old:
            raise _UserError(f"{name.upper()} is {given!r} and {option} is {old!r}; give it once, as {name.upper()}")
        setattr(args, name, old)
        ids = _FIXTURE_IDS if getattr(args, "fixtures", None) else _IDS_SHOWN[command]
        print(
            f"note: `cache {command} {option}` is deprecated; give the ids as arguments: cache {command} {ids}",
            file=sys.stderr,
        )


def verify_target(args: Any) -> None:
    """Read ``verify``'s arguments: with ``--fixtures`` there is no run, so an id after ``DAG_ID`` is the task's."""
    adopt_older_spellings(args, "verify")
    if args.fixtures is None or args.run_id is None:
        return
    if args.task_id is not None:
        raise _UserError(
            f"with --fixtures there is no run to name: cache verify {args.dag_id} [TASK_ID] --fixtures {args.fixtures}"
        )
    args.run_id, args.task_id = None, args.run_id
