"""Which classes a stored value may name: what the code declares, never what the entry says.

A cache entry is data anyone who can write to the bucket can forge. The codec builds the classes a stored
value names (a model, a dataclass, an enum, a value pydantic validates such as ``Path``), so a forged entry
must not be able to name a class the tool could never have returned. :class:`AllowedTypes` is the answer of
the code: the classes reachable from a tool's declared return type (its annotation, the fields of the models
and dataclasses in it, recursively), the classes defined in the tool's own module (the DAG file that defines
the tool and the types it returns), and the classes pydantic-ai and the standard library give every tool
(``BinaryContent``, ``ToolReturn``, ``datetime``...). A value pydantic *validates* (the codec's ``adapted``
node) is further limited to such a class that validates without importing or calling code: never
``ImportString``, a callable or ``type``. The same check runs when a value is stored (the round trip), so what
a replay would refuse is not cached in the first place.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import ipaddress
import pathlib
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel
from pydantic.types import ImportString

__all__ = ["UNDECLARED", "AllowedTypes", "declared_by", "declared_output"]

_ALWAYS_MODULES = ("pydantic_ai.", "datetime", "zoneinfo", "pendulum", "uuid", "decimal", "enum")
"""Modules (and their sub-modules) whose classes any tool may return: pydantic-ai's own result types, and the
date, time and number types the codec rebuilds without running their code."""

_SAFE_ADAPTED: tuple[type, ...] = (
    pathlib.PurePath,
    ipaddress.IPv4Address,
    ipaddress.IPv6Address,
    ipaddress.IPv4Network,
    ipaddress.IPv6Network,
    ipaddress.IPv4Interface,
    ipaddress.IPv6Interface,
)
"""Classes pydantic validates from plain data without running code of the entry's choosing."""

_SAFE_ADAPTED_MODULES = ("pydantic.networks", "pydantic_core")
"""pydantic's URL and e-mail types: validated by parsing a string."""

_NEVER: tuple[type, ...] = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    functools.partial,
)
"""Types whose validation or construction calls or imports code: never built from a stored value."""


def _within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix.rstrip(".") or module.startswith(prefix.rstrip(".") + ".") for prefix in prefixes)


def _runs_code(cls: type) -> bool:
    """Whether validating ``cls`` from data may import or call code (``ImportString``, callables, ``type``)."""
    return cls is ImportString or issubclass(cls, _NEVER)


@dataclass(frozen=True)
class AllowedTypes:
    """The classes a stored value may name when it is rebuilt (see the module's docstring)."""

    declared: frozenset[type] = frozenset()
    """The declared return types and every class reachable from them."""
    modules: frozenset[str] = frozenset()
    """Modules whose own classes are accepted: the tool's (its DAG file)."""

    @classmethod
    def of(cls, *annotations: Any, modules: Iterable[str] = ()) -> AllowedTypes:
        """The classes reachable from ``annotations`` and those defined in ``modules``."""
        found: set[type] = set()
        for annotation in annotations:
            _reach(annotation, found)
        return cls(frozenset(found), frozenset(name for name in modules if name))

    def __or__(self, other: AllowedTypes) -> AllowedTypes:
        return AllowedTypes(self.declared | other.declared, self.modules | other.modules)

    def accepts(self, cls: type) -> bool:
        """Whether a stored value may name ``cls`` (a model, dataclass, enum, date or time type)."""
        if _runs_code(cls):
            return False
        return cls in self.declared or cls.__module__ in self.modules or _within(cls.__module__, _ALWAYS_MODULES)

    def adapts(self, cls: type) -> bool:
        """Whether pydantic may validate a stored value as ``cls`` (the codec's ``adapted`` node)."""
        if _runs_code(cls):
            return False
        if issubclass(cls, _SAFE_ADAPTED) or _within(cls.__module__, _SAFE_ADAPTED_MODULES):
            return True
        return cls in self.declared or cls.__module__ in self.modules

    def why_not(self, cls: type) -> str:
        """Why a value naming ``cls`` is refused, in words that say what to change."""
        if _runs_code(cls):
            return f"{cls.__module__}:{cls.__qualname__} runs code when it is rebuilt and is never stored or read back"
        return (
            f"{cls.__module__}:{cls.__qualname__} is neither in the tool's declared return type nor defined in "
            "the tool's module; annotate the tool's return type with it"
        )


UNDECLARED: Final = AllowedTypes()
"""Nothing declared: only the classes every tool may return (pydantic-ai's, dates and times)."""


def _reach(annotation: Any, found: set[type]) -> None:
    """Add every class reachable from ``annotation`` to ``found`` (fields of models and dataclasses included)."""
    pending = [annotation]
    while pending:
        item = pending.pop()
        value = getattr(item, "__value__", None)  # a ``type X = ...`` alias
        if value is not None and not isinstance(item, type):
            pending.append(value)
            continue
        arguments = typing.get_args(item)
        origin = typing.get_origin(item)
        if origin is not None:
            pending.extend(arguments)
            if isinstance(origin, type):
                pending.append(origin)
            continue
        if not isinstance(item, type) or item in found:
            continue
        found.add(item)
        if issubclass(item, BaseModel):
            pending.extend(field.annotation for field in item.model_fields.values())
        elif dataclasses.is_dataclass(item) or typing.is_typeddict(item) or hasattr(item, "_fields"):
            pending.extend(_hints(item).values())


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # an unresolvable forward reference: take what is there
        return {name: hint for name, hint in getattr(cls, "__annotations__", {}).items() if not isinstance(hint, str)}


def declared_by(function: Callable[..., Any] | None) -> AllowedTypes:
    """What a tool (or output function) may return: its return annotation's classes and its module's own (for a
    tool whose function is unknown, an MCP server's: only what every tool may return)."""
    if function is None:
        return UNDECLARED
    try:
        return _declared_by(function)
    except TypeError:  # an unhashable callable object
        return _declared_by.__wrapped__(function)


@functools.lru_cache(maxsize=1024)
def _declared_by(function: Callable[..., Any]) -> AllowedTypes:
    try:
        annotation = typing.get_type_hints(function, include_extras=True).get("return")
    except Exception:  # an unresolvable forward reference: the annotation as written, if it is an object
        try:
            annotation = inspect.signature(function).return_annotation
        except (TypeError, ValueError):
            annotation = None
        annotation = None if annotation is inspect.Signature.empty or isinstance(annotation, str) else annotation
    return AllowedTypes.of(annotation, modules=[getattr(function, "__module__", None) or ""])


def declared_output(output_type: Any) -> AllowedTypes:
    """What an agent's output may hold, from its ``output_type``: the types it names, what its output functions
    return, and their modules' own classes (``ToolOutput``, ``NativeOutput``, ``PromptedOutput`` and
    ``TextOutput`` are looked into; a list of outputs is each of them)."""
    allowed = AllowedTypes()
    pending = [output_type]
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, type) or typing.get_origin(item) is not None:
            allowed |= AllowedTypes.of(item, modules=[getattr(item, "__module__", "") or ""])
        elif any(hasattr(item, name) for name in ("output", "outputs", "output_function")):
            pending.extend(
                getattr(item, name) for name in ("output", "outputs", "output_function") if hasattr(item, name)
            )
        elif callable(item):
            allowed |= declared_by(item)
    return allowed
