"""Which failures of an agent task are worth waiting out: a rate limit, or a provider that is overloaded.

pydantic-ai sorts a provider's refusals into categories (``ModelRateLimitError``: HTTP 429 and its
equivalents; ``ModelUnavailableError`` and its ``ModelOverloadedError``: HTTP 503, 529, "overloaded").
Waiting helps those; it does not help an exhausted quota or billing (``ModelQuotaExceededError``), nor
any other error. The error may arrive wrapped (as the cause or context of another exception, or inside
an exception group such as the one ``FallbackModel`` raises when every model failed): the whole chain is
searched. Works on every Airflow release; :mod:`airflow_pydantic_ai.retry_policy` builds Airflow 3.4's
retry policy on it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["worth_waiting_for"]


def worth_waiting_for(error: BaseException) -> Any:
    """The ``ModelAPIError`` in ``error``'s chain that waiting may cure (rate limit, overload), else None."""
    from pydantic_ai.exceptions import ModelQuotaExceededError, ModelRateLimitError, ModelUnavailableError

    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ModelRateLimitError | ModelUnavailableError) and not isinstance(
            current, ModelQuotaExceededError
        ):
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(linked for linked in (current.__cause__, current.__context__) if linked is not None)
    return None
