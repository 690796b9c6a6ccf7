"""``airflow pydantic-ai cache show|rm``: the commands on one task instance's cache; it is opened and its steps
rendered as the UI view renders them (:mod:`~airflow_pydantic_ai.cache_tools.access`), and what its task instance's
state allows is decided as the view decides it (:mod:`~airflow_pydantic_ai.cache_tools.task_states`). The commands
over every cache (``list``, ``gc``) are in ``cache_command.py``, what they all share in ``cache_shared.py``.
"""

from __future__ import annotations

import sys
from typing import Any

from airflow_pydantic_ai.cache_tools import task_states
from airflow_pydantic_ai.cache_tools.access import STEP_LIMIT, CacheAccess, ShownCall
from airflow_pydantic_ai.cache_tools.doubts import FORGET_FLAG, named_calls
from airflow_pydantic_ai.cli.cache_shared import (
    _base,
    _configured,
    _confirm,
    _describe,
    _identity,
    _open,
    _print_rows,
    _size,
    _user_errors,
    _UserError,
)
from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.read import list_caches
from airflow_pydantic_ai.durable.read import plural as _plural  # one wording of counts with the task log

__all__ = ["CALL_TABLE_COLUMNS", "cache_rm", "cache_show"]

CALL_TABLE_COLUMNS = ("ref", "tool", "call_id", "state", "attempt", "started_at", "answer", "answered_by")


def _print_latest_try(access: CacheAccess) -> None:
    """The latest try's summary and how it ended (as the view shows them), on stderr beside the location."""
    from airflow_pydantic_ai.durable.read import latest_attempt

    latest = latest_attempt(access.store)
    if latest is None:
        return
    print(f"Latest try {latest.attempt}: {latest.summary}", file=sys.stderr)
    if latest.ending is not None:
        print(f"How it ended: {latest.ending.describe()}", file=sys.stderr)


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
