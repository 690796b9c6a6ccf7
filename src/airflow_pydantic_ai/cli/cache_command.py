"""``airflow pydantic-ai cache list|show|rm|gc``: look at, delete and clean up durable caches.

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
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_pydantic_ai.cache_tools import task_states
from airflow_pydantic_ai.cache_tools.access import STEP_LIMIT, CacheAccess, ShownCall
from airflow_pydantic_ai.cache_tools.doubts import FORGET_FLAG, doubts_of, named_calls
from airflow_pydantic_ai.cli.mistakes import _UserError
from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.read import CacheSummary, list_caches
from airflow_pydantic_ai.durable.read import plural as _plural  # one wording of counts with the task log

__all__ = ["cache_gc", "cache_list", "cache_rm", "cache_show"]

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
"""The fields of ``cache list -o json|yaml``."""
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
"""The columns of ``cache list``'s table: what fits a terminal; the location is in ``-o json`` and ``cache show``."""
CALL_TABLE_COLUMNS = ("ref", "tool", "call_id", "state", "attempt", "started_at", "answer", "answered_by")
"""The columns of ``cache show --calls``'s table (JSON and YAML hold every field: arguments, result, the command)."""
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


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


def _print_latest_try(access: CacheAccess) -> None:
    """The latest try's summary and how it ended (as the view shows them), on stderr beside the location."""
    from airflow_pydantic_ai.durable.read import latest_attempt

    latest = latest_attempt(access.store)
    if latest is None:
        return
    print(f"Latest try {latest.attempt}: {latest.summary}", file=sys.stderr)
    if latest.ending is not None:
        print(f"How it ended: {latest.ending.describe()}", file=sys.stderr)


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


# --- list ----------------------------------------------------------------------------------------


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


def _configured(func: Callable[[Any], None]) -> Callable[[Any], None]:
    """Load the providers' configuration first (so ``[pydantic_ai]`` defaults are known), as Airflow's commands do."""
    from airflow.utils.providers_configuration_loader import providers_configuration_loaded

    return providers_configuration_loaded(func)


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


# --- show ----------------------------------------------------------------------------------------


@_configured
def cache_show(args: Any) -> None:
    """The steps of one task instance's cache, or one step decoded."""
    with _user_errors():
        if args.calls and args.step is not None:
            raise _UserError("--calls lists the at_most_once() calls; --step shows one step: give one of them")
        access = _open(_identity(args))
        if args.calls:
            print(f"Cache at {access.location}", file=sys.stderr)
            calls = access.calls()
            if args.output in ("json", "yaml"):
                _print_rows([call.as_row() for call in calls], args.output)
                return
            # A table that fits a terminal; each command on a line of its own, never wrapped inside a cell.
            _print_rows([{key: call.as_row()[key] for key in CALL_TABLE_COLUMNS} for call in calls], args.output)
            for call in calls:
                if call.resolve:
                    print(f"resolve {call.call.ref}: {call.resolve}")
            return
        if args.step is None:
            print(f"Cache at {access.location}", file=sys.stderr)  # stdout stays the table or document
            _print_latest_try(access)
            with access.reader.one_survey():  # the steps and the calls from one read of the store
                steps = access.reader.steps()
                doubts = [shown for shown in access.calls() if shown.call.in_doubt]
                pending = access.reader.pending_requests()
            _print_rows([step.as_row() for step in steps], args.output)
            if args.output in ("json", "yaml"):
                if doubts:  # the document stays the steps' rows; say where the calls are
                    print(
                        f"{_plural(len(doubts), 'call')} in doubt (started, cut off): add --calls to list them",
                        file=sys.stderr,
                    )
                return
            if steps:  # issue 22: what a retry replays, and saves
                from airflow_pydantic_ai.durable.read import replay_total

                print(replay_total([(step.kind, step.cost) for step in steps]))
            if pending:  # issue 38: requests a provider was given to work on (batches, background responses)
                print(f"\nRequests submitted to the provider ({len(pending)}):")
                for row in pending:
                    print(f"  {row.line()}")
            _print_calls_in_doubt(doubts)
            return
        try:
            info, text = access.render_step(
                args.step, limit=None if args.full else STEP_LIMIT, raw=args.raw, see_all="show it whole with --full"
            )
        except KeyError as error:
            raise _UserError(
                f"{error.args[0]}; it has {_plural(len(access.reader.steps()), 'step')} (see cache show)"
            ) from None
        header = (
            f"Step {info.number}: {info.kind} {info.shown_name or '-'} call_id={info.call_id or '-'} "
            f"attempt={info.attempt if info.attempt is not None else '-'} "
            f"recorded_at={info.recorded_at.isoformat() if info.recorded_at else '-'} bytes={info.size}"
        )
        print(header)
        if info.problem:
            print(f"This entry cannot be shown: {info.problem}")
            return
        print(text)


def _print_calls_in_doubt(doubts: list[ShownCall]) -> None:
    """After the steps: each at_most_once() call a try started and never finished, and how to resolve it."""
    if not doubts:
        return
    print(f"\nCalls in doubt ({len(doubts)}):")
    for shown in doubts:
        call = shown.call
        started = call.call.started
        print(f"  {call.ref}  tool {started.tool}  call {started.call_id or '-'}: {call.describe()}")
        print(f"      arguments: {shown.arguments}")
        if shown.result is not None:
            print(f"      result given: {shown.result}")
        if call.problem:
            print(f"      note: {call.problem}")
        if shown.resolve:
            print(f"      resolve: {shown.resolve}")


# --- rm ------------------------------------------------------------------------------------------


@_configured
def cache_rm(args: Any) -> None:
    """Delete one task instance's cache, or every step from ``--from-step`` on."""
    with _user_errors():
        identity = _identity(args)
        access = _open(identity)
        reader = access.reader
        state = task_states.state_of(identity)
        if task_states.is_active(state) and not args.force:
            raise _UserError(
                f"the task instance {_describe(identity)} is {state}: a try runs, is about to start or waits to "
                "resume from its cache (deleting it would run recorded steps live again). Wait until it has "
                "finished, or add --force"
            )
        location = access.location
        steps = reader.steps()
        if args.from_step is not None:
            doomed = [step for step in steps if step.number >= args.from_step]
            if not doomed:
                raise _UserError(
                    f"the cache at {location} has {_plural(len(steps), 'step')}; --from-step must be 1..{len(steps)}"
                )
            numbers = f"step {args.from_step}" if len(doomed) == 1 else f"steps {args.from_step}..{len(steps)}"
            what = f"{numbers} of the cache ({_size(sum(step.size for step in doomed))})"
        else:
            doomed = steps
            stored = _stored_size(identity)  # what list and gc say: every object, start marks and notes' entries too
            size = stored if stored is not None else sum(step.size for step in steps)
            what = f"the whole cache ({_plural(len(steps), 'step')}, {_size(size)} stored)"
        doubts = _doubts_forgotten(access, identity, args) if args.from_step is None else []
        if args.dry_run:
            print(f"Would delete {what} at {location} (dry run: nothing deleted)")
            _print_steps(doomed)
            if doubts:
                print(f"  and forget the calls in doubt: {named_calls(doubts)}")
            return
        _confirm(f"{what} at {location}", args.yes)
        if args.from_step is not None:
            reader.delete_from(args.from_step)
            print(f"Deleted {what} at {location}; the next try replays steps 1..{args.from_step - 1}")
        else:
            reader.delete_all()
            print(f"Deleted {what} at {location}; the next try runs every step live")
            if doubts:
                print(f"Forgot the calls in doubt ({FORGET_FLAG}): {named_calls(doubts)}")


def _doubts_forgotten(access: CacheAccess, identity: TaskIdentity, args: Any) -> list[Any]:
    """The calls in doubt deleting the whole cache forgets; refused (naming each) without --forget-calls-in-doubt.
    ``cache rm --from-step`` keeps them: the start marks and answers are not numbered steps."""
    from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt, forgetting_refused
    from airflow_pydantic_ai.tries.lifecycle import cache_resolve_command

    doubts = calls_in_doubt(access.reader)
    if doubts and not getattr(args, "forget_calls_in_doubt", False):
        what = f"the cache of {_describe(identity)}"
        raise _UserError(forgetting_refused(what, doubts, cache_resolve_command(identity)))
    return doubts


def _stored_size(identity: Any) -> int | None:
    """The bytes the task instance's cache holds as ``cache list`` and ``gc`` count them (None: not listed)."""
    base = _base()
    segments = tuple(identity.segments())
    for cache in list_caches(base.fs, base.root, base.url, within=segments[:3]):
        if cache.segments == segments:
            return cache.size
    return None


def _print_steps(steps: list[Any]) -> None:
    for step in steps:
        print(f"  step {step.number}: {step.kind} {step.shown_name or '-'} ({_size(step.size)})")


# --- gc ------------------------------------------------------------------------------------------


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


def _say(message: str, output: str) -> None:
    """A closing line: on stdout after a table, on stderr after JSON or YAML (which must stay parseable)."""
    print(message, file=sys.stdout if output in ("table", "plain") else sys.stderr)
