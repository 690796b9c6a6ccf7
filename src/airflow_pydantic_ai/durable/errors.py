"""The durable package's errors: one base, so a caller can catch everything durability raises at once.

- ``DurableConfigError``: the cache is misconfigured (unknown scheme, missing connection, a store that
  refuses writes at the start of the task); the message names the option and the fix. Raised before
  any step runs.
- ``DurableStorageError``: writing a step failed while the run was going and ``durable_storage_errors``
  is ``fail``.

Both subclass the built-in error they always were (``ValueError`` and ``RuntimeError``), so code that
caught those keeps working.
"""

from __future__ import annotations

__all__ = ["DurableConfigError", "DurableError", "DurableStorageError", "describe_error"]


class DurableError(Exception):
    """Base class of every error the durable cache raises on purpose."""


class DurableConfigError(DurableError, ValueError):
    """The durable cache is misconfigured; the message names the option and the fix."""


class DurableStorageError(DurableError, RuntimeError):
    """Writing a step to the cache failed and ``durable_storage_errors`` is ``fail``."""


def describe_error(error: BaseException) -> str:
    """An error for a log line: a timeout's message is often empty."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
