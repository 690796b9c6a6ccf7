"""What an at-most-once call leaves in the cache, as values: its start (:class:`StartedCall`), the answer about it
(:class:`Resolution`) and the call in doubt they make (:class:`CallInDoubt`).

Plain data, read and written by every reader alike (the live path, ``cache show``, the view, ``cache resolve``, the
approval flow). Nothing here imports pydantic-ai: an answer's result is checked with the engine's codec only when
an answer is read (``steps/outcome.py``, imported then), so the read side of a cache without start marks stays light.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from typing import Any, Final, Literal

from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.wording import call_label

__all__ = [
    "ANSWERS",
    "NO_RESULT",
    "RESOLUTION",
    "STARTED",
    "UNKNOWN_OUTCOME_CHOICES",
    "Answer",
    "CallInDoubt",
    "Resolution",
    "StartedCall",
    "UnknownOutcome",
    "parse_result",
    "resolution_entry",
]

UnknownOutcome = Literal["ask", "fail", "rerun"]
"""What a try does with an at-most-once call an earlier try started and never finished."""
UNKNOWN_OUTCOME_CHOICES: tuple[UnknownOutcome, ...] = ("ask", "fail", "rerun")
Answer = Literal["happened", "rerun", "fail"]
"""A resolution: the call's side effect happened (with the result to give the model), run it again, fail."""
ANSWERS: tuple[Answer, ...] = ("happened", "rerun", "fail")
NO_RESULT: Final = "The call happened; its result is unknown. Do not call it again."
"""What the model is told a call returned when a person says it happened and its result is unknown."""
STARTED: Final = "started"
"""The kind of the entry that marks a call as started."""
RESOLUTION: Final = "resolution"
"""The kind of the entry that records the answer about a start."""


def _utc(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class StartedCall:
    """The payload of a ``started`` entry: which call started, in which try, when."""

    tool: str
    call_id: str | None
    arguments: Any
    """As the model sent them (a JSON string or a dict); shown to a person masked."""
    attempt: int
    started_at: float
    unverified: str = ""
    """Why its start mark exists but cannot be read or verified (then ``attempt`` and ``started_at`` are 0: the
    start is unknown, and an answer binds to that unknown start). Empty for a readable mark; never stored."""

    @classmethod
    def unknown(cls, tool: str, call_id: str | None, arguments: Any, why: str) -> StartedCall:
        """A call whose start mark exists but cannot be verified: started by some earlier try, when unknown."""
        return cls(tool, call_id, arguments, 0, 0.0, why)

    @property
    def by(self) -> str:
        """Which try started it and when: ``try 1 at 2026-11-28 10:00:00 UTC``, or, for a mark that cannot be
        verified, ``an earlier try (its start mark cannot be verified: ...)``."""
        if self.unverified:
            return f"an earlier try (its start mark cannot be verified: {self.unverified})"
        return f"try {self.attempt} at {self.when}"

    def to_payload(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "call_id": self.call_id,
            "arguments": self.arguments,
            "attempt": self.attempt,
            "started_at": self.started_at,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StartedCall:
        attempt, started_at = payload["attempt"], payload["started_at"]
        if not isinstance(attempt, int) or not isinstance(started_at, (int, float)):
            raise ValueError(f"a started mark needs an integer attempt and a time, got {attempt!r}, {started_at!r}")
        call_id = payload.get("call_id")
        return cls(
            tool=str(payload["tool"]),
            call_id=None if call_id is None else str(call_id),
            arguments=payload.get("arguments"),
            attempt=attempt,
            started_at=float(started_at),
        )

    @property
    def when(self) -> str:
        return _utc(self.started_at)


@dataclass(frozen=True)
class Resolution:
    """What was decided about one start of a call whose outcome was unknown (the payload of a ``resolution``)."""

    answer: Answer
    attempt: int
    """The try whose start this resolves (with ``started_at``: a later start is not resolved by it)."""
    started_at: float
    result: dict[str, Any] | None = None
    """For ``happened``: the result the model is given, as a tool entry's payload (``encode_outcome``)."""
    answered_by: str | None = None
    via: str = "a person"
    """How it was answered: ``the Required Actions page``, ``airflow pydantic-ai cache resolve``..."""
    answered_at: float | None = None
    no_result: bool = False
    """For ``happened``: the person said its result is unknown; the model is given ``NO_RESULT``."""

    def resolves(self, started: StartedCall) -> bool:
        return self.attempt == started.attempt and abs(self.started_at - started.started_at) < 1e-6

    def to_payload(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "result": self.result,
            "answered_by": self.answered_by,
            "via": self.via,
            "answered_at": self.answered_at,
            "no_result": self.no_result,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Resolution:
        answer = payload["answer"]
        if answer not in ANSWERS:
            raise ValueError(f"unknown answer {answer!r} (expected one of {', '.join(ANSWERS)})")
        result = payload.get("result")
        no_result = bool(payload.get("no_result"))
        if answer == "happened":
            from airflow_pydantic_ai.durable.steps.outcome import Returned, decode_outcome, encode_outcome

            if not isinstance(result, dict):
                raise ValueError("an answer 'happened' carries the result to give the model")
            outcome = decode_outcome(result)  # a result that cannot be rebuilt is no answer
            if isinstance(outcome, Returned) and outcome.value is None:  # never None: the model would call it again
                result, no_result = encode_outcome(Returned(NO_RESULT)), True
        answered_by, answered_at = payload.get("answered_by"), payload.get("answered_at")
        return cls(
            answer=answer,
            attempt=int(payload["attempt"]),
            started_at=float(payload["started_at"]),
            result=result if isinstance(result, dict) else None,
            answered_by=None if answered_by is None else str(answered_by),
            via=str(payload.get("via") or "a person"),
            answered_at=float(answered_at) if isinstance(answered_at, (int, float)) else None,
            no_result=no_result and answer == "happened",
        )

    @classmethod
    def happened(cls, started: StartedCall, value: Any, **who: Any) -> Resolution:
        """The side effect happened; ``value`` is what the model is told the call returned (never None: a
        result is given, or :meth:`happened_without_result` says it is unknown)."""
        from airflow_pydantic_ai.durable.steps.outcome import Returned, encode_outcome

        if value is None:
            raise ValueError(
                "an answer 'it happened' needs the result the model is given, or the choice that its result is "
                "unknown (the model is then told: " + NO_RESULT + ")"
            )
        return cls("happened", started.attempt, started.started_at, encode_outcome(Returned(value)), **who)

    @classmethod
    def happened_without_result(cls, started: StartedCall, **who: Any) -> Resolution:
        """The side effect happened and its result is unknown: the model is told ``NO_RESULT``."""
        from airflow_pydantic_ai.durable.steps.outcome import Returned, encode_outcome

        result = encode_outcome(Returned(NO_RESULT))
        return cls("happened", started.attempt, started.started_at, result, no_result=True, **who)

    def describe(self) -> str:
        if self.no_result:
            return f"{self.answered_by or 'someone'} answered 'it happened, result unknown' ({self.via})"
        words = {"happened": "it happened", "rerun": "run it again", "fail": "fail the task"}[self.answer]
        who = self.answered_by or "someone"
        return f"{who} answered '{words}' ({self.via})"


def parse_result(text: str | None) -> Any:
    """The result a person typed for "it happened": JSON when it parses as JSON, else the text itself."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class CallInDoubt:
    """An at-most-once call that an earlier try started and never finished, and what was decided about it."""

    key: str
    step: int
    """The model step whose answer asked for the call."""
    label: str
    """How the log names the call (``step 4: tool charge_card (call c1)``)."""
    started: StartedCall
    resolution: Resolution | None = None
    scope: dict[str, Any] | None = None
    """The agent run the call belongs to (its entries' ``scope``)."""
    asked_by: int | None = None
    """The number of the model step whose answer asked for the call, as ``cache show``, ``--step`` and
    ``--from-step`` number it (the call itself has no step of its own until an answer about it is used); None when
    that answer is not in the cache."""

    @classmethod
    def of_mark(cls, mark: StepEntry, resolution: Resolution | None = None) -> CallInDoubt:
        """The call a ``started`` entry names (raises ``ValueError``/``KeyError`` when the mark is unreadable)."""
        started = StartedCall.from_payload(mark.payload)
        label = call_label("tool", started.tool, started.call_id)
        resolved = resolution if resolution is not None and resolution.resolves(started) else None
        return cls(mark.key, mark.step, label, started, resolved, mark.scope)

    @property
    def ref(self) -> str:
        """A short name for the call, for people and commands (the start of its key)."""
        return self.key[:10]

    def describe(self) -> str:
        asked = f", asked for by step {self.asked_by}," if self.asked_by is not None else ""
        return (
            f"{self.label}{asked} was started by {self.started.by} and never finished "
            "(that try was cut off while it ran)"
        )


def resolution_entry(doubt: CallInDoubt, resolution: Resolution) -> StepEntry:
    """The entry that records ``resolution`` of ``doubt`` (written by the Airflow side or a cache command)."""
    return StepEntry(
        kind=RESOLUTION,
        key=doubt.key,
        step=doubt.step,
        attempt=doubt.started.attempt,
        label=doubt.started.tool,
        payload=resolution.to_payload(),
        call_id=doubt.started.call_id,
        role=RESOLUTION,
        recorded_at=time.time(),
        scope=doubt.scope,
    )
