"""JSON encoding of what a durable run stores: model responses and tool results.

No pickle: a tool result is stored as tagged JSON, and replayed with its type when the type can be
rebuilt (pydantic models, dataclasses such as pydantic-ai's ``ToolReturn`` and ``BinaryContent``,
bytes). A value whose round trip through JSON would not give the same value back is not cached.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RequestUsage

__all__ = [
    "UnsupportedValue",
    "decode_response",
    "decode_value",
    "encode_response",
    "encode_value",
    "is_plain_json",
]

_RESPONSE_ADAPTER: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)


class UnsupportedValue(ValueError):
    """A value that cannot be stored as JSON and rebuilt faithfully."""


def encode_response(response: ModelResponse) -> Any:
    """JSON data for a model response."""
    return _RESPONSE_ADAPTER.dump_python(response, mode="json")


def decode_response(data: Any) -> ModelResponse:
    """Rebuild a stored model response, with zero usage: a replayed step costs nothing."""
    response = _RESPONSE_ADAPTER.validate_python(data)
    return replace(response, usage=RequestUsage())


def is_plain_json(value: Any, _depth: int = 0) -> bool:
    """Whether ``value`` is made only of JSON types (str keys), so it round-trips unchanged."""
    if _depth > 200:
        return False
    if value is None or isinstance(value, (str, bool)):
        return True
    if isinstance(value, int):
        return type(value) is int
    if isinstance(value, float):
        return type(value) is float and value == value and value not in (float("inf"), float("-inf"))
    if type(value) is list:
        return all(is_plain_json(item, _depth + 1) for item in value)
    if type(value) is dict:
        return all(isinstance(key, str) and is_plain_json(item, _depth + 1) for key, item in value.items())
    return False


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(path: str) -> type:
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for name in qualname.split("."):
        target = getattr(target, name)
    if not isinstance(target, type):
        raise UnsupportedValue(f"{path} is not a class")
    return target


def _encode_typed(value: Any) -> dict[str, Any]:
    cls = type(value)
    if "<locals>" in cls.__qualname__:
        raise UnsupportedValue(f"{cls.__qualname__} is defined inside a function and cannot be rebuilt")
    if isinstance(value, BaseModel):
        return {"type": "pydantic", "class": _class_path(cls), "value": value.model_dump(mode="json")}
    if dataclasses.is_dataclass(value):
        data = TypeAdapter(cls).dump_python(value, mode="json")
        return {"type": "dataclass", "class": _class_path(cls), "value": data}
    raise UnsupportedValue(f"a {cls.__name__} cannot be stored as JSON")


def _decode_typed(encoded: dict[str, Any]) -> Any:
    cls = _import_class(encoded["class"])
    if encoded["type"] == "pydantic":
        if not issubclass(cls, BaseModel):
            raise UnsupportedValue(f"{encoded['class']} is no longer a pydantic model")
        return cls.model_validate(encoded["value"])
    return TypeAdapter(cls).validate_python(encoded["value"])


def encode_value(value: Any) -> dict[str, Any]:
    """Tagged JSON for a tool result; raises :class:`UnsupportedValue` if it cannot be rebuilt."""
    if is_plain_json(value):
        return {"type": "json", "value": value}
    if isinstance(value, (bytes, bytearray)):
        return {"type": "bytes", "value": base64.b64encode(bytes(value)).decode("ascii")}
    try:
        encoded = _encode_typed(value)
        # The stored form must survive a round trip, or a replay would hand back something else.
        if _encode_typed(_decode_typed(encoded)) != encoded:
            raise UnsupportedValue(f"a {type(value).__name__} does not survive a JSON round trip")
    except UnsupportedValue:
        raise
    except Exception as error:
        raise UnsupportedValue(f"a {type(value).__name__} cannot be stored as JSON: {error}") from error
    return encoded


def decode_value(encoded: dict[str, Any]) -> Any:
    """Rebuild a tool result from :func:`encode_value`'s output; raises :class:`UnsupportedValue`."""
    kind = encoded.get("type")
    try:
        if kind == "json":
            return encoded["value"]
        if kind == "bytes":
            return base64.b64decode(encoded["value"])
        if kind in ("pydantic", "dataclass"):
            return _decode_typed(encoded)
    except UnsupportedValue:
        raise
    except Exception as error:
        raise UnsupportedValue(f"stored {kind} value cannot be rebuilt: {error}") from error
    raise UnsupportedValue(f"unknown stored value type {kind!r}")
