"""The Airflow side of a round of asking a person: ask (write the request, release the worker), then record the answer.

Data flows one way. The durable run stops with
:class:`~airflow_pydantic_ai.durable.interception.approvals.WaitingForDecisions`;
:func:`ask` writes the human-in-the-loop request and waits through :mod:`~airflow_pydantic_ai.approval.wait`,
carrying the pending calls' keys in the resume arguments (:class:`Resume`). When Airflow resumes the task,
:func:`record_answer` turns the answer into one decision per call and records each in the durable cache;
the run then starts again, replays every recorded step, finds the decisions and goes on live.

A call in doubt (an ``at_most_once()`` call an earlier try started and never finished, with
``on_unknown_outcome='ask'``) goes the same way: the run stops with ``AskAboutOutcome``, :func:`ask_about_outcome`
asks whether it happened (together with every other unanswered call in doubt of the cache: Airflow shows one
request per try), and :func:`record_answer` records each answer as the call's ``Resolution``, which the run
applies when it reaches the call again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal, NoReturn

from pydantic_ai.messages import ToolCallPart

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.approval.answer import OutcomeAnswer, OutcomeAnswers, read_answer, read_outcome_answers
from airflow_pydantic_ai.approval.request import (
    IT_HAPPENED,
    IT_HAPPENED_NO_RESULT,
    OUTCOME_OPTIONS,
    RESULT_FIELD,
    OutcomeCall,
    PendingCall,
    build_outcomes_request,
    build_request,
    outcome_field,
)
from airflow_pydantic_ai.approval.wait import RENDERED_FIELD, parks_for_input, publish_request, wait_for_answer
from airflow_pydantic_ai.durable import DecisionStep, DurableRun, WaitingForDecisions
from airflow_pydantic_ai.durable.side_effects import (
    CallInDoubt,
    Resolution,
    parse_result,
    unknown_outcome_error,
)

__all__ = ["ANSWERED_VIA", "ApprovalSettings", "Resume", "ask", "ask_about_outcome", "record_answer"]

ANSWERED_VIA = "the Required Actions page"
"""How an answer given to the human-in-the-loop request reached the task (a ``Resolution``'s ``via``)."""

OnTimeout = Literal["reject", "fail"]
_ON_TIMEOUT: tuple[OnTimeout, ...] = ("reject", "fail")


@dataclass(frozen=True)
class ApprovalSettings:
    """The operator's approval options, checked once."""

    timeout: timedelta | None = None
    on_timeout: OnTimeout = "fail"
    assigned_users: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def checked(cls, timeout: Any, on_timeout: Any, assigned_users: Any) -> ApprovalSettings:
        """Raise ``ValueError`` naming the argument and the fix when one is wrong."""
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
            raise ValueError(
                f"AgentOperator approval_timeout must be a positive datetime.timedelta or None, got {timeout!r}"
            )
        if on_timeout not in _ON_TIMEOUT:
            raise ValueError(
                f"AgentOperator on_approval_timeout must be 'reject' (reject the pending calls and go on) or 'fail' "
                f"(fail the task), got {on_timeout!r}"
            )
        users = [assigned_users] if isinstance(assigned_users, dict) else list(assigned_users or [])
        for user in users:
            if not isinstance(user, dict) or not {"id", "name"} <= set(user):
                raise ValueError(
                    "AgentOperator approval_assigned_users takes {'id': ..., 'name': ...} dicts (Airflow's HITLUser), "
                    f"got {user!r}"
                )
        return cls(timeout=timeout, on_timeout=on_timeout, assigned_users=[dict(user) for user in users])

    @property
    def timeout_reason(self) -> str:
        return f"Nobody approved this tool call within the approval timeout ({self.timeout}); it was not run."


@dataclass(frozen=True)
class Resume:
    """What the task carries through the wait (``next_kwargs``) plus the answer Airflow adds (``event``)."""

    event: Any
    pending: list[dict[str, Any]]
    """Per call waiting for approval: ``ref``, ``key``, ``tool``, ``call_id``, ``step``."""
    request_ti: str
    """The task-instance try whose request Airflow shows (one request per try)."""
    shown_refs: list[str]
    """What the request Airflow shows asks about: approval refs, or ``outcome_<ref>`` for a call in doubt."""
    round: int
    """The approval round (0: none yet in this try, only a question about a call in doubt)."""
    doubts: list[dict[str, Any]] = field(default_factory=list)
    """The calls in doubt asked about (each ``key``, ``ref``, ``tool``, ``attempt``, ``started_at``), else empty."""

    @property
    def doubt(self) -> dict[str, Any] | None:
        """The first call in doubt asked about (the one the run stopped at), else None."""
        return self.doubts[0] if self.doubts else None

    @classmethod
    def from_kwargs(cls, event: Any, kwargs: dict[str, Any]) -> Resume:
        pending, doubts = kwargs.get("pending", []), kwargs.get("doubts")
        if not isinstance(doubts, list):  # a try parked by release 0.2.0 asked about one call
            doubts = [kwargs["doubt"]] if isinstance(kwargs.get("doubt"), dict) else []
        doubts = [dict(item) for item in doubts if isinstance(item, dict)]
        if not isinstance(pending, list) or not (pending or doubts):
            raise ValueError(f"the task resumed without the calls it waited for ({kwargs!r})")
        return cls(
            event=event,
            pending=[dict(item) for item in pending],
            request_ti=str(kwargs.get("request_ti", "")),
            shown_refs=[str(ref) for ref in kwargs.get("shown_refs") or []],
            round=int(kwargs["round"]) if kwargs.get("round") is not None else 1,
            doubts=doubts,
        )


def _pending_call(step: DecisionStep) -> PendingCall:
    return PendingCall(ref=step.ref, tool_name=step.tool_name, call_id=step.call.tool_call_id, arguments=step.call.args)


def _param(default: Any, *, description: str, **schema: Any) -> dict[str, Any]:
    from airflow.sdk import Param

    return Param(default, description=description, **schema).serialize()


def _task_label(context: Any) -> str:
    ti = context["ti"]
    label = f"{ti.dag_id}.{ti.task_id}"
    map_index = getattr(ti, "map_index", -1)
    return label if map_index in (None, -1) else f"{label}[{map_index}]"


def ask(
    operator: Any,
    context: Any,
    waiting: WaitingForDecisions,
    *,
    prompt: str,
    settings: ApprovalSettings,
    previous: Resume | None,
    log: Any,
) -> NoReturn:
    """Write the request for the waiting calls and release the worker until a person answers."""
    calls = [_pending_call(step) for step in waiting.pending]
    ti_id = str(context["task_instance"].id)
    refs = [call.ref for call in calls]
    same_try = previous is not None and previous.request_ti == ti_id
    shown_refs = previous.shown_refs if same_try and previous is not None else refs
    current = set(refs) <= set(shown_refs)
    round_number = 1 if previous is None else previous.round + (0 if set(refs) <= set(previous.shown_refs) else 1)
    request = build_request(
        calls,
        task_label=_task_label(context),
        prompt=prompt,
        redact=_compat.redact,
        reject_on_timeout=settings.on_timeout == "reject" and settings.timeout is not None,
        param=_param,
    )
    # In the same try Airflow keeps the first request's text and only clears the previous answer.
    not_shown = publish_request(context, request, settings.assigned_users)
    if not_shown:
        log.warning("Approval: could not show the request in the rendered field '%s': %s", RENDERED_FIELD, not_shown)
    log.info(
        "Approval: the agent stopped before %d tool call(s) that need approval (round %d): %s",
        len(calls),
        round_number,
        ", ".join(f"{call.tool_name} (ref {call.ref}, call {call.call_id})" for call in calls),
    )
    if not current:
        log.warning(
            "Approval: Airflow keeps one request per task try, so its Required Actions page still shows an earlier "
            "round's calls; this round's calls are in the task's rendered field '%s'. Answer them through the REST "
            "API (PATCH .../taskInstances/%s/%s/hitlDetails) with params_input {%s} (approve or reject) and any "
            "option; 'Approve all'/'Reject all' alone decide nothing",
            RENDERED_FIELD,
            context["ti"].task_id,
            getattr(context["ti"], "map_index", -1),
            ", ".join(f"'call_{ref}': ..." for ref in refs),
        )
    at_timeout = "reject the pending calls and go on" if settings.on_timeout == "reject" else "fail"
    log.info(
        "Approval: waiting for %d approval(s) on this task's Required Actions page; the task is %s",
        len(calls),
        _waiting_where(settings, at_timeout=at_timeout),
    )
    kwargs = {
        "pending": [
            {
                "ref": step.ref,
                "key": step.key,
                "tool": step.tool_name,
                "call_id": step.call.tool_call_id,
                "step": step.step_number,
            }
            for step in waiting.pending
        ],
        "request_ti": ti_id,
        "shown_refs": shown_refs,
        "round": round_number,
    }
    wait_for_answer(operator, context, request, timeout=settings.timeout, kwargs=kwargs)


def record_answer(run: DurableRun, resume: Resume, *, settings: ApprovalSettings, log: Any) -> None:
    """Record the answer's decisions in the cache (calls it leaves undecided are asked again), or what happened
    to the call in doubt asked about."""
    if resume.doubts:
        _record_outcomes(run, resume, log=log)
        return
    calls = [
        PendingCall(ref=item["ref"], tool_name=str(item["tool"]), call_id=str(item["call_id"]), arguments=None)
        for item in resume.pending
    ]
    answer = read_answer(
        resume.event,
        calls,
        request_is_current={call.ref for call in calls} <= set(resume.shown_refs),
        timeout_reason=settings.timeout_reason,
    )
    who = answer.answered_by or "nobody (the approval timed out)"
    log.info("Approval: resumed with an answer from %s for %d pending call(s)", who, len(calls))
    for warning in answer.warnings:
        log.warning("Approval: %s", warning)
    for item in resume.pending:
        decision = answer.decisions.get(item["ref"])
        if decision is None:
            log.warning(
                "Approval: the answer does not decide %s (ref %s, call %s); it will be asked again",
                item["tool"],
                item["ref"],
                item["call_id"],
            )
            continue
        run.decide(
            ToolCallPart(tool_name=str(item["tool"]), args=None, tool_call_id=str(item["call_id"])),
            key=str(item["key"]),
            step_number=int(item.get("step") or 0),
            decision=decision,
        )
        rejected_with_reason = decision.reason and not decision.approved
        reason = f" (reason given to the model: {decision.reason!r})" if rejected_with_reason else ""
        log.info(
            "Approval: %s (ref %s, call %s) %s%s",
            item["tool"],
            item["ref"],
            item["call_id"],
            decision.describe(),
            reason,
        )


def _waiting_where(settings: ApprovalSettings, *, at_timeout: str) -> str:
    where = (
        "parked in awaiting_input (no worker slot, no triggerer)"
        if parks_for_input()
        else "deferred to the triggerer (no worker slot)"
    )
    return where + (
        f"; after {settings.timeout} without an answer the task will {at_timeout}" if settings.timeout else ""
    )


def ask_about_outcome(
    operator: Any,
    context: Any,
    doubt: CallInDoubt,
    *,
    run: DurableRun,
    settings: ApprovalSettings,
    previous: Resume | None,
    log: Any,
) -> NoReturn:
    """Ask whether the call in doubt happened, with every other unanswered call in doubt of the cache (Airflow shows
    one request per try: a question asked later in the same try would not reach the Required Actions page), and
    release the worker until a person answers.

    The wait is the approvals' (``approval_timeout``, ``approval_assigned_users``); when nobody answers in time the
    task fails (``on_approval_timeout='reject'`` has nothing to reject here).
    """
    doubts = [doubt, *(other for other in run.calls_in_doubt() if other.key != doubt.key)]
    ti_id = str(context["task_instance"].id)
    asked = [outcome_field(each.ref) for each in doubts]
    same_try = previous is not None and previous.request_ti == ti_id
    shown_refs = previous.shown_refs if same_try and previous is not None else asked
    calls = [
        OutcomeCall(
            tool=each.started.tool,
            ref=each.ref,
            call_id=each.started.call_id,
            arguments=each.started.arguments,
            started=each.started.by,
        )
        for each in doubts
    ]
    request = build_outcomes_request(
        calls,
        task_label=_task_label(context),
        redact=_compat.redact,
        timeout=str(settings.timeout) if settings.timeout else "",
        param=_param,
    )
    not_shown = publish_request(context, request, settings.assigned_users)
    if not_shown:
        log.warning("Approval: could not show the request in the rendered field '%s': %s", RENDERED_FIELD, not_shown)
    for each in doubts:
        log.warning("Unknown outcome: %s (ref %s); a person is asked whether it happened", each.describe(), each.ref)
    if not set(asked) <= set(shown_refs):
        log.warning(
            "Unknown outcome: Airflow keeps one request per task try, so its Required Actions page still shows an "
            "earlier question; this one is in the task's rendered field '%s'. Answer it through the REST API (PATCH "
            ".../taskInstances/%s/%s/hitlDetails) with any option and params_input {%s}",
            RENDERED_FIELD,
            context["ti"].task_id,
            getattr(context["ti"], "map_index", -1),
            ", ".join(
                f"'{outcome_field(each.ref)}': 'happened' | 'no-result' | 'rerun' | 'fail', "
                f"'{RESULT_FIELD}_{each.ref}': <the result for the model>"
                for each in doubts
            ),
        )
    choices = " / ".join(OUTCOME_OPTIONS) if len(doubts) == 1 else "happened / no-result / rerun / fail for each call"
    log.info(
        "Unknown outcome: waiting for an answer about %s (%s) on this task's Required Actions page; the task is %s",
        "1 call" if len(doubts) == 1 else f"{len(doubts)} calls",
        choices,
        _waiting_where(settings, at_timeout="fail"),
    )
    kwargs = {
        "doubts": [
            {
                "key": each.key,
                "ref": each.ref,
                "tool": each.started.tool,
                "attempt": each.started.attempt,
                "started_at": each.started.started_at,
            }
            for each in doubts
        ],
        "request_ti": ti_id,
        "shown_refs": shown_refs,
        "round": previous.round if previous is not None else 0,
    }
    wait_for_answer(operator, context, request, timeout=settings.timeout, kwargs=kwargs)


def _record_outcomes(run: DurableRun, resume: Resume, *, log: Any) -> None:
    """Record what the person said happened to each call in doubt asked about (nothing for a call the answer says
    nothing usable about: the run then asks again)."""
    refs = [str(asked.get("ref")) for asked in resume.doubts]
    current = {outcome_field(ref) for ref in refs} <= set(resume.shown_refs)
    answers = read_outcome_answers(resume.event, refs, request_is_current=current)
    log.info(
        "Unknown outcome: resumed with an answer from %s about %s",
        answers.answered_by or "nobody",
        ", ".join(f"{asked.get('tool')} (ref {asked.get('ref')})" for asked in resume.doubts),
    )
    for warning in answers.warnings:
        log.warning("Unknown outcome: %s", warning)
    for asked in resume.doubts:
        _record_outcome(run, asked, answers, log=log)


def _record_outcome(run: DurableRun, asked: dict[str, Any], answers: OutcomeAnswers, *, log: Any) -> None:
    ref, tool = str(asked.get("ref")), str(asked.get("tool"))
    answer = answers.answers.get(ref) or OutcomeAnswer()
    doubt = run.call_in_doubt(str(asked.get("key")), tool)
    if doubt is None or (doubt.started.attempt, doubt.started.started_at) != (
        asked.get("attempt"),
        asked.get("started_at"),
    ):
        log.warning(
            "Unknown outcome: the start of %s (ref %s) that was asked about is no longer in the cache (deleted or "
            "replaced meanwhile); the answer is not recorded, and the call is treated as the cache now says",
            tool,
            ref,
        )
        return
    if answer.answer is None and doubt.resolution is not None:
        log.info(
            "Unknown outcome: %s (ref %s): %s meanwhile; it applies", doubt.label, ref, doubt.resolution.describe()
        )
        return
    if answers.timed_out:
        rules = replace(run.outcomes, can_ask=False)  # asking is over: the error names the other ways
        raise unknown_outcome_error(doubt, rules, redact=_compat.redact, why=f"{answers.timed_out}, so the task fails")
    if answer.answer is None:
        log.warning(
            "Unknown outcome: the answer does not say what happened to %s (ref %s); it is asked again", tool, ref
        )
        return
    who: dict[str, Any] = {"answered_by": answers.answered_by, "via": ANSWERED_VIA, "answered_at": time.time()}
    result = parse_result(answer.result)
    if answer.answer == "happened" and result is None:
        log.warning(
            "Unknown outcome: the answer '%s' about %s (ref %s) gives no result for the model (its result field is "
            "empty); choose '%s' when its result is unknown. It is asked again",
            IT_HAPPENED,
            tool,
            ref,
            IT_HAPPENED_NO_RESULT,
        )
        return
    if answer.answer == "happened":
        resolution = Resolution.happened(doubt.started, result, **who)
    elif answer.answer == "no-result":
        resolution = Resolution.happened_without_result(doubt.started, **who)
    else:
        resolution = Resolution(answer.answer, doubt.started.attempt, doubt.started.started_at, **who)  # type: ignore[arg-type]
    run.resolve(doubt, resolution)
    given = " (a result is given to the model)" if answer.answer == "happened" and answer.result is not None else ""
    log.info("Unknown outcome: %s (ref %s): %s%s", doubt.label, ref, resolution.describe(), given)
