"""``airflow pydantic-ai cache list|show|rm|gc``: look at, delete and clean up durable caches. This module holds
the commands over every cache under the base (``list``, ``gc``); ``task_cache_command.py`` those on one task
instance's cache (``show``, ``rm``: importable from here too), ``cache_shared.py`` what every command shares.

Every command opens the cache location exactly as a task does
(:func:`~airflow_pydantic_ai.tries.settings.open_cache_base`: the same URL resolution, connection,
Fernet cipher and timeout), so a misconfiguration gives the task's error; one task instance's cache
is opened and its steps rendered as the UI view does (:mod:`~airflow_pydantic_ai.cache_tools.access`), and
what a task instance's state allows is decided as the view decides it
(:mod:`~airflow_pydantic_ai.cache_tools.task_states`).

Exit codes: 0 on success; 1 with a one-line ``error: ...`` naming what to fix on any user error
(no traceback). Deleting asks for confirmation unless ``--yes``; with no terminal to ask on, it
fails and says to add ``--yes``. Nothing outside the configured prefix is ever deleted: ``rm``
deletes one task instance's prefix, ``gc`` only caches found under the base.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from typing import Any

from airflow_pydantic_ai.cache_tools import task_states
from airflow_pydantic_ai.cache_tools.doubts import FORGET_FLAG, doubts_of
from airflow_pydantic_ai.cli.cache_shared import (
    _base,
    _configured,
    _confirm,
    _one_line,
    _print_rows,
    _say,
    _size,
    _user_errors,
    _UserError,
)
from airflow_pydantic_ai.cli.task_cache_command import cache_rm, cache_show  # the commands' module before the split
from airflow_pydantic_ai.durable.read import CacheSummary, list_caches
from airflow_pydantic_ai.durable.read import plural as _plural  # one wording of counts with the task log

__all__ = ["LIST_COLUMNS", "TABLE_COLUMNS", "cache_gc", "cache_list", "cache_rm", "cache_show", "parse_age"]

LIST_COLUMNS = (
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
)


TABLE_COLUMNS = (
    "dag_id",
    "run_id",
    "task_id",
    "map_index",
    "entries",
    "bytes",
    "last_written",
    "task_state",
    "calls_in_doubt",
)


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> dt.timedelta:
    """``7d`` -> 7 days; raises :class:`_UserError` naming the expected form."""
    match = _AGE.match(text or "")
    if not match:
        raise _UserError(f"--older-than {text!r} is not an age; write a number and a unit: 90s, 30m, 12h, 7d or 2w")
    return dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _older_than(cache: CacheSummary, cutoff: dt.datetime | None) -> bool:
    if cutoff is None:
        return True
    return cache.last_written is not None and cache.last_written < cutoff


def _cutoff(age: str | None) -> dt.datetime | None:
    return None if age is None else dt.datetime.now(tz=dt.UTC) - parse_age(age)


def _catalog(base: Any) -> list[CacheSummary]:
    return list_caches(base.fs, base.root, base.url)


def _list_row(cache: CacheSummary, state: str, doubts: int = 0) -> dict[str, Any]:
    return {
        "dag_id": cache.dag_id,
        "run_id": cache.run_id,
        "task_id": cache.task_id,
        "map_index": cache.map_index,
        "iteration": cache.iteration,
        "entries": cache.entries,
        "model_steps": cache.model_steps,
        "tool_steps": cache.tool_steps,
        "bytes": cache.size,
        "last_written": cache.last_written.isoformat() if cache.last_written else None,
        "task_state": state,
        "calls_in_doubt": doubts,
        "location": cache.location,
    }


@_configured
def cache_list(args: Any) -> None:
    """Every cache under ``durable_cache_path``, one row per task instance."""
    from airflow_pydantic_ai.cli.spellings import adopt_older_spellings

    with _user_errors():
        adopt_older_spellings(args, "list")
        cutoff = _cutoff(args.older_than)
        caches = [
            cache
            for cache in _catalog(_base())
            if cache.matches(args.dag_id, args.run_id, args.task_id) and _older_than(cache, cutoff)
        ]
        states = task_states.states_of(caches)
        base = _base()
        doubts: dict[tuple[str, ...], int] = {cache.segments: len(doubts_of(cache, base)) for cache in caches}
        _print_rows(_rows(caches, states, args.output, doubts), args.output)


def _rows(
    caches: list[CacheSummary],
    states: dict[tuple[str, ...], str],
    output: str,
    doubts: dict[tuple[str, ...], int],
) -> list[dict[str, Any]]:
    """The rows of ``cache list`` (and of ``gc``): every field in JSON and YAML; in a table :data:`TABLE_COLUMNS`,
    and the loop iteration only where a cache is a loop's. ``doubts``: each cache's count of calls in doubt."""
    rows = [_list_row(cache, states[cache.segments], doubts.get(cache.segments, 0)) for cache in caches]
    if output in ("json", "yaml"):
        return rows
    looped = any(cache.iteration is not None for cache in caches)
    return [_table_row(row, cache, looped=looped) for row, cache in zip(rows, caches, strict=True)]


def _table_row(row: dict[str, Any], cache: CacheSummary, *, looped: bool = False) -> dict[str, Any]:
    """A row of ``cache list``'s table: :data:`TABLE_COLUMNS` (``iteration`` after the map index where ``looped``),
    the time to the second (UTC)."""
    columns = (*TABLE_COLUMNS[:4], "iteration", *TABLE_COLUMNS[4:]) if looped else TABLE_COLUMNS
    shown = {column: row[column] for column in columns}
    if cache.last_written is not None:
        shown["last_written"] = cache.last_written.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return shown


@_configured
def cache_gc(args: Any) -> None:
    """Delete every cache whose task instance will not read it again."""
    with _user_errors():
        cutoff = _cutoff(args.older_than)
        base = _base()
        caches = [cache for cache in _catalog(base) if _older_than(cache, cutoff)]
        states = task_states.states_of(caches)
        doomed = [cache for cache in caches if states[cache.segments] in task_states.DELETABLE_STATES]
        doubts = {cache.segments: found for cache in doomed if (found := doubts_of(cache, base))}
        forget = getattr(args, "forget_calls_in_doubt", False)
        if not forget:  # issue 35: a call in doubt is never forgotten without a word
            doomed = [cache for cache in doomed if cache.segments not in doubts]
        kept = len(caches) - len(doomed)
        freed = sum(cache.size for cache in doomed)
        rows = _rows(doomed, states, args.output, {key: len(found) for key, found in doubts.items()})
        _say_doubts(caches, doubts, forget=forget, output=args.output)
        if not doomed:
            if args.output in ("json", "yaml"):
                _print_rows([], args.output)  # a script parsing stdout gets an empty list
            _say(
                f"Nothing to delete: {_plural(kept, 'cache')} may still be read by their task instance "
                f"(looked under {base.url})",
                args.output,
            )
            return
        if args.dry_run:
            _print_rows(rows, args.output)
            _say(
                f"Would delete {_plural(len(doomed), 'cache')} under {base.url}, freeing {_size(freed)} "
                "(dry run: nothing deleted)",
                args.output,
            )
            return
        _confirm(f"{_plural(len(doomed), 'cache')} ({_size(freed)}) under {base.url}", args.yes)
        refused = _delete_each(doomed, base)
        deleted = [cache for cache in doomed if cache.segments not in refused]
        shown = [row for cache, row in zip(doomed, rows, strict=True) if cache.segments not in refused]
        _print_rows(shown, args.output)
        _say(
            f"Deleted {_plural(len(deleted), 'cache')} under {base.url}, freed "
            f"{_size(sum(cache.size for cache in deleted))}; kept {kept} that may still be read",
            args.output,
        )
        if refused:
            raise _UserError(
                f"{_plural(len(refused), 'cache')} refused and kept (named above); remove the links named, then run "
                "gc again"
            )


def _delete_each(doomed: list[CacheSummary], base: Any) -> set[tuple[str, str, str, str]]:
    """``cache gc``: delete each cache; one it refuses (a symbolic link in its folders) is named on stderr and kept,
    and the others are deleted all the same. Returns the refused ones."""
    from airflow_pydantic_ai.cache_tools.access import OutsideCacheBase

    refused: set[tuple[str, str, str, str]] = set()
    for cache in doomed:
        try:
            cache.store(base.fs, timeout=base.timeout).clear()
        except OutsideCacheBase as error:
            refused.add(cache.segments)
            print(f"error: kept {cache.location}: {_one_line(str(error))}", file=sys.stderr)
    return refused


def _say_doubts(
    caches: list[CacheSummary], doubts: dict[tuple[str, str, str, str], list[Any]], *, forget: bool, output: str
) -> None:
    """``cache gc``: the caches it keeps (or, with --forget-calls-in-doubt, deletes) for their calls in doubt."""
    from airflow_pydantic_ai.cache_tools.doubts import named_calls

    for cache in caches:
        found = doubts.get(cache.segments)
        if not found:
            continue
        fate = f"forgets ({FORGET_FLAG})" if forget else f"keeps (delete it with {FORGET_FLAG})"
        _say(f"{cache.location} holds calls in doubt, which gc {fate}: {named_calls(found)}", output)
