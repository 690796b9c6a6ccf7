"""What a person is asked: the human-in-the-loop request for the calls of one approval round, or about one call
whose outcome is unknown (:func:`build_outcome_request`).

The approval request lists, for each pending call, the tool name, its call id, a short reference and its
arguments (pretty-printed JSON, values registered with Airflow's secrets masker and sensitive-looking
keys masked, long values cut), and a summary of the task's prompt. The options are "Approve all" and
"Reject all" (and "Decide per call" when there are several calls, with one approve/reject field per
call); an optional reason is sent to the model for every rejected call.

The question about the calls in doubt (``at_most_once()`` calls an earlier try started and never finished) shows,
for each, the tool, its arguments (masked in the same way), which try started it and when, and what each answer
does: "It happened" (with the result to give the model in a form field), "Run it again", "Fail the task". One
question asks about every call in doubt of the cache (Airflow shows one request per try): with several, it says how
many wait, and each call has a field for its answer and one for its result (:func:`build_outcomes_request`).

Nothing here talks to Airflow's database: it only builds data (:class:`ApprovalRequest`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANSWER_PER_CALL",
    "APPROVE_ALL",
    "DECIDE_PER_CALL",
    "FAIL_THE_TASK",
    "IT_HAPPENED",
    "IT_HAPPENED_NO_RESULT",
    "OUTCOME_OPTIONS",
    "REASON_FIELD",
    "REJECT_ALL",
    "RESULT_FIELD",
    "RUN_IT_AGAIN",
    "ApprovalRequest",
    "OutcomeCall",
    "PendingCall",
    "build_outcome_request",
    "build_outcomes_request",
    "build_request",
    "call_field",
    "outcome_field",
    "result_field",
]

APPROVE_ALL = "Approve all"
REJECT_ALL = "Reject all"
DECIDE_PER_CALL = "Decide per call"
REASON_FIELD = "reason"
APPROVE, REJECT = "approve", "reject"
IT_HAPPENED = "It happened"
IT_HAPPENED_NO_RESULT = "It happened, result unknown"
RUN_IT_AGAIN = "Run it again"
FAIL_THE_TASK = "Fail the task"
OUTCOME_OPTIONS: dict[str, str] = {
    IT_HAPPENED: "happened",
    IT_HAPPENED_NO_RESULT: "no-result",
    RUN_IT_AGAIN: "rerun",
    FAIL_THE_TASK: "fail",
}
"""The options of the question about a call in doubt, and the answer (``Resolution.answer``) each gives."""
RESULT_FIELD = "result"
ANSWER_PER_CALL = "Answer per call"
"""The option of a question about several calls in doubt that takes each call's own field."""

_MAX_VALUE = 500
"""Characters of one argument value shown before it is cut."""
_MAX_ARGUMENTS = 4000
"""Characters of one call's pretty-printed arguments shown before they are cut."""
_MAX_PROMPT = 500


def call_field(ref: str) -> str:
    """The form field (``params_input`` key) that approves or rejects the call ``ref``."""
    return f"call_{ref}"


def outcome_field(ref: str) -> str:
    """The ``params_input`` key that answers the question about the call in doubt ``ref`` (``happened``, ``rerun``
    or ``fail``) where Airflow still shows an earlier request of the same try."""
    return f"outcome_{ref}"


def result_field(ref: str) -> str:
    """The ``params_input`` key that gives the result of the call in doubt ``ref`` in a question about several."""
    return f"{RESULT_FIELD}_{ref}"


@dataclass(frozen=True)
class OutcomeCall:
    """A call in doubt as the question shows it."""

    tool: str
    ref: str
    call_id: str | None
    arguments: Any
    """As the model sent them (shown masked, long values cut)."""
    started: str
    """Which try started the call and when (``try 1 at 2026-11-28 10:00:00 UTC``)."""

    def title(self) -> str:
        call_id = f", call id {_code(self.call_id)})" if self.call_id else ")"
        return f"{_code(self.tool)} (ref {_code(self.ref)}{call_id}"


@dataclass(frozen=True)
class PendingCall:
    """A call waiting for a decision, as the request shows it and as the resumed task finds it again."""

    ref: str
    tool_name: str
    call_id: str
    arguments: Any

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "tool": self.tool_name, "call_id": self.call_id}


@dataclass(frozen=True)
class ApprovalRequest:
    """The content of one human-in-the-loop request (the arguments of Airflow's ``upsert_hitl_detail``)."""

    subject: str
    body: str
    options: list[str]
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Serialized ``Param`` definitions (the form fields)."""
    defaults: list[str] | None = None
    """What Airflow answers when the approval times out (``on_approval_timeout="reject"``), else None."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _shorten_values(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value, _MAX_VALUE)
    if isinstance(value, dict):
        return {str(key): _shorten_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shorten_values(item) for item in value]
    return value


def pretty_arguments(arguments: Any, redact: Callable[[Any], Any]) -> str:
    """The arguments as the model sent them, masked, each long value cut, as indented JSON."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: shown as the model sent it
            arguments = json.loads(arguments) if arguments.strip() else {}
    shown = _shorten_values(redact(arguments))
    text = shown if isinstance(shown, str) else json.dumps(shown, indent=2, ensure_ascii=False, default=str)
    return _cut(text, _MAX_ARGUMENTS)


def _ticks_longer_than_any_in(text: str, at_least: int) -> str:
    ticks = "`" * at_least
    while ticks in text:
        ticks += "`"
    return ticks


def _fence(text: str, info: str = "json") -> str:
    """A Markdown code fence that the text cannot close: only our own Markdown renders, never the text's."""
    ticks = _ticks_longer_than_any_in(text, 3)
    return f"{ticks}{info}\n{text}\n{ticks}"


def _code(text: str) -> str:
    """``text`` (a tool name, a model-supplied call id) as an inline code span it cannot break out of: one line,
    cut, inside a backtick run longer than any in it (padded where it starts or ends with a backtick)."""
    line = _cut(" ".join(str(text).split()), _MAX_VALUE)
    ticks = _ticks_longer_than_any_in(line, 1)
    padding = " " if line.startswith("`") or line.endswith("`") or not line.strip() else ""
    return f"{ticks}{padding}{line}{padding}{ticks}"


def _plain(text: str) -> str:
    """A model-supplied name for a form field's description: one line, cut."""
    return _cut(" ".join(str(text).split()), _MAX_VALUE)


def _masked(body: str, redact: Callable[[Any], Any]) -> str:
    """The rendered text masked as a whole, last: a secret that any part of it shows (at whatever depth of the
    arguments it sat) is hidden in what a person reads."""
    return str(redact(body))


def build_request(
    calls: Sequence[PendingCall],
    *,
    task_label: str,
    prompt: str,
    redact: Callable[[Any], Any],
    reject_on_timeout: bool,
    param: Callable[..., dict[str, Any]],
) -> ApprovalRequest:
    """The request for ``calls``.

    :param calls: The calls waiting for a decision, in the order the model made them.
    :param task_label: ``dag_id.task_id`` (and map index) for the subject.
    :param prompt: The task's prompt (a summary is shown, masked).
    :param redact: Airflow's secrets masker ``redact``.
    :param reject_on_timeout: Whether Airflow answers "Reject all" when the approval times out.
    :param param: Builds one serialized form field: ``param(default, description=..., **json_schema)``.
    """
    count = len(calls)
    noun = "call" if count == 1 else "calls"
    subject = f"{task_label}: approve {count} tool {noun}?"
    summary = _cut(" ".join(str(redact(prompt)).split()), _MAX_PROMPT)
    lines = [
        # Worded to stay true once answered: Airflow keeps showing this text after the approval and the run.
        f"The agent of **{task_label}** asked to run {count} tool {noun}, which "
        f"{'does' if count == 1 else 'do'} not run before a person decides.",
        "",
        "**Task prompt:**",
        "",
        _fence(summary, "text"),  # the prompt's own Markdown (an image, a link) is shown, never rendered
        "",
    ]
    for number, call in enumerate(calls, start=1):
        lines += [
            f"### {number}. {_code(call.tool_name)} (ref {_code(call.ref)}, call id {_code(call.call_id)})",
            "",
            _fence(pretty_arguments(call.arguments, redact)),
            "",
        ]
    lines.append("A rejected call is not run; the model is told it was rejected, with the reason if you give one.")
    options = [APPROVE_ALL, REJECT_ALL]
    params: dict[str, dict[str, Any]] = {}
    if count > 1:
        options.append(DECIDE_PER_CALL)
        lines.append(f"To decide call by call, set each call's field and choose **{DECIDE_PER_CALL}**.")
        for number, call in enumerate(calls, start=1):
            tool, call_id = _plain(call.tool_name), _plain(call.call_id)
            params[call_field(call.ref)] = param(
                REJECT,
                description=f"{number}. {tool} (call id {call_id}): {APPROVE} or {REJECT}",
                title=f"{number}. {tool}",
                enum=[APPROVE, REJECT],
            )
    params[REASON_FIELD] = param(
        "",
        description="Why the calls are rejected (optional): the model reads it as the tool's answer.",
        title="Reason for a rejection",
        type=["string", "null"],
    )
    return ApprovalRequest(
        subject=subject,
        body=_masked("\n".join(lines), redact),
        options=options,
        params=params,
        defaults=[REJECT_ALL] if reject_on_timeout else None,
    )


def build_outcome_request(
    *,
    tool: str,
    ref: str,
    call_id: str | None,
    arguments: Any,
    started: str,
    task_label: str,
    redact: Callable[[Any], Any],
    timeout: str,
    param: Callable[..., dict[str, Any]],
) -> ApprovalRequest:
    """The question about one call in doubt (:func:`build_outcomes_request` with one call)."""
    call = OutcomeCall(tool=tool, ref=ref, call_id=call_id, arguments=arguments, started=started)
    return build_outcomes_request([call], task_label=task_label, redact=redact, timeout=timeout, param=param)


def build_outcomes_request(
    calls: Sequence[OutcomeCall],
    *,
    task_label: str,
    redact: Callable[[Any], Any],
    timeout: str,
    param: Callable[..., dict[str, Any]],
) -> ApprovalRequest:
    """The question about the calls in doubt: did their side effects happen?

    With one call the options answer it ("It happened" with the field *result*, "Run it again", "Fail the task").
    With several, the question says how many wait; each call has a field ``outcome_<ref>`` (``happened``, ``rerun``
    or ``fail``; ``fail`` by default: nothing runs again unless a person says so) and ``result_<ref>``, taken by
    the option "Answer per call"; "Fail the task" answers every call so.

    :param calls: The calls in doubt, the one the run stopped at first.
    :param task_label: ``dag_id.task_id`` (and map index) for the subject.
    :param redact: Airflow's secrets masker ``redact``.
    :param timeout: How long the person has (``"4:00:00"``), "" without a limit: the task fails then.
    :param param: Builds one serialized form field: ``param(default, description=..., **json_schema)``.
    """
    if len(calls) == 1:
        return _one_call_question(calls[0], task_label=task_label, redact=redact, timeout=timeout, param=param)
    count = len(calls)
    lines = [
        # Worded to stay true once answered: Airflow keeps showing this text after the answer and the run.
        f"The agent of **{task_label}** called {count} tools marked `at_most_once()`, and the try that ran each "
        "was cut off while the call ran: whether their side effects happened is unknown. None of them runs "
        f"again before a person says what happened: **{count} calls wait for an answer.**",
        "",
    ]
    for number, call in enumerate(calls, start=1):
        lines += [
            f"### {number}. {call.title()}, started in {call.started}",
            "",
            _fence(pretty_arguments(call.arguments, redact)),
            "",
        ]
    lines += [
        f"For each call, set its field *outcome* and choose **{ANSWER_PER_CALL}**:",
        "",
        f"- **happened**: the call is not run again; the model is given the text of its field *{RESULT_FIELD}* "
        "(JSON or text) as what the call returned (required).",
        "- **no-result**: the call is not run again; the model is told that it happened, that its result is "
        "unknown, and not to call it again.",
        "- **rerun**: the call runs once more: its side effect may happen twice.",
        "- **fail**: the task fails, naming the call (later tries too, until another answer is recorded with "
        "`airflow pydantic-ai cache resolve`).",
        "",
        f"**{FAIL_THE_TASK}** answers *fail* for every call.",
    ]
    if timeout:
        lines += ["", f"Nobody answering within {timeout} fails the task."]
    params: dict[str, dict[str, Any]] = {}
    answers = list(OUTCOME_OPTIONS.values())
    for number, call in enumerate(calls, start=1):
        tool, ref = _plain(call.tool), _plain(call.ref)
        params[outcome_field(call.ref)] = param(
            "fail",
            description=f"{number}. {tool} (ref {ref}): {', '.join(answers)}",
            title=f"{number}. {tool}: outcome",
            enum=answers,
        )
        params[result_field(call.ref)] = param(
            "",
            description=f"{number}. {tool}: for 'happened', what the call returned (JSON or text)",
            title=f"{number}. {tool}: result",
            type=["string", "null"],
        )
    return ApprovalRequest(
        subject=f"{task_label}: did these {count} tool calls happen?",
        body="\n".join(lines),
        options=[ANSWER_PER_CALL, FAIL_THE_TASK],
        params=params,
    )


def _one_call_question(
    call: OutcomeCall,
    *,
    task_label: str,
    redact: Callable[[Any], Any],
    timeout: str,
    param: Callable[..., dict[str, Any]],
) -> ApprovalRequest:
    lines = [
        # Worded to stay true once answered: Airflow keeps showing this text after the answer and the run.
        f"The agent of **{task_label}** called {call.title()} in {call.started}, and that try was cut off while the "
        "call ran: whether its side effect happened is unknown. The tool is marked `at_most_once()`, so the call is "
        "not run again before a person says what happened.",
        "",
        _fence(pretty_arguments(call.arguments, redact)),
        "",
        f"- **{IT_HAPPENED}**: the call is not run again; the model is given the result you enter in the field "
        f"*{RESULT_FIELD}* (JSON or text) as what the call returned (required).",
        f"- **{IT_HAPPENED_NO_RESULT}**: the call is not run again; the model is told that it happened, that its "
        "result is unknown, and not to call it again.",
        f"- **{RUN_IT_AGAIN}**: the call runs once more: its side effect may happen twice.",
        f"- **{FAIL_THE_TASK}**: the task fails, naming the call (later tries too, until another answer is "
        "recorded with `airflow pydantic-ai cache resolve`).",
    ]
    if timeout:
        lines += ["", f"Nobody answering within {timeout} fails the task."]
    params = {
        RESULT_FIELD: param(
            "",
            description=f"For '{IT_HAPPENED}': what the call returned, given to the model (JSON or text).",
            title="The call's result",
            type=["string", "null"],
        )
    }
    return ApprovalRequest(
        subject=f"{task_label}: did this tool call happen?",
        body=_masked("\n".join(lines), redact),
        options=list(OUTCOME_OPTIONS),
        params=params,
    )
