"""What of a model request reaches the provider: the canonical forms of key scheme ``model-request/v2``.

A key covers what a provider receives, not the fields pydantic-ai's dataclasses happen to have. Two rules make
that true whatever a pydantic-ai release adds:

- a field that stays on our side never counts (the ``LOCAL_*`` sets below: what no model class of pydantic-ai
  puts into a request, such as a tool's ``kind``, ``sequential``, ``metadata``, ``durable`` or
  ``ui_visibility``, or the request parameters' ``deferred_capabilities``);
- a field at its default value never counts, so a release that adds a field (at its default) cannot change
  a key. Defaults are read from the installed release's dataclasses, once per class.

``docs/durability.rst`` has the table of what a key covers; keep it and these sets in step.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = [
    "LOCAL_MESSAGE_FIELDS",
    "LOCAL_PARAMETERS",
    "LOCAL_PART_FIELDS",
    "LOCAL_TOOL_FIELDS",
    "without_defaults",
]

LOCAL_TOOL_FIELDS = frozenset(
    {
        "kind",  # function, output, external, unapproved: how pydantic-ai handles a call, not what is sent
        "sequential",
        "metadata",
        "durable",
        "ui_visibility",
        "timeout",
        "toolset_id",
        "capability_id",
        "outer_typed_dict_key",
    }
)
"""Tool definition fields no provider receives."""

LOCAL_PARAMETERS = frozenset({"deferred_capabilities", "deferred_capability_ids"})
"""Request parameters no provider receives (their effect, the tools and instructions sent, is covered)."""

LOCAL_MESSAGE_FIELDS = frozenset({"metadata", "duration", "request_timestamp", "state"})
"""Message fields that stay on our side (besides those that change on every attempt, ``message_digests.py``)."""

LOCAL_PART_FIELDS = frozenset({"metadata", "ui_visibility", "tool_kind", "content_file_digests", "record_id"})
"""Message part fields that stay on our side (a tool return's ``metadata`` is never sent to the model; a call's
``tool_kind``, which 2.78 sets to ``output`` on an output tool's call, and the ``content_file_digests`` a tool
result serialises from 2.68 on, are pydantic-ai's own bookkeeping; a capability part's ``record_id``, 2.78, is a
fresh uuid7 on every try and never sent to the model)."""

_DISCRIMINATORS = frozenset({"kind", "part_kind"})
"""What tells a message or part from another in the serialised form: kept even at its default."""

_NO_DEFAULT = object()
_EMPTY: tuple[Any, ...] = (None, [], {})


@lru_cache(maxsize=256)
def _defaults(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """The default of each field of dataclass ``cls``, as JSON (fields without one, or whose default
    cannot be serialised, are absent: they always count), and the names of its fields."""
    defaults: dict[str, Any] = {}
    if not dataclasses.is_dataclass(cls):
        return defaults, frozenset()
    names = frozenset(item.name for item in dataclasses.fields(cls))
    for item in dataclasses.fields(cls):
        if item.default is not dataclasses.MISSING:
            value = item.default
        elif item.default_factory is not dataclasses.MISSING:
            try:
                value = item.default_factory()
            except Exception:
                continue
        else:
            continue
        try:
            defaults[item.name] = to_jsonable_python(value)
        except Exception:
            continue
    return defaults, names


def without_defaults(
    cls: type, data: dict[str, Any], local: frozenset[str] = frozenset(), keep: frozenset[str] = _DISCRIMINATORS
) -> dict[str, Any]:
    """``data`` (an object of class ``cls`` as JSON) without its ``local`` fields and without the fields at
    their default value (``keep``: fields kept even then); a key the serialiser adds that is no field (a
    computed one) counts only when it is not empty."""
    defaults, names = _defaults(cls)
    return {
        key: value
        for key, value in data.items()
        if key not in local
        and (key in keep or defaults.get(key, _NO_DEFAULT) != value)
        and (key in names or key in keep or value not in _EMPTY)
    }
