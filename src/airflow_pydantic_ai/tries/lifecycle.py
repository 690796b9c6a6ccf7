"""Starting and ending the attempt of a durable try: open the task instance's cache with the settings read
once (``settings.py``) and the answer to "which try is this" (``which_try.py``), run the agents inside
the attempt's block, note how a failed try ended, and have the cache deleted once Airflow stored the
task's success.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.tries.settings import (
    DurableArguments,
    DurableSettings,
    check_on_unknown_outcome,
    on_unknown_outcome_option,
)
from airflow_pydantic_ai.tries.which_try import (
    ThisTry,
    cache_belongs_to_this_dag_run,
    is_cleared_try,
    retries_an_earlier_try,
)

if TYPE_CHECKING:
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.durable import Attempt, TaskLogger
    from airflow_pydantic_ai.durable.side_effects import OutcomeRules
    from airflow_pydantic_ai.tries.modes import ModeSettings

__all__ = [
    "NO_PERSON_IN_A_PLAIN_TASK",
    "cache_resolve_command",
    "cache_rm_command",
    "delete_cache_after_success",
    "durable_attempt",
    "hint_at_retries",
    "note_how_the_try_ends",
    "outcome_rules",
    "span_attributes",
    "start_durable_run",
]


def cache_rm_command(identity: TaskIdentity) -> str:
    """The command that deletes ``identity``'s cache, ready to paste into a shell."""
    return _cache_command("rm", identity)


def cache_resolve_command(identity: TaskIdentity) -> str:
    """The command that records what happened to a call in doubt in ``identity``'s cache (``--call REF`` and the
    answer follow), ready to paste into a shell."""
    return _cache_command("resolve", identity)


def _cache_command(verb: str, identity: TaskIdentity) -> str:
    words = [*_compat.cli_command_prefix(), "cache", verb, identity.dag_id, identity.run_id, identity.task_id]
    if identity.map_index != -1:
        words += ["--map-index", str(identity.map_index)]
    if identity.region is not None and identity.region.iteration is not None:
        words += ["--iteration", str(identity.region.iteration)]
    return shlex.join(words)


NO_PERSON_IN_A_PLAIN_TASK = (
    "a plain @task with durable_attempt() has no human-in-the-loop step: use AgentOperator / @task.pydantic_ai, "
    "or on_unknown_outcome='fail'/'rerun'"
)
"""Why ``on_unknown_outcome='ask'`` fails in :func:`durable_attempt` (the error that fails the task says it)."""


def outcome_rules(choice: str | None, identity: TaskIdentity, *, no_person: str | None) -> OutcomeRules:
    """What this try does with an at-most-once call an earlier try started and never finished.

    ``choice``: the task's ``on_unknown_outcome`` (None: ``[pydantic_ai] durable_on_unknown_outcome``).
    ``no_person``: why nobody can be asked in this try; None when the task asks through human-in-the-loop
    (the operator), where Airflow offers it.
    """
    from airflow_pydantic_ai.approval.wait import why_no_human_in_the_loop
    from airflow_pydantic_ai.durable.side_effects import OutcomeRules

    why = no_person if no_person is not None else why_no_human_in_the_loop()
    return OutcomeRules(
        on_unknown=on_unknown_outcome_option(choice),  # type: ignore[arg-type]  # checked: ask, fail or rerun
        can_ask=not why,
        resolve_command=cache_resolve_command(identity),
        **({"why_no_person": why} if why else {}),
    )


def task_identity(ti: Any, context: Any = None) -> TaskIdentity:
    """The identity a task instance's cache is keyed by (the same for all of its tries).

    Inside an Airflow 3.4 loop it includes the task instance's region and the loop iteration, so that
    each iteration (and each map index of one) has a cache of its own.
    """
    map_index = getattr(ti, "map_index", None)
    region = _compat.task_region(ti, context)
    return TaskIdentity.of(ti.dag_id, ti.run_id, ti.task_id, -1 if map_index is None else int(map_index), region)


def span_attributes(ti: Any) -> dict[str, str | int]:
    """The task instance's identity under the attribute names of Airflow's own task span (``worker.<task_id>``),
    stamped on the agent's spans so that a trace backend joins them to the task."""
    map_index = getattr(ti, "map_index", None)
    return {
        "airflow.dag_id": str(ti.dag_id),
        "airflow.task_id": str(ti.task_id),
        "airflow.dag_run.run_id": str(ti.run_id),
        "airflow.task_instance.try_number": int(getattr(ti, "try_number", 0) or 0),
        "airflow.task_instance.map_index": -1 if map_index is None else int(map_index),
    }


def start_durable_run(
    context: Any,
    *,
    log: TaskLogger,
    arguments: DurableArguments | None = None,
    resuming: bool = False,
    modes: ModeSettings | None = None,
    usage_limits: UsageLimits | None = None,
    no_person: str | None = None,
    defer_pending: bool = False,
) -> Attempt:
    """Open the durable cache of the running task instance and start this try.

    ``resuming``: the try continues after a wait (an approval answered, in ``awaiting_input`` or deferred),
    so the cache holds this very try's steps and must be kept.

    ``arguments``: the task's ``durable_*`` arguments (``cache_path``; ``on_clear``, what a cleared try does
    with the cache where Airflow does not ask the person who cleared: see ``clear_policy.py`` and the
    durability guide's "When a person clears the task"; ``budget_across_tries``: ``usage_limits`` count across
    the tries of the task instance). None: the ``[pydantic_ai]`` options decide everything.

    ``modes``: the task's ``durable_mode`` and fixtures, read from ``arguments`` (``modes.py``).

    ``no_person``: why nobody can be asked about a call in doubt in this try (:func:`durable_attempt`); None:
    the task asks through human-in-the-loop (``on_unknown_outcome='ask'``, :func:`outcome_rules`).

    ``defer_pending``: the task can defer while a batch or background model request is pending (the operator),
    so the engine raises ``RequestPending`` after recording the submission instead of waiting on the worker.
    """
    # Here, not at the top: the cache commands import this module and never need pydantic-ai.
    from airflow_pydantic_ai.durable import Attempt, AttemptOptions
    from airflow_pydantic_ai.tries import cache_reach, clear_policy

    arguments = arguments if arguments is not None else DurableArguments()
    ti = context["ti"]
    settings = DurableSettings.read(arguments.cache_path)
    identity = task_identity(ti, context)
    store = settings.base.store_for(identity, warn=log.warning)
    delete_command = cache_rm_command(identity)
    log.info(
        "Durable: the cache of this task instance%s is %s (delete it to force a fresh run: %s)",
        f" ({identity.region.describe()})" if identity.region is not None else "",
        store.location,
        delete_command,
    )
    if not _compat.storage_conn_id(settings.base.path) and not store.is_local:
        log.info(
            "Durable: %s names no connection, so the worker's default credentials are used (environment, "
            "instance profile...); every worker must reach the same location with them",
            settings.base.url,
        )
    task = getattr(ti, "task", None)
    cache_reach.warn_when_a_retry_may_miss_the_cache(store, shared=settings.cache_shared, task=task, log=log)
    this_try = ThisTry.of(ti, resuming=resuming, reschedules=_compat.reschedule_count(context))
    across_tries = (
        settings.budget_across_tries if arguments.budget_across_tries is None else arguments.budget_across_tries
    )
    max_tries = getattr(ti, "max_tries", None)
    cleared = not this_try.resuming and is_cleared_try(ti)
    after_clear = clear_policy.decide_after_clear(context, arguments.on_clear, cleared=cleared)
    policy, recording = None, None
    if modes is not None:  # the policy, the fixture's steps
        policy, recording = modes.opening(store, identity, log)
    # A clear that starts over, or durable_mode = record: the attempt discards the cache but its calls in doubt.
    start_over = after_clear.why if after_clear is not None and after_clear.fresh else ""
    options = AttemptOptions(
        retry_coming=max_tries is None or this_try.try_number <= int(max_tries),
        takes_recorded_output=retries_an_earlier_try(ti),
        delete_hint=delete_command,
        probe=True,
        belongs=lambda tries: cache_belongs_to_this_dag_run(tries, this_try),
        redact=_compat.redact,
        storage_errors="fail" if settings.storage_errors == "fail" else "warn",
        max_entry_bytes=settings.max_entry_bytes,
        span_attributes=span_attributes(ti),  # issue 22
        budget=usage_limits if across_tries and usage_limits is not None else None,  # issue 22
        policy=policy,
        recording=recording,
        unknown_outcome=outcome_rules(arguments.on_unknown_outcome, identity, no_person=no_person),
        start_over=start_over or (modes.start_over if modes is not None else ""),
        defer_pending=defer_pending,
    )
    run = Attempt.open(store, attempt=this_try.try_number or 1, log=log, options=options)
    if after_clear is not None and not after_clear.fresh:
        steps = run.steps_found().recorded
        clear_policy.log_resume_after_clear(after_clear, steps, log)
    if modes is not None:
        modes.started(recording, log)
    return run


class DeleteDurableCache:
    """A success callback that deletes one try's durable cache (see :func:`delete_cache_after_success`)."""

    def __init__(self, run: Attempt) -> None:
        self.run = run

    def __call__(self, context: Any) -> None:
        self.run.finish()

    def __repr__(self) -> str:
        return f"<delete the durable cache at {self.run.location}>"


def delete_cache_after_success(task: Any, run: Attempt) -> None:
    """Have ``run``'s cache deleted from a success callback of ``task``: Airflow's task runner calls those only
    after the supervisor has stored the task's success (Airflow 3.1, 3.2 and 3.3 alike).

    ``task`` is this try's copy of the operator (the task runner executes a copy); the callback goes first in
    its list, before the DAG author's own callbacks.
    """
    callbacks = [
        callback for callback in task.on_success_callback or () if not isinstance(callback, DeleteDurableCache)
    ]
    task.on_success_callback = [DeleteDurableCache(run), *callbacks]


@contextmanager
def durable_attempt(
    context: Any = None,
    *,
    cache_path: str | None = None,
    log: TaskLogger | None = None,
    on_unknown_outcome: str | None = None,
) -> Iterator[Attempt]:
    """Make every agent run inside the block durable, in a plain ``@task`` (or any Python callable a task runs).

    Each agent that carries ``DurableCapability()`` (on the agent, or passed to its run) records its model
    requests and tool calls into this task instance's cache, the same cache the operator would use
    (``[pydantic_ai] durable_cache_path``, one prefix per task instance), and a retry replays them. Several
    agents one after another and delegates inside tools each get their own scope::

        @task(retries=2)
        def triage():
            with durable_attempt():
                summary = summarizer.run_sync("...").output
                return writer.run_sync(summary).output

    As in the operator, the cache is deleted once Airflow has recorded the task's success (a success callback);
    a task that fails after the block keeps it, and its retry replays the agents' steps. Compared with
    ``AgentOperator(durable=True)``: the task's return value is not recorded, so a retry after a worker was
    killed between the task's end and its recorded success replays the steps to rebuild it (the operator
    returns its recorded output); approvals (``requires_approval``) are not supported; use one block per
    task (a second block in the same try would find the first one's steps and discard them as another
    run's). The summary line ends every attempt, as in the operator.

    :param context: The task's Airflow context (default: the running task's, ``get_current_context()``).
    :param cache_path: Overrides ``[pydantic_ai] durable_cache_path`` for this task.
    :param log: Where the durable lines go (default: the task's own log, as an operator's).
    :param on_unknown_outcome: What an ``at_most_once()`` call an earlier try started and never finished does:
        ``"fail"`` (the task fails, naming the call and the ``cache resolve`` command) or ``"rerun"`` (it runs
        again, with a WARNING). Nobody can be asked here, so ``"ask"`` behaves as ``"fail"`` and says why.
        None: ``[pydantic_ai] durable_on_unknown_outcome``.
    """
    from airflow_pydantic_ai.durable import attempt_block
    from airflow_pydantic_ai.tries.report import publish_report

    if context is None:
        from airflow.sdk import get_current_context

        context = get_current_context()
    task_log = getattr(context.get("task"), "log", None) if hasattr(context, "get") else None
    logger: TaskLogger = log if log is not None else task_log or logging.getLogger("airflow.task")
    if on_unknown_outcome is not None:
        check_on_unknown_outcome(on_unknown_outcome, "durable_attempt(on_unknown_outcome=...) ")
    arguments = DurableArguments(cache_path=cache_path, on_unknown_outcome=on_unknown_outcome)
    run = start_durable_run(context, log=logger, arguments=arguments, no_person=NO_PERSON_IN_A_PLAIN_TASK)
    task = context.get("task") if hasattr(context, "get") else None
    # issue 22: the report as XCom durable_report and Airflow metrics; replayed steps kept out of telemetry
    run.when_ended(lambda report: publish_report(context, report, log=logger, push=getattr(task, "do_xcom_push", True)))
    from airflow_pydantic_ai.tries.modes import replay_misses_fail_at_once

    with replay_misses_fail_at_once(getattr(task, "task_id", "")), attempt_block(run):
        yield run
    if task is not None and hasattr(task, "on_success_callback"):
        delete_cache_after_success(task, run)
    else:
        run.finish()


def hint_at_retries(context: Any, *, log: Any, asks_for_approval: bool) -> None:
    """Say that ``retries=0`` leaves the cache unused, where it does: not for a task whose agent asks a
    person for approval (the try resumes from the cache after the wait), nor on a resumed try."""
    if asks_for_approval or getattr(context.get("task"), "retries", None) != 0:
        return
    if ThisTry.of(context["ti"], reschedules=_compat.reschedule_count(context)).resuming:
        return
    log.info(
        "Durable: this task has retries=0: a retry is what replays the recorded steps, so set retries >= 1 "
        "for durability to pay off (until then only clearing the task resumes from the cache)"
    )


@contextmanager
def note_how_the_try_ends(run: Attempt, *, log: Any) -> Iterator[None]:
    """Around a durable try: when it raises, note beside its cache how it ended (for the UI view).

    A failure notes the exception's class and its message with Airflow's secrets masked; a stop to wait
    for a person notes the wait. Nothing is noted when the try succeeded (its cache is deleted) or left
    no cache behind; writing the note never changes what the try raises.
    """
    from airflow_pydantic_ai.durable import note_ending

    try:
        yield
    except BaseException as error:
        note_ending(run, error, waiting_for=_compat.waits_for_a_person(error), redact=_compat.redact, warn=log.warning)
        raise
