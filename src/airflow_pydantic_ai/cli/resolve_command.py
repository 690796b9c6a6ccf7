"""``airflow pydantic-ai cache resolve``: record what happened to a call whose outcome is unknown.

A call is in doubt when an earlier try started an ``at_most_once()`` tool call and was cut off before it finished
(``cache_tools/doubts.py``). ``resolve DAG RUN TASK --call REF`` records the answer a person would give on the
task's Required Actions page: ``--happened`` (with ``--result``, what the model is told the call returned),
``--happened --no-result`` (its result is unknown: the model is told so, and not to call it again),
``--rerun`` (run it once more) or ``--fail`` (fail the task). The next try that reaches the call applies it; the
command says how to start that try. The entry is written through the task's own store (same prefix, same
Fernet cipher when ``durable_encrypt`` is on).
"""

from __future__ import annotations

import getpass
import sys
import time
from typing import TYPE_CHECKING, Any, cast

from airflow_pydantic_ai.cli.cache_shared import _configured, _describe, _identity, _open, _user_errors, _UserError

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.side_effects import Answer

__all__ = ["cache_resolve", "resolved_via"]


def resolved_via() -> str:
    """How an answer given from a shell reached the cache (a ``Resolution``'s ``via``): this command, as this
    Airflow spells it (``airflow pydantic-ai cache resolve``; ``airflow-pydantic-ai cache resolve`` on 3.1)."""
    from airflow_pydantic_ai import _compat

    return " ".join([*_compat.cli_command_prefix(), "cache", "resolve"])


"""How an answer recorded by this command reached the task (a ``Resolution``'s ``via``)."""


def _answer(args: Any) -> Answer:
    chosen = [name for name in ("happened", "rerun", "fail") if getattr(args, name)]
    if len(chosen) != 1:
        raise _UserError(
            "say what happened to the call: --happened --result JSON_OR_TEXT (it happened; the model is given the "
            "result), --happened --no-result (it happened, its result is unknown), --rerun (run it once more) or "
            "--fail (fail the task); exactly one"
        )
    no_result = getattr(args, "no_result", False)
    if (args.result is not None or no_result) and chosen != ["happened"]:
        raise _UserError("--result and --no-result go with --happened (what the model is given for the call)")
    if chosen == ["happened"] and (args.result is None) == (not no_result):
        raise _UserError(
            "--happened needs the result the model is given: --result JSON_OR_TEXT, or --no-result when its result "
            "is unknown (the model is then told: the call happened, its result is unknown, do not call it again); "
            "exactly one"
        )
    return cast("Answer", chosen[0])


def _given(text: str) -> Any:
    """The result typed for --happened; JSON ``null`` is refused (the model would read None and call again)."""
    from airflow_pydantic_ai.durable.side_effects import parse_result

    value = parse_result(text)
    if value is None:
        raise _UserError("--result null gives the model no result: give what the call returned, or use --no-result")
    return value


def _listing(doubts: list[Any]) -> str:
    lines = []
    for doubt in doubts:
        state = doubt.resolution.describe() if doubt.resolution is not None else "not answered"
        lines.append(f"  ref {doubt.ref}: {doubt.describe()}; {state}")
    return "\n".join(lines)


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without one): the answer names nobody
        return None


@_configured
def cache_resolve(args: Any) -> None:
    """Record the answer about one call in doubt of a task instance's cache."""
    from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt, find_call
    from airflow_pydantic_ai.durable.side_effects import Resolution, resolution_entry

    with _user_errors():
        answer = _answer(args)
        identity = _identity(args)
        access = _open(identity)
        doubts = calls_in_doubt(access.reader, warn=lambda message: print(f"warning: {message}", file=sys.stderr))
        if not doubts:
            raise _UserError(
                f"the cache of {_describe(identity)} holds no call in doubt (an at_most_once() call a try started "
                f"and never finished), so there is nothing to resolve (looked at {access.location}). An answer a try "
                "has used is the call's own step by then (cache show lists it): to run that call again, delete the "
                "cache from its step (cache rm --from-step N)"
            )
        matches = find_call(doubts, args.call)
        if len(matches.found) != 1:
            problem = (
                "matches no call in doubt" if not matches.found else "names more than one call: give more of the ref"
            )
            raise _UserError(
                f"--call {args.call!r} {problem}. The calls in doubt of {_describe(identity)}:\n" + _listing(doubts)
            )
        doubt = matches.found[0]
        who: dict[str, Any] = {"answered_by": _os_user(), "via": resolved_via(), "answered_at": time.time()}
        if answer == "happened" and getattr(args, "no_result", False):
            resolution = Resolution.happened_without_result(doubt.started, **who)
        elif answer == "happened":
            resolution = Resolution.happened(doubt.started, _given(args.result), **who)
        else:
            resolution = Resolution(answer, doubt.started.attempt, doubt.started.started_at, **who)
        access.store.put(resolution_entry(doubt, resolution))
        replaced = f" (replacing: {doubt.resolution.describe()})" if doubt.resolution is not None else ""
        started = f"started by {doubt.started.by}"
        print(f"Recorded for {doubt.label} (ref {doubt.ref}, {started}): {resolution.describe()}{replaced}")
        print(_next_step(identity, answer, doubt.ref))


def _next_step(identity: Any, answer: str, ref: str) -> str:
    from airflow_pydantic_ai.cache_tools import task_states

    try:
        state = task_states.state_of(identity)
        waiting = task_states.waiting_for(identity) if state in ("awaiting_input", "deferred") else None
    except Exception:  # the metadata database is out of reach here: the answer is recorded all the same
        state, waiting = "", None
    applies = {
        "happened": "the call is not run again and the model is given the result",
        "rerun": "the call runs once more",
        "fail": "the task fails, naming the call",
    }[answer]
    if state in ("awaiting_input", "deferred"):
        asked = waiting is not None and ref in waiting.doubts
        ends = (
            f" or when its approval_timeout passes (then this one applies: {applies})"
            if waiting is not None and waiting.has_timeout
            else ""
        )
        question = (
            "its question about this call is answered on the Required Actions page (an answer there replaces this one)"
            if asked
            else "its question is answered on the Required Actions page (the question is not about this call: this "
            f"answer applies when the task reaches the call: {applies})"
        )
        return f"The task instance is {state}: it resumes when {question}{ends}."
    where = f"The task instance is {state}. " if state else ""
    return (
        f"{where}The next try that reaches the call applies it ({applies}): clear the task instance, or let its next "
        "retry run."
    )
