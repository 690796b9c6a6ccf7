"""What a tool call (or output function call) ended with, as recorded: one tagged union, one encode/decode pair.

- :class:`Returned`: the value the call returned (stored with the type-exact codec);
- :class:`Raised`: a ``ModelRetry`` or ``ToolFailed`` it raised (replayed as the same exception);
- :class:`RetrySignal`: a retry already in pydantic-ai's own form (``ToolRetryError``), stored as the part
  it sends the model;
- :class:`Validating`: an output function's result that an output validator then failed on (pydantic-ai
  runs both in one step): replayed as the value, for that validator and those after it to run again.

Any other exception is not an outcome: nothing is recorded. Guarantees: :func:`decode_outcome` rebuilds
exactly what :func:`encode_outcome` stored, and raises (never guesses) on anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.exceptions import ModelRetry, ToolFailed, ToolRetryError
from pydantic_ai.messages import RetryFeedbackPart, ToolReturnPart

from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.encoding.codec import UnsupportedValue, decode_value, encode_value

__all__ = ["Raised", "RetrySignal", "Returned", "ToolOutcome", "Validating", "decode_outcome", "encode_outcome"]

_RAISED: dict[str, type[ModelRetry] | type[ToolFailed]] = {"ModelRetry": ModelRetry, "ToolFailed": ToolFailed}
_RETRY_PART: TypeAdapter[RetryFeedbackPart | ToolReturnPart] = TypeAdapter(RetryFeedbackPart | ToolReturnPart)


@dataclass(frozen=True)
class Returned:
    value: Any


@dataclass(frozen=True)
class Raised:
    error: ModelRetry | ToolFailed


@dataclass(frozen=True)
class RetrySignal:
    error: ToolRetryError


@dataclass(frozen=True)
class Validating:
    value: Any
    validator_index: int
    validator_name: str


ToolOutcome = Returned | Raised | RetrySignal | Validating


def encode_outcome(outcome: ToolOutcome, allowed: AllowedTypes = UNDECLARED) -> dict[str, Any]:
    """The payload of a tool entry; raises ``UnsupportedValue`` when a returned value cannot be stored exactly (or
    names a class ``allowed``, what the tool declares, does not accept)."""
    if isinstance(outcome, Returned):
        return {"outcome": "return", "value": encode_value(outcome.value, allowed)}
    if isinstance(outcome, Validating):
        validator = {"index": outcome.validator_index, "name": outcome.validator_name}
        return {"outcome": "validating", "value": encode_value(outcome.value, allowed), "validator": validator}
    if isinstance(outcome, Raised):
        return {"outcome": type(outcome.error).__name__, "message": outcome.error.message}
    return {"outcome": "ToolRetryError", "part": _RETRY_PART.dump_python(outcome.error.tool_retry, mode="json")}


def decode_outcome(payload: dict[str, Any], allowed: AllowedTypes = UNDECLARED) -> ToolOutcome:
    """The outcome a tool entry's payload holds, building only the classes ``allowed`` accepts; raises when it is
    damaged, unknown or names another class."""
    kind = payload.get("outcome")
    if kind == "return":
        return Returned(decode_value(payload["value"], allowed))
    if kind == "validating":
        validator = payload["validator"]
        return Validating(decode_value(payload["value"], allowed), int(validator["index"]), str(validator["name"]))
    if kind in _RAISED:
        return Raised(_RAISED[kind](str(payload["message"])))
    if kind == "ToolRetryError":
        return RetrySignal(ToolRetryError(_RETRY_PART.validate_python(payload["part"])))
    raise UnsupportedValue(f"unknown outcome {kind!r}")
