"""The round-trip check of the codec: would a stored value come back as the very same value?

Equal is not enough: ``1 == 1.0 == True``, a datetime in another zone can equal this one, a subclass
can compare equal to its base. :func:`same` compares type by type at every level, fields, extra
attributes and private state included, so that only a value that would be rebuilt identically is
recorded (the codec stores nothing else).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

from pydantic import BaseModel

__all__ = ["MAX_DEPTH", "MAX_INT_BITS", "is_plain_json", "same", "undeclared_state"]

MAX_DEPTH = 200
"""How deep a stored value may nest."""
MAX_INT_BITS = 13_000
"""About 3,900 decimal digits: Python refuses to write an int of more than 4,300 digits as JSON."""


def is_plain_json(value: Any, _depth: int = 0) -> bool:
    """Whether ``value`` is made only of exact JSON types (no subclasses, str keys, finite floats)."""
    if _depth > MAX_DEPTH:
        return False
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return True
    if kind is int:
        return value.bit_length() <= MAX_INT_BITS
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(is_plain_json(item, _depth + 1) for item in value)
    if kind is dict:
        return all(type(key) is str and is_plain_json(item, _depth + 1) for key, item in value.items())
    return False


def undeclared_state(value: Any, declared: Any) -> list[str]:
    """Attributes beyond the declared fields: set by ``__post_init__`` / ``model_post_init``, cached
    properties, slots declared by a plain base class. They must come back too, or a replay is short."""
    names = [name for name in getattr(value, "__dict__", {}) if name not in declared]
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot.startswith("__") and not slot.endswith("__"):
                slot = f"_{cls.__name__.lstrip('_')}{slot}"  # a private slot is stored under its mangled name
            if slot.startswith("__") or slot in declared or slot in names:
                continue  # __dict__, __weakref__, pydantic's own slots
            if hasattr(value, slot):
                names.append(slot)
    return names


def same(rebuilt: Any, original: Any) -> bool:
    """Equal, and of the same type at every level (``1 == 1.0 == True`` is not the same here)."""
    return _same(rebuilt, original, 0)


def _same(rebuilt: Any, original: Any, depth: int) -> bool:
    """Equal, and of the same type at every level (``1 == 1.0 == True`` is not the same here)."""
    if depth > MAX_DEPTH or type(rebuilt) is not type(original):
        return False
    kind = type(original)
    if kind is float:
        return rebuilt == original or (math.isnan(rebuilt) and math.isnan(original))
    if kind is list or kind is tuple:
        return len(rebuilt) == len(original) and all(
            _same(a, b, depth + 1) for a, b in zip(rebuilt, original, strict=True)
        )
    if kind is dict:
        if len(rebuilt) != len(original):
            return False
        return all(
            _same(a_key, b_key, depth + 1) and _same(a_item, b_item, depth + 1)
            for (a_key, a_item), (b_key, b_item) in zip(rebuilt.items(), original.items(), strict=True)
        )
    if kind is set or kind is frozenset:
        # Members are hashable: pair each rebuilt member with the original member it equals.
        members = {member: member for member in original}
        return rebuilt == original and all(_same(member, members[member], depth + 1) for member in rebuilt)
    if isinstance(original, (dt.date, dt.time, dt.timedelta)):
        # Equal instants are not enough: the zone (its type and name), the fold and any subclass state must
        # come back too, and a subclass's repr shows what its equality may not compare.
        clock: Any = rebuilt, original  # datetimes and times have a zone and a fold; dates, durations not
        return (
            rebuilt == original
            and repr(rebuilt) == repr(original)
            and type(getattr(clock[0], "tzinfo", None)) is type(getattr(clock[1], "tzinfo", None))
            and (getattr(clock[1], "tzinfo", None) is None or clock[0].tzname() == clock[1].tzname())
            and getattr(clock[0], "fold", 0) == getattr(clock[1], "fold", 0)
        )
    if isinstance(original, BaseModel):
        names = list(kind.model_fields)
        extra = undeclared_state(original, names)
        return (
            rebuilt.model_fields_set == original.model_fields_set
            and undeclared_state(rebuilt, names) == extra
            and _same_attributes(rebuilt, original, names + extra, depth)
            and _same(rebuilt.__pydantic_extra__, original.__pydantic_extra__, depth + 1)
            and _same(rebuilt.__pydantic_private__, original.__pydantic_private__, depth + 1)
        )
    if dataclasses.is_dataclass(original):
        names = [item.name for item in dataclasses.fields(original)]
        extra = undeclared_state(original, names)
        return undeclared_state(rebuilt, names) == extra and _same_attributes(rebuilt, original, names + extra, depth)
    return bool(rebuilt == original)


def _same_attributes(rebuilt: Any, original: Any, names: list[str], depth: int) -> bool:
    return all(_same(getattr(rebuilt, name), getattr(original, name), depth + 1) for name in names)
