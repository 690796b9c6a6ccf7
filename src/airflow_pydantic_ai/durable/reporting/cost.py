"""What a model response cost, in USD, from pydantic-ai's own price data.

pydantic-ai prices a response with its ``genai-prices`` dependency (``ModelResponse.cost()``): the model
name, the provider and the tokens the response reports. This module only asks it, and says ``None``
where pydantic-ai does not know a price (a ``FunctionModel``, a self-hosted model, a response without
usage). There is no price table here, and never will be: prices move, pydantic-ai's data follows them.

Guarantees: never raises (an unknown model is ``None``, not an error); never does I/O beyond what
pydantic-ai's pricing does (its data ships with the package).
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from pydantic_ai.messages import ModelResponse

__all__ = ["batch_saving", "response_cost"]


def response_cost(response: ModelResponse) -> Decimal | None:
    """The estimated cost of ``response`` in USD, or None when pydantic-ai has no price for it."""
    if not response.model_name:
        return None
    try:
        price = response.cost()
    except Exception:  # LookupError (unknown model), ValueError (usage omitted), whatever the data says
        return None
    total = getattr(price, "total_price", None)
    return total if isinstance(total, Decimal) else None


def batch_saving(response: ModelResponse) -> Decimal | None:
    """What the batch price saved on ``response``, a batch API's answer (pydantic-ai marks it
    ``provider_details['processing'] = 'batch'``, which genai-prices prices at its batch rate): the standard price
    less the batch price; None when the price data has no batch rate for the model; 0 when it has no price for the
    model at all (the cost is unknown, and says so)."""
    details = dict(response.provider_details or {})
    details.pop("processing", None)
    batch, standard = response_cost(response), response_cost(replace(response, provider_details=details or None))
    if standard is None:
        return Decimal(0)
    if batch is None or batch >= standard:
        return None
    return standard - batch
