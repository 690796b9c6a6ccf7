"""What a try does with a call in doubt it may not settle itself: the task's rules, and the errors that say so.

:class:`OutcomeRules` (the task's ``on_unknown_outcome``, whether a person can be asked, the ``cache resolve``
command), :class:`OutcomeUnknown` (the task fails, naming the call and how to resolve it:
:func:`unknown_outcome_error`), :class:`AskAboutOutcome` (the Airflow side asks a person), and how a call's arguments
are shown to a person (:func:`masked`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.side_effects.records import CallInDoubt, UnknownOutcome

__all__ = ["AskAboutOutcome", "OutcomeRules", "OutcomeUnknown", "masked", "masked_value", "unknown_outcome_error"]


@dataclass(frozen=True)
class OutcomeRules:
    """How an attempt treats calls in doubt: the task's ``on_unknown_outcome``, whether a person can be asked,
    and the command that records an answer (for the error message)."""

    on_unknown: UnknownOutcome = "ask"
    can_ask: bool = False
    """True where the Airflow side asks a person (``AgentOperator``, ``@task.pydantic_ai``); False in a plain
    ``@task`` with ``durable_attempt()``, tests and notebooks."""
    resolve_command: str = ""
    """``airflow pydantic-ai cache resolve DAG RUN TASK`` for this task instance (``--call`` and the answer follow)."""
    why_no_person: str = "no person can be asked here (a plain @task with durable_attempt(), or outside Airflow)"


class OutcomeUnknown(DurableError, RuntimeError):
    """An at-most-once call was started by an earlier try and never finished, and this try may not run it again.

    Raised where ``on_unknown_outcome`` is ``"fail"`` (or ``"ask"`` where nobody can be asked), or when the
    recorded answer is "fail the task"; the message names the call and how to resolve it.
    """

    def __init__(self, message: str, *, call: CallInDoubt) -> None:
        super().__init__(message)
        self.call = call


class AskAboutOutcome(DurableError):
    """Internal signal: the run stops so that a person is asked what happened to ``call`` (the Airflow side
    catches it, asks through human-in-the-loop, and records the answer as a :class:`Resolution`)."""

    def __init__(self, call: CallInDoubt) -> None:
        super().__init__(f"{call.describe()}; a person is asked what happened")
        self.call = call


def masked_value(arguments: Any, redact: Any) -> Any:
    """``arguments`` masked by ``redact``: JSON text parsed first, so that values under sensitive keys
    (``{"api_key": ...}``) are masked as well as registered secrets; other text is masked as it is."""
    value = arguments
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not JSON: masked as the text it is
            value = json.loads(value)
    return redact(value) if redact is not None else value


def masked(arguments: Any, redact: Any) -> str:
    """A call's arguments (or the result given for it) as a person is shown them: JSON text, masked by ``redact``,
    cut at 500 characters. JSON text is masked as the value it holds, so that ``{"api_key": ...}`` is masked by
    its key as well as any value registered as a secret."""
    value = masked_value(arguments, redact)
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = str(redact(text)) if redact is not None else text
    return text if len(text) <= 500 else f"{text[:500]}... ({len(text) - 500} more characters)"


def unknown_outcome_error(doubt: CallInDoubt, rules: OutcomeRules, *, redact: Any, why: str) -> OutcomeUnknown:
    """The error that fails the task on a call in doubt: the call, its arguments (masked), how to resolve it."""
    command = rules.resolve_command or "airflow pydantic-ai cache resolve DAG_ID RUN_ID TASK_ID"
    ways = [
        f"record what happened: {command} --call {doubt.ref} --happened --result '<JSON or text for the model>' "
        "(or --happened --no-result when its result is unknown)",
        f"or allow it to run again: {command} --call {doubt.ref} --rerun",
    ]
    if rules.can_ask and rules.on_unknown != "ask":
        ways.insert(0, "set on_unknown_outcome='ask' to be asked on the task's Required Actions page")
    message = (
        f"{doubt.describe()}: its outcome is unknown, so this try does not run it again ({why}). "
        f"Arguments: {masked(doubt.started.arguments, redact)}. To resolve it, "
        + "; ".join(ways)
        + ". Then clear the task: its next try applies the answer. The task fails without spending its retries: "
        "no retry could learn more until an answer is recorded"
    )
    return OutcomeUnknown(message, call=doubt)
