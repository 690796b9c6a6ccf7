"""The one error the commands raise for a mistake the person typing can fix (an id given twice and different,
a duration without a unit...): printed as one line on stderr with exit code 1, never a traceback.

Its own module, so that every command module (and the parsing of older spellings) raises it without importing
another command.
"""

from __future__ import annotations

from airflow_pydantic_ai.durable.errors import DurableError

__all__ = ["_UserError"]


class _UserError(DurableError):
    """A mistake the user can fix; printed as one line, exit code 1."""
