"""Every error the package raises on purpose, under one base: ``except DurableError`` catches them all.

Public errors (a user, a test or the Airflow side may catch them):

- ``DurableConfigError``: the cache is misconfigured (unknown scheme, missing connection, a store that
  refuses writes at the start of the task); the message names the option and the fix. Raised before
  any step runs.
- ``DurableStorageError``: writing a step failed while the run was going and ``durable_storage_errors``
  is ``fail``.
- ``ApprovalsUnsupported``: the run asked for something the approval flow cannot give (work done outside
  the agent, a decision that cannot be keyed).
- ``ApprovalTimedOut``: an approval wait timed out and the task says to fail then.
- ``FixtureError``: a fixture that is missing, unreadable, or not this task's.
- ``ReplayMiss``: a step of a ``replay`` attempt has no recorded entry.
- ``ReplayFailed`` (defined in ``testing/__init__.py``, deriving from this base: pytest prints its dotted name,
  ``airflow_pydantic_ai.testing.ReplayFailed``, in every failed replay, and the docs quote it).
- ``OutsideCacheBase`` and ``NoSuchIteration``: the ids given to ``cache`` commands or the view lead
  outside the cache base, or to no cache of that loop iteration.
- ``OutcomeUnknown`` (defined in ``side_effects/once.py``, beside the call in doubt it carries): an
  at-most-once call an earlier try started and never finished, which this try may not run again.
- ``CheckpointRefused`` (defined in ``side_effects/checkpoint.py``, beside ``tool_checkpoint()``): a value a resumable
  tool tried to save that cannot come back identical, or that holds a secret; nothing was saved.
- ``RetryBudgetExceeded`` (defined in ``reporting/budget.py``: it is also pydantic-ai's
  ``UsageLimitExceeded``, and this module imports nothing, so that the read side and the CLI can catch
  these errors without importing pydantic-ai).

Internal signals, raised and caught inside the engine and never meant to reach a user; they derive from
the base too, and stay beside the code that raises them: ``CorruptEntry`` and ``SealedEntry``
(``storage/entry.py``), ``UnsupportedValue`` (``encoding/codec.py``), ``FingerprintError``
(``keys/canonical.py``). Private exceptions (a leading underscore) are not covered.

Each subclasses the built-in error it always was (``ValueError``, ``RuntimeError``, ``LookupError``,
``AssertionError``), so code that caught those keeps working. ``tests/unit/test_error_base.py`` keeps
every public exception class of the package under :class:`DurableError`.
"""

from __future__ import annotations

__all__ = [
    "ApprovalTimedOut",
    "ApprovalsUnsupported",
    "DurableConfigError",
    "DurableError",
    "DurableStorageError",
    "FixtureError",
    "NoSuchIteration",
    "OutsideCacheBase",
    "ReplayMiss",
    "describe_error",
]


class DurableError(Exception):
    """Base class of every error the package raises on purpose."""


class DurableConfigError(DurableError, ValueError):
    """The durable cache is misconfigured; the message names the option and the fix."""


class DurableStorageError(DurableError, RuntimeError):
    """Writing a step to the cache failed and ``durable_storage_errors`` is ``fail``."""


class ApprovalsUnsupported(DurableError, RuntimeError):
    """The run asked for something the approval flow cannot give (work done outside the agent)."""


class ApprovalTimedOut(DurableError, RuntimeError):
    """An approval wait timed out and ``on_approval_timeout`` is ``"fail"``."""


class FixtureError(DurableError, ValueError):
    """A fixture that is missing, unreadable, or not this task's; the message names the file."""


class ReplayMiss(DurableError):
    """A step of a ``replay`` attempt has no recorded entry; raised before any live model or tool call."""

    def __init__(self, message: str, *, changed: bool) -> None:
        super().__init__(message)
        self.changed = changed
        """True: something was recorded at this point and the current code asks differently. False: the
        recording ends before this step (a failed run's cache: a retry would run on live from here)."""


class OutsideCacheBase(DurableError, ValueError):
    """The ids would lead outside the configured cache base (never expected: segments are encoded)."""


class NoSuchIteration(DurableError, LookupError):
    """No cache (or more than one, under nested loops) of the task instance in that loop iteration."""


def describe_error(error: BaseException) -> str:
    """An error for a log line: a timeout's message is often empty."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
