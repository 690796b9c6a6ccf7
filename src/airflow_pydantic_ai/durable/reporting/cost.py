"""What a model response cost, in USD, from pydantic-ai's own price data.

pydantic-ai prices a response with its ``genai-prices`` dependency (``ModelResponse.cost()``): the model
name, the provider and the tokens the response reports. This module only asks it, and says ``None``
where pydantic-ai does not know a price (a ``FunctionModel``, a self-hosted model, a response without
usage). There is no price table here, and never will be: prices move, pydantic-ai's data follows them.

Guarantees: never raises (an unknown model is ``None``, not an error); never does I/O beyond what
pydantic-ai's pricing does (its data ships with the package).
"""

from __future__ import annotations

from decimal import Decimal

from pydantic_ai.messages import ModelResponse

__all__ = ["response_cost"]


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
