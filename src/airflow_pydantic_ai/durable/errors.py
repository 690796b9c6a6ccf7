"""The durable package's errors: one base, so a caller can catch everything durability raises at once.

- ``DurableConfigError``: the cache is misconfigured (unknown scheme, missing connection, a store that
  refuses writes at the start of the task); the message names the option and the fix. Raised before
  any step runs.
- ``DurableStorageError``: writing a step failed while the run was going and ``durable_storage_errors``
  is ``fail``.
- ``ApprovalsUnsupported``: the run asked for something the approval flow cannot give (work done outside
  the agent, a decision that cannot be keyed).
- ``ApprovalTimedOut``: an approval wait timed out and the task says to fail then.

Each subclasses the built-in error it always was (``ValueError`` and ``RuntimeError``), so code that
caught those keeps working.
"""

from __future__ import annotations

__all__ = [
    "ApprovalTimedOut",
    "ApprovalsUnsupported",
    "DurableConfigError",
    "DurableError",
    "DurableStorageError",
    "describe_error",
]


class DurableError(Exception):
    """Base class of every error the durable cache raises on purpose."""


class DurableConfigError(DurableError, ValueError):
    """The durable cache is misconfigured; the message names the option and the fix."""


class DurableStorageError(DurableError, RuntimeError):
    """Writing a step to the cache failed and ``durable_storage_errors`` is ``fail``."""


class ApprovalsUnsupported(DurableError, RuntimeError):
    """The run asked for something the approval flow cannot give (work done outside the agent)."""


class ApprovalTimedOut(DurableError, RuntimeError):
    """An approval wait timed out and ``on_approval_timeout`` is ``"fail"``."""


def describe_error(error: BaseException) -> str:
    """An error for a log line: a timeout's message is often empty."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
