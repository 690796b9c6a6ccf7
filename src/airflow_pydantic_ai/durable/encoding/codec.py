"""JSON encoding of what a durable run stores: model responses and tool results.

No pickle. A tool result made only of JSON types is stored as it is. Anything else is stored as a
tree of tagged JSON nodes (``{"type": "bytes", ...}``, ``{"type": "dataclass", "class": ...,
"fields": {...}}``...) that records the exact type of every value inside it, so that a replay
hands pydantic-ai the very objects the tool returned: a ``BinaryImage`` stays a ``BinaryImage``,
a subclass held in a field typed with its base class keeps its own fields, a model nested in a
``ToolReturn``'s ``metadata`` comes back as that model.

Before a value is stored, its tree is rebuilt and compared with the original, type by type: what
would not come back identical is not cached (the caller says so in the log, naming the tool).

Classes are looked up only in modules the process has already imported (the DAG file imports the
types its tools return), so a cache entry can never make a worker import a module, and a class is built only
where the code allows it (``allowed_types.py``: the tool's declared return type, the tool's own module,
pydantic-ai's result types), never because the entry names it: a value naming any other class, or a class
whose validation imports or calls code (``ImportString``), is refused when stored and when read. One exception
keeps replays type-exact under ``airflow dags test``, which imports the DAG file a second time under
the same module name (to sync the dags folder) while the task runs the first import's tools: when a
value is stored, a class whose module now holds a *twin* (another class object at the same path) is
remembered, and the path is read back as that class for as long as the module still holds the same
twin. Anything else (the module reloaded since, or gone) is looked up in ``sys.modules`` as usual.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import math
import sys
import uuid
import weakref
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.encoding.roundtrip import (
    MAX_DEPTH,
    MAX_INT_BITS,
    is_plain_json,
    same,
    undeclared_state,
)
from airflow_pydantic_ai.durable.errors import DurableError

__all__ = [
    "UnsupportedValue",
    "decode_response",
    "decode_value",
    "encode_response",
    "encode_value",
    "iter_text",
]

_RESPONSE_ADAPTER: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)


class UnsupportedValue(DurableError, ValueError):
    """A value that cannot be stored as JSON and rebuilt faithfully."""


def encode_response(response: ModelResponse) -> Any:
    """JSON data for a model response."""
    return _RESPONSE_ADAPTER.dump_python(response, mode="json")


def decode_response(data: Any) -> ModelResponse:
    """Rebuild a stored model response, with zero usage: a replayed step costs nothing."""
    response = _RESPONSE_ADAPTER.validate_python(data)
    return replace(response, usage=RequestUsage())


def encode_value(value: Any, allowed: AllowedTypes = UNDECLARED) -> dict[str, Any]:
    """Tagged JSON for a tool result; raises :class:`UnsupportedValue` if it cannot be rebuilt exactly, or names a
    class ``allowed`` does not accept (a replay could not rebuild it; the default accepts only the classes every
    tool may return)."""
    if is_plain_json(value):
        return {"type": "json", "value": value}
    try:
        encoded = _encode(value, 0)
        # The stored form must give back the same value, type for type, or a replay would differ.
        if not same(_Decoder(allowed).decode(encoded, 0), value):
            raise UnsupportedValue(f"a {type(value).__name__} does not come back identical from its JSON form")
    except UnsupportedValue:
        raise
    except RecursionError:
        raise UnsupportedValue(f"a {type(value).__name__} is nested too deeply") from None
    except Exception as error:
        raise UnsupportedValue(f"a {type(value).__name__} cannot be stored as JSON: {error}") from error
    return encoded


def decode_value(encoded: Any, allowed: AllowedTypes = UNDECLARED) -> Any:
    """Rebuild a tool result from :func:`encode_value`'s output, building only the classes ``allowed`` accepts;
    raises :class:`UnsupportedValue`."""
    try:
        return _Decoder(allowed).decode(encoded, 0)
    except UnsupportedValue:
        raise
    except Exception as error:
        raise UnsupportedValue(f"the stored value cannot be rebuilt: {type(error).__name__}: {error}") from error


def iter_text(payload: Any) -> Iterator[str]:
    """Every string in a stored payload, dict keys included, with stored ``bytes`` decoded as UTF-8.

    For scanning what an entry would reveal (secrets): base64 hides nothing from a reader.
    """
    pending = [payload]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            if item.get("type") in ("bytes", "bytearray") and isinstance(item.get("value"), str):
                yield _decoded_text(item["value"])
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)


def _decoded_text(encoded: str) -> str:
    try:
        return base64.b64decode(encoded).decode("utf-8", "replace")
    except ValueError:
        return ""


# --- encoding ------------------------------------------------------------------------------------


_TWINS: dict[str, tuple[weakref.ref[type], weakref.ref[type]]] = {}
"""By class path: (the class a value was stored of, the other class ``sys.modules`` held at that path then)."""


def _class_path(cls: type) -> str:
    if "<locals>" in cls.__qualname__:
        raise UnsupportedValue(f"{cls.__qualname__} is defined inside a function and cannot be rebuilt")
    path = f"{cls.__module__}:{cls.__qualname__}"
    _remember_twin(path, cls)
    return path


def _remember_twin(path: str, cls: type) -> None:
    """Remember ``cls`` if ``sys.modules`` holds another class at its path (two imports of one file)."""
    try:
        held = _module_attribute(path)
    except UnsupportedValue:
        held = None
    if held is cls or not isinstance(held, type):
        _TWINS.pop(path, None)
    else:
        _TWINS[path] = (weakref.ref(cls), weakref.ref(held))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _encode_zone(zone: dt.tzinfo) -> dict[str, Any]:
    """A time zone by what rebuilds it: a zone name (``ZoneInfo``, pendulum's ``Timezone``), or an
    offset and its name (``datetime.timezone``, pendulum's ``FixedTimezone``)."""
    kind = type(zone)
    if isinstance(zone, zoneinfo.ZoneInfo) and zone.key:
        return {"key": zone.key, "class": _class_path(kind)}
    if kind is dt.timezone:
        offset = zone.utcoffset(None)
        assert offset is not None  # a datetime.timezone always has one
        return {"offset": [offset.days, offset.seconds, offset.microseconds], "name": zone.tzname(None)}
    offset_seconds, name = getattr(zone, "offset", None), getattr(zone, "name", None)
    if type(offset_seconds) is int and (name is None or type(name) is str):  # pendulum's FixedTimezone
        return {"fixed": offset_seconds, "name": name, "class": _class_path(kind)}
    raise UnsupportedValue(f"a {kind.__name__} time zone cannot be rebuilt")


def _encode_clock(value: dt.datetime | dt.time) -> dict[str, Any]:
    """A ``datetime`` or ``time`` (or a subclass such as pendulum's ``DateTime``): wall clock, fold, zone."""
    base = "datetime" if isinstance(value, dt.datetime) else "time"
    node: dict[str, Any] = {"type": base, "value": value.replace(tzinfo=None).isoformat(), "fold": value.fold}
    if type(value) not in (dt.datetime, dt.time):
        node["class"] = _class_path(type(value))
    if value.tzinfo is not None:
        node["zone"] = _encode_zone(value.tzinfo)
    return node


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    """A (cached: building one costs milliseconds) TypeAdapter for ``cls``."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def _encode_adapted(value: Any) -> dict[str, Any]:
    """Any other value whose own type pydantic can write as JSON and read back (``Path``, ``HttpUrl``,
    ``IPv4Address``...); the round-trip check decides whether it came back identical."""
    cls = type(value)
    try:
        data = _adapter(cls).dump_python(value, mode="json")
    except Exception as error:
        raise UnsupportedValue(f"a {cls.__name__} cannot be stored as JSON") from error
    return {"type": "adapted", "class": _class_path(cls), "value": data}


def _fields_of(value: Any, names: Any, depth: int) -> dict[str, Any]:
    return {name: _encode(getattr(value, name), depth + 1) for name in names}


def _json(node: dict[str, Any]) -> bool:
    return node["type"] == "json"


def _encode(value: Any, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise UnsupportedValue("it is nested too deeply")
    kind = type(value)
    if kind is int and value.bit_length() > MAX_INT_BITS:
        raise UnsupportedValue("an int of more than 3,900 digits cannot be stored as JSON")
    if value is None or kind is str or kind is bool or kind is int or (kind is float and math.isfinite(value)):
        return {"type": "json", "value": value}
    if kind is float:  # nan, inf, -inf
        return {"type": "float", "value": repr(value)}
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        items = [_encode(item, depth + 1) for item in value]
        if kind is list and all(_json(item) for item in items):  # a plain JSON list: one untagged leaf
            return {"type": "json", "value": [item["value"] for item in items]}
        return {"type": kind.__name__, "items": items}
    if kind is dict:
        pairs = [(_encode(key, depth + 1), _encode(item, depth + 1)) for key, item in value.items()]
        if all(type(key) is str and _json(item) for key, (_, item) in zip(value, pairs, strict=True)):
            return {"type": "json", "value": {key["value"]: item["value"] for key, item in pairs}}
        return {"type": "dict", "items": [[key, item] for key, item in pairs]}
    if kind is bytes or kind is bytearray:
        return {"type": kind.__name__, "value": _b64(bytes(value))}
    if isinstance(value, (dt.datetime, dt.time)):
        return _encode_clock(value)
    if isinstance(value, dt.date):
        return _subclassed({"type": "date", "value": value.isoformat()}, value, dt.date)
    if isinstance(value, dt.timedelta):
        return _subclassed(
            {"type": "timedelta", "value": [value.days, value.seconds, value.microseconds]}, value, dt.timedelta
        )
    if kind is uuid.UUID:
        return {"type": "uuid", "value": str(value)}
    if kind is decimal.Decimal:
        return {"type": "decimal", "value": str(value)}
    if isinstance(value, enum.Enum):
        return {"type": "enum", "class": _class_path(kind), "name": value.name}
    if isinstance(value, BaseModel):
        node: dict[str, Any] = {
            "type": "pydantic",
            "class": _class_path(kind),
            "fields": _fields_of(value, kind.model_fields, depth),
            "set": sorted(value.model_fields_set),
        }
        if value.__pydantic_extra__ is not None:
            node["extra"] = _encode(dict(value.__pydantic_extra__), depth + 1)
        if value.__pydantic_private__ is not None:
            node["private"] = _encode(dict(value.__pydantic_private__), depth + 1)
        _add_attributes(node, value, undeclared_state(value, kind.model_fields), depth)
        return node
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [item.name for item in dataclasses.fields(value)]
        node = {"type": "dataclass", "class": _class_path(kind), "fields": _fields_of(value, names, depth)}
        _add_attributes(node, value, undeclared_state(value, names), depth)
        return node
    return _encode_adapted(value)


def _add_attributes(node: dict[str, Any], value: Any, names: list[str], depth: int) -> None:
    if names:
        node["attributes"] = _fields_of(value, names, depth)


def _subclassed(node: dict[str, Any], value: Any, base: type) -> dict[str, Any]:
    if type(value) is not base:
        node["class"] = _class_path(type(value))
    return node


# --- decoding ------------------------------------------------------------------------------------


def _module_attribute(path: str) -> Any:
    """What ``sys.modules`` holds at ``path`` (``module:qualname``); never imports anything."""
    module_name, _, qualname = path.partition(":")
    target: Any = sys.modules.get(module_name)
    if target is None:
        raise UnsupportedValue(f"module {module_name!r} of {path} is not imported in this process")
    for name in qualname.split("."):
        target = getattr(target, name, None)
        if target is None:
            raise UnsupportedValue(f"{path} no longer exists")
    return target


def _import_class(path: str, is_expected: Callable[[type], bool], what: str) -> Any:
    path = str(path)
    target = _module_attribute(path)
    twin = _TWINS.get(path)
    if twin is not None and twin[1]() is target:  # the module still holds the twin seen when storing
        target = twin[0]() or target
    if not isinstance(target, type) or not is_expected(target):
        raise UnsupportedValue(f"{path} is no longer {what}")
    if f"{target.__module__}:{target.__qualname__}" != path:  # a name imported into another module
        raise UnsupportedValue(f"{path} is {target.__module__}:{target.__qualname__}, not a class defined there")
    return target


def _is_enum(cls: type) -> bool:
    return issubclass(cls, enum.Enum)


def _is_model(cls: type) -> bool:
    return issubclass(cls, BaseModel)


def _is_dataclass(cls: type) -> bool:
    return dataclasses.is_dataclass(cls)


def _rebuilt(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of ``cls`` with exactly these field values, without running its ``__init__``."""
    instance: Any = object.__new__(cls)
    for name, item in fields.items():
        object.__setattr__(instance, name, item)
    return instance


@dataclasses.dataclass(frozen=True)
class _Decoder:
    """Rebuilds a stored tree, building only the classes ``allowed`` accepts."""

    allowed: AllowedTypes

    def cls(self, path: Any, is_expected: Callable[[type], bool], what: str, *, adapted: bool = False) -> Any:
        """The class a node names, if it is what the node needs and the code allows it (never imported)."""
        found = _import_class(path, is_expected, what)
        if not (self.allowed.adapts(found) if adapted else self.allowed.accepts(found)):
            raise UnsupportedValue(self.allowed.why_not(found))
        return found

    def fields(self, node: dict[str, Any], expected: Any, depth: int) -> dict[str, Any]:
        fields = node["fields"]
        if not isinstance(fields, dict) or set(fields) != set(expected):
            raise UnsupportedValue(f"the fields of {node['class']} changed since the value was stored")
        return {name: self.decode(item, depth + 1) for name, item in fields.items()}

    def attributes(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        """The state stored beside the declared fields (see ``_undeclared_state``)."""
        return {name: self.decode(item, depth + 1) for name, item in (node.get("attributes") or {}).items()}

    def zone(self, node: dict[str, Any]) -> dt.tzinfo:
        if "key" in node:
            cls = self.cls(node["class"], lambda c: issubclass(c, zoneinfo.ZoneInfo), "a ZoneInfo")
            return cls(node["key"])  # type: ignore[no-any-return]
        if "offset" in node:
            days, seconds, microseconds = node["offset"]
            offset = dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)
            plain = dt.timezone(offset)
            return plain if plain.tzname(None) == node["name"] else dt.timezone(offset, node["name"])
        cls = self.cls(node["class"], lambda c: issubclass(c, dt.tzinfo), "a time zone")
        return cls(int(node["fixed"]), name=node["name"])  # type: ignore[no-any-return]

    def clock(self, node: dict[str, Any]) -> Any:
        base = dt.datetime if node["type"] == "datetime" else dt.time
        value: Any = base.fromisoformat(node["value"])
        zone = self.zone(node["zone"]) if "zone" in node else None
        fold = int(node.get("fold", 0))
        if "class" not in node:
            return value.replace(tzinfo=zone, fold=fold)
        cls = self.cls(node["class"], lambda c: issubclass(c, base), f"a {base.__name__}")
        fields = [value.hour, value.minute, value.second, value.microsecond]
        if base is dt.datetime:
            fields = [value.year, value.month, value.day, *fields]
        return cls(*fields, tzinfo=zone, fold=fold)

    def subclassed(self, node: dict[str, Any], base: type, build: Callable[[type], Any]) -> Any:
        if "class" not in node:
            return build(base)
        return build(self.cls(node["class"], lambda c: issubclass(c, base), f"a {base.__name__}"))

    def decode(self, node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise UnsupportedValue("it is nested too deeply")
        if not isinstance(node, dict):
            raise UnsupportedValue(f"a stored node is a {type(node).__name__}, not an object")
        kind = node.get("type")
        if kind == "json":
            return node["value"]
        if kind in ("list", "tuple", "set", "frozenset"):
            items = [self.decode(item, depth + 1) for item in node["items"]]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
        if kind == "dict":
            return {self.decode(key, depth + 1): self.decode(item, depth + 1) for key, item in node["items"]}
        if kind in ("bytes", "bytearray"):
            data = base64.b64decode(node["value"], validate=True)
            return data if kind == "bytes" else bytearray(data)
        if kind == "float":
            return float(node["value"])
        if kind in ("datetime", "time"):
            return self.clock(node)
        if kind == "date":
            day = dt.date.fromisoformat(node["value"])
            return self.subclassed(node, dt.date, lambda cls: cls(day.year, day.month, day.day))
        if kind == "timedelta":
            days, seconds, microseconds = node["value"]
            return self.subclassed(
                node, dt.timedelta, lambda cls: cls(days=days, seconds=seconds, microseconds=microseconds)
            )
        if kind == "adapted":
            cls = self.cls(node["class"], lambda c: True, "a class", adapted=True)
            return _adapter(cls).validate_python(node["value"])
        if kind == "uuid":
            return uuid.UUID(node["value"])
        if kind == "decimal":
            return decimal.Decimal(node["value"])
        if kind == "enum":
            return self.cls(node["class"], _is_enum, "an enum")[node["name"]]
        if kind == "pydantic":
            cls = self.cls(node["class"], _is_model, "a pydantic model")
            instance: Any = cls.__new__(cls)
            object.__setattr__(instance, "__dict__", self.fields(node, cls.model_fields, depth))
            object.__setattr__(instance, "__pydantic_fields_set__", set(node["set"]))
            extra, private = node.get("extra"), node.get("private")
            object.__setattr__(instance, "__pydantic_extra__", None if extra is None else self.decode(extra, depth + 1))
            private_state = None if private is None else self.decode(private, depth + 1)
            object.__setattr__(instance, "__pydantic_private__", private_state)
            for name, item in self.attributes(node, depth).items():
                object.__setattr__(instance, name, item)
            return instance
        if kind == "dataclass":
            cls = self.cls(node["class"], _is_dataclass, "a dataclass")
            names = [item.name for item in dataclasses.fields(cls)]
            return _rebuilt(cls, {**self.fields(node, names, depth), **self.attributes(node, depth)})
        raise UnsupportedValue(f"unknown stored value type {kind!r}")
