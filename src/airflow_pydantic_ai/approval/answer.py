"""Reading a person's answer (the human-in-the-loop resume event): one decision per pending call of an approval
round (:func:`read_answer`), or what happened to a call in doubt (:func:`read_outcome_answer`).

An answer never decides a call it does not clearly name: an option that is not ours, a per-call value
that is neither ``approve`` nor ``reject``, or a field for a call that is not pending is ignored with
a warning, and a call left without a decision is asked again. In a round whose request text Airflow
could not refresh (a later round in the same try: see :mod:`airflow_pydantic_ai.approval.wait`), only
per-call fields that name the calls now pending count, so that an "Approve all" given while reading
an earlier round's calls never approves different ones. The same holds for a call in doubt: where Airflow shows
an earlier request, only its own field (``outcome_<ref>``) answers it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_pydantic_ai.approval.request import (
    ANSWER_PER_CALL,
    APPROVE,
    APPROVE_ALL,
    DECIDE_PER_CALL,
    OUTCOME_OPTIONS,
    REASON_FIELD,
    REJECT,
    REJECT_ALL,
    RESULT_FIELD,
    PendingCall,
    call_field,
    outcome_field,
    result_field,
)
from airflow_pydantic_ai.durable import Decision
from airflow_pydantic_ai.durable.errors import ApprovalTimedOut

__all__ = [
    "Answer",
    "ApprovalTimedOut",
    "OutcomeAnswer",
    "OutcomeAnswers",
    "read_answer",
    "read_outcome_answer",
    "read_outcome_answers",
]


@dataclass
class Answer:
    """The decisions an answer gives, by call ref, and what in it was ignored."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    answered_by: str | None = None


def _user_name(user: Any) -> str | None:
    if isinstance(user, Mapping):
        name = user.get("name") or user.get("id")
        return None if name is None else str(name)
    return None


_NOT_A_MAPPING = "the answer is not a mapping ({}); it is ignored"


def _wait_timed_out(event: Mapping[str, Any]) -> str | None:
    """What Airflow said when the wait timed out with no default answer; None when it did not time out.

    :raises RuntimeError: The wait failed for another reason.
    """
    if "error" not in event:
        return None
    if event.get("error_type") == "timeout":
        return str(event.get("error"))
    raise RuntimeError(f"the wait for an answer failed: {event.get('error')}")


def _fields(event: Mapping[str, Any], warnings: list[str]) -> Mapping[str, Any]:
    """The answer's form fields (``params_input``); none, with a warning, when they are not a mapping."""
    params = event.get("params_input") or {}
    if isinstance(params, Mapping):
        return params
    warnings.append(f"the answer's fields are {type(params).__name__}, not a mapping; they are ignored")
    return {}


def read_answer(
    event: Any,
    pending: Sequence[PendingCall],
    *,
    request_is_current: bool,
    timeout_reason: str,
) -> Answer:
    """The decisions in ``event`` for the ``pending`` calls.

    :param event: The resume event Airflow hands the task (``chosen_options``, ``params_input``,
        ``responded_by_user``, ``timedout``; or ``error`` / ``error_type`` when the wait failed).
    :param pending: The calls the request asked about.
    :param request_is_current: False when Airflow still shows an earlier round's request text.
    :param timeout_reason: The reason given to the model for calls rejected because nobody answered.
    :raises ApprovalTimedOut: The wait timed out with no default answer (``on_approval_timeout="fail"``).
    """
    answer = Answer()
    if not isinstance(event, Mapping):
        answer.warnings.append(_NOT_A_MAPPING.format(type(event).__name__))
        return answer
    timeout = _wait_timed_out(event)
    if timeout is not None:
        raise ApprovalTimedOut(
            f"nobody approved or rejected the pending tool calls in time ({timeout}); "
            "on_approval_timeout='fail' fails the task. Set on_approval_timeout='reject' to reject them and "
            "go on, or a longer approval_timeout."
        )
    timed_out = bool(event.get("timedout"))
    who = None if timed_out else _user_name(event.get("responded_by_user"))
    answer.answered_by = who
    chosen = event.get("chosen_options")
    if not isinstance(chosen, list) or len(chosen) != 1 or not isinstance(chosen[0], str):
        answer.warnings.append(f"the answer chose {chosen!r}, not one option; it is ignored")
        return answer
    params = _fields(event, answer.warnings)
    option = chosen[0]
    reason = params.get(REASON_FIELD)
    reason = str(reason).strip() if isinstance(reason, (str, int, float)) and str(reason).strip() else None
    if timed_out:
        reason = timeout_reason
    by_ref = {call.ref: call for call in pending}
    known_fields = {call_field(ref) for ref in by_ref} | {REASON_FIELD}
    for name in params:
        if name not in known_fields and str(name).startswith("call_"):
            answer.warnings.append(
                f"the field {name!r} names no pending call (answered twice, or a stale page?); ignored"
            )

    if option in (APPROVE_ALL, REJECT_ALL) and (request_is_current or timed_out):
        approved = option == APPROVE_ALL
        for ref in by_ref:
            answer.decisions[ref] = Decision(
                approved=approved, reason=None if approved else reason, answered_by=who, timed_out=timed_out
            )
        return answer
    if option not in (APPROVE_ALL, REJECT_ALL, DECIDE_PER_CALL) and request_is_current:
        answer.warnings.append(f"the option {option!r} is not one of ours; it is ignored")
        return answer
    if option in (APPROVE_ALL, REJECT_ALL):
        answer.warnings.append(
            f"{option!r} was chosen on a page that shows an earlier round's calls; it decides nothing. Decide each "
            "pending call by its field (call_<ref>: approve or reject)"
        )
    for ref in by_ref:
        value = params.get(call_field(ref))
        if value is None:
            continue
        verdict = str(value).strip().lower()
        if verdict not in (APPROVE, REJECT):
            answer.warnings.append(f"{call_field(ref)}={value!r} is neither {APPROVE!r} nor {REJECT!r}; ignored")
            continue
        approved = verdict == APPROVE
        answer.decisions[ref] = Decision(
            approved=approved, reason=None if approved else reason, answered_by=who, timed_out=timed_out
        )
    return answer


@dataclass
class OutcomeAnswer:
    """What an answer says about a call in doubt: ``happened`` (with the text given as its result), ``rerun`` or
    ``fail``; None when it says nothing usable (the call is asked about again)."""

    answer: str | None = None
    result: str | None = None
    """The text of the result field, "" and whitespace read as none."""
    answered_by: str | None = None
    timed_out: str = ""
    """Why the wait ended without an answer (the approval timeout); "" when someone answered."""
    warnings: list[str] = field(default_factory=list)


@dataclass
class OutcomeAnswers:
    """What an answer says about each call in doubt it was asked about (by ref; a call missing is asked again)."""

    answers: dict[str, OutcomeAnswer] = field(default_factory=dict)
    answered_by: str | None = None
    timed_out: str = ""
    """Why the wait ended without an answer (the approval timeout); "" when someone answered."""
    warnings: list[str] = field(default_factory=list)


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int, float, bool)) and str(value).strip() else None


def read_outcome_answer(event: Any, ref: str, *, request_is_current: bool) -> OutcomeAnswer:
    """What ``event`` says happened to the call in doubt ``ref`` (:func:`read_outcome_answers` for one call)."""
    answers = read_outcome_answers(event, [ref], request_is_current=request_is_current)
    found = answers.answers.get(ref) or OutcomeAnswer()
    found.answered_by, found.timed_out, found.warnings = answers.answered_by, answers.timed_out, answers.warnings
    return found


def read_outcome_answers(event: Any, refs: Sequence[str], *, request_is_current: bool) -> OutcomeAnswers:
    """What ``event`` says happened to each call in doubt of ``refs``.

    A call's own field ``outcome_<ref>`` (``happened``, ``rerun`` or ``fail``) answers it where the option chosen
    is "Answer per call", or where Airflow still shows an earlier request of the same try; its result is the field
    ``result_<ref>``, else ``result``. Otherwise the option answers every call: "It happened" (with the field
    ``result``), "Run it again", "Fail the task".

    :param event: The resume event Airflow hands the task (as for :func:`read_answer`).
    :param refs: The calls' short references, as asked.
    :param request_is_current: False when Airflow still shows an earlier request of the same try: then only the
        calls' own fields answer, whatever the option.
    :raises RuntimeError: The wait failed for another reason than its timeout.
    """
    found = OutcomeAnswers()
    if not isinstance(event, Mapping):
        found.warnings.append(_NOT_A_MAPPING.format(type(event).__name__))
        return found
    timeout = _wait_timed_out(event)
    if timeout is not None or event.get("timedout"):  # "timedout": a default answer, and this question has none
        found.timed_out = "nobody answered within the approval_timeout" + (f" ({timeout})" if timeout else "")
        return found
    found.answered_by = _user_name(event.get("responded_by_user"))
    params = _fields(event, found.warnings)
    chosen = event.get("chosen_options")
    option = chosen[0] if isinstance(chosen, list) and len(chosen) == 1 and isinstance(chosen[0], str) else None
    by_option = request_is_current and option in OUTCOME_OPTIONS
    choices = ", ".join(OUTCOME_OPTIONS.values())
    for ref in refs:
        result = _text(params.get(result_field(ref)))
        if result is None and (len(refs) == 1 or by_option):
            result = _text(params.get(RESULT_FIELD))
        own = params.get(outcome_field(ref))
        if by_option:
            assert option is not None
            found.answers[ref] = OutcomeAnswer(OUTCOME_OPTIONS[option], result)
        elif own is not None:
            verdict = str(own).strip().lower()
            if verdict in OUTCOME_OPTIONS.values():
                found.answers[ref] = OutcomeAnswer(verdict, result)
            else:
                found.warnings.append(f"{outcome_field(ref)}={own!r} is not one of {choices}; ignored")
        elif not request_is_current:
            found.warnings.append(
                f"the page shows an earlier question of this try, so only the field {outcome_field(ref)!r} "
                f"({choices}) answers this one; the option chosen decides nothing"
            )
        elif option == ANSWER_PER_CALL:
            found.warnings.append(f"'{ANSWER_PER_CALL}' was chosen without the field {outcome_field(ref)!r}")
        else:
            offered = ", ".join([*OUTCOME_OPTIONS, ANSWER_PER_CALL])
            found.warnings.append(f"the answer chose {chosen!r}, not one of {offered}; it is ignored")
            break
    return found
