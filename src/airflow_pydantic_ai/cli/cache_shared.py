"""What every ``airflow pydantic-ai`` cache command shares (``cache_command.py``: list and gc;
``task_cache_command.py``: show and rm; ``fixture_command.py``; ``resolve_command.py``): user errors as one line and
exit code 1, the output formats, the task instance the arguments name and its cache opened as the view opens it,
and the confirmation before deleting.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_pydantic_ai.cache_tools.access import CacheAccess
from airflow_pydantic_ai.cli.mistakes import _UserError
from airflow_pydantic_ai.durable import TaskIdentity

__all__ = [
    "_UserError",
    "_base",
    "_configured",
    "_confirm",
    "_describe",
    "_identity",
    "_one_line",
    "_open",
    "_print_rows",
    "_say",
    "_size",
    "_user_errors",
]


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn configuration, storage and input errors into one line on stderr and exit code 1."""
    from sqlalchemy.exc import SQLAlchemyError

    from airflow_pydantic_ai.cache_tools.access import OutsideCacheBase
    from airflow_pydantic_ai.durable.errors import DurableConfigError, describe_error

    try:
        yield
    except (_UserError, DurableConfigError, OutsideCacheBase) as error:
        raise SystemExit(f"error: {_one_line(str(error))}") from None
    except (OSError, TimeoutError) as error:
        raise SystemExit(f"error: the durable cache cannot be reached: {_one_line(describe_error(error))}") from None
    except SQLAlchemyError as error:  # e.g. gc on a worker that has no access to Airflow's database
        raise SystemExit(
            "error: the task instance states cannot be read from Airflow's metadata database "
            f"({_one_line(describe_error(error)).split(' [SQL:', 1)[0]}); run the command where [database] "
            "sql_alchemy_conn reaches the scheduler's database"
        ) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _base() -> Any:
    from airflow_pydantic_ai.tries.settings import open_cache_base

    return open_cache_base()


def _console() -> Any:
    from airflow.cli.simple_table import AirflowConsole

    return AirflowConsole()


def _print_rows(rows: list[dict[str, Any]], output: str) -> None:
    """Rows as a table through Airflow's formatter, or as JSON or YAML with numbers kept as numbers.

    Airflow's formatter turns every value into a string (``"bytes": "3681"``), which scripts then have
    to convert back. The document is the text the formatter would print (highlighted on a terminal);
    off a terminal it is written as it is, since highlighting 1,000 rows nobody sees takes a second.
    """
    if output not in ("json", "yaml"):
        _console().print_as(data=rows, output=output)
        return
    if output == "json":
        document = json.dumps(rows)
    else:
        from airflow.utils import yaml

        document = yaml.dump(rows)
    if sys.stdout.isatty():
        from rich.syntax import Syntax

        _console().print(Syntax(document, output, theme="ansi_dark"), soft_wrap=True)
    else:
        print(document)


def _identity(args: Any) -> TaskIdentity:
    """The task instance the arguments name; with ``--iteration``, its cache in that loop iteration (Airflow 3.4)."""
    from airflow_pydantic_ai.cache_tools.access import NoSuchIteration, open_cache

    iteration = getattr(args, "iteration", None)
    if iteration is None:
        return TaskIdentity(dag_id=args.dag_id, run_id=args.run_id, task_id=args.task_id, map_index=args.map_index)
    try:
        return open_cache(args.dag_id, args.run_id, args.task_id, args.map_index, iteration=iteration).identity
    except NoSuchIteration as error:
        raise _UserError(str(error)) from None


def _iterations_hint(identity: TaskIdentity) -> str:
    """For a task whose plain cache is missing: the loop iterations it left caches in, if any."""
    from airflow_pydantic_ai.cache_tools.access import loop_caches

    caches = loop_caches(_base(), identity.dag_id, identity.run_id, identity.task_id, identity.map_index)
    iterations = sorted({cache.iteration for cache in caches if cache.iteration is not None})
    if not iterations:
        return ""
    return f"; it ran in a loop and has caches of loop iterations {', '.join(map(str, iterations))}: add --iteration N"


def _describe(identity: TaskIdentity) -> str:
    return identity.describe()


def _open(identity: TaskIdentity) -> CacheAccess:
    """The task instance's cache, opened as the view opens it; :class:`_UserError` when there is none."""
    from airflow_pydantic_ai.cache_tools.access import open_cache

    iteration = identity.region.iteration if identity.region is not None else None
    access = open_cache(identity.dag_id, identity.run_id, identity.task_id, identity.map_index, iteration=iteration)
    if not access.reader.exists():
        hint = _iterations_hint(identity) if identity.region is None else ""
        raise _UserError(f"no durable cache for {_describe(identity)} (looked at {access.location}){hint}")
    return access


def _confirm(what: str, yes: bool) -> None:
    """Ask before deleting ``what`` ("the whole cache (3 steps, 1234 bytes) at ..."), unless ``--yes``."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise _UserError(f"deleting {what} needs a confirmation and there is no terminal to ask on; add --yes")
    answer = input(f"Delete {what}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise SystemExit("Cancelled; nothing was deleted.")


def _size(count: int) -> str:
    return f"{count} byte" if count == 1 else f"{count} bytes"


def _say(message: str, output: str) -> None:
    """A closing line: on stdout after a table, on stderr after JSON or YAML (which must stay parseable)."""
    print(message, file=sys.stdout if output in ("table", "plain") else sys.stderr)


def _configured(func: Callable[[Any], None]) -> Callable[[Any], None]:
    """Load the providers' configuration first (so ``[pydantic_ai]`` defaults are known), as Airflow's commands do."""
    from airflow.utils.providers_configuration_loader import providers_configuration_loaded

    return providers_configuration_loaded(func)
