"""The field sets of the pydantic-ai releases this provider supports: what a legacy key was digested over.

The first key scheme (``model-request/v1``, releases 0.1.0 to 0.3.0) digested every field of the request's
dataclasses (tool definitions, request parameters, messages and their parts), so its keys depended on the
field set of the pydantic-ai release installed when they were recorded. To replay such a recording under
another release, the legacy key is recomputed as that release would have: :func:`as_release` turns the
data of one object, serialised by the release installed now, into what the recording release serialised
(fields it did not have are dropped, fields it had and this one does not are added at their default).

:data:`FIELDS_ADDED` is that table: per release, the fields (with their default, as JSON) that release added
to each class, relative to the release before it. It was read from the dataclasses of 2.62.0, 2.68.0 and
2.78.0 (``dataclasses.fields``); a newly supported release adds one row. Classes a release introduced are
absent: an older release could not have recorded them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "FIELDS_ADDED",
    "FILE_RECORD_SINCE",
    "KNOWN_RELEASES",
    "VALUES_STAMPED",
    "as_release",
    "installed_release",
    "nearest_known",
]

_TOOL_UI = {"ui_visibility": None}
_NATIVE = {"provider_settings": None}

FIELDS_ADDED: dict[str, dict[str, dict[str, Any]]] = {
    "2.62": {},  # the oldest supported release: the base every later row adds to
    "2.68": {
        "AdvisorTool": _NATIVE,
        "FileSearchTool": _NATIVE,
        "ImageGenerationTool": _NATIVE,
        "ModelResponse": {"canonical_system": None, "model_id": None},
        "SpeechPart": {"timestamps": None},
        "SystemPromptPart": {"context_id": None},
        "WebFetchTool": _NATIVE,
        "WebSearchTool": _NATIVE,
    },
    "2.78": {
        "AgentInstructionSource": {"kind": "agent"},
        "CapabilityInstructionSource": {"kind": "capability"},
        "InstructionDeltaPart": {"authority": "operator"},
        "LoadCapabilityCallPart": _TOOL_UI,
        "LoadCapabilityReturnPart": _TOOL_UI,
        "ModelRequestParameters": {"deferred_capabilities": []},
        "ModelResponse": {"duration": None, "request_timestamp": None},
        "NativeToolCallPart": _TOOL_UI,
        "NativeToolReturnPart": _TOOL_UI,
        "NativeToolSearchCallPart": _TOOL_UI,
        "NativeToolSearchReturnPart": _TOOL_UI,
        "RunInstructionSource": {"kind": "run"},
        "ToolCallPart": _TOOL_UI,
        "ToolDefinition": {"durable": None, "ui_visibility": None},
        "ToolReturnPart": _TOOL_UI,
        "ToolSearchCallPart": _TOOL_UI,
        "ToolSearchReturnPart": _TOOL_UI,
        "ToolsetInstructionSource": {"kind": "toolset"},
    },
}
"""Per supported release (major.minor), the fields it added to each class, with their default as JSON."""

VALUES_STAMPED: dict[str, dict[str, dict[str, tuple[Any, Any]]]] = {
    "2.78": {"ToolCallPart": {"tool_kind": ("output", None)}},
}
"""Per release, values it sets on a field the release before left at another: ``(its value, the value before)``
(2.78 marks the call of an output tool ``tool_kind="output"`` in the conversation; 2.68 left it None)."""

FILE_RECORD_SINCE = "2.68"
"""From 2.68, a tool result serialises ``content_file_digests`` (a list; empty when its content holds no file) next
to any content that is not a scalar: a key the serialiser adds, not a field."""
_FILE_RECORD = "content_file_digests"

KNOWN_RELEASES: tuple[str, ...] = tuple(FIELDS_ADDED)


def _order(release: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in release.split(".")[:2])
    except ValueError:
        return (0,)


@lru_cache(maxsize=1)
def installed_release() -> str:
    """The pydantic-ai release installed here (``2.68.0``), as an entry's ``recorded_with`` names it."""
    for package in ("pydantic-ai-slim", "pydantic-ai"):
        try:
            return version(package)
        except PackageNotFoundError:
            continue
    return "unknown"


def nearest_known(release: str) -> str:
    """The row of :data:`FIELDS_ADDED` whose field set ``release`` has: the newest known release not after it
    (a release between two rows has the field set of the older one, as far as this table knows)."""
    wanted = _order(release)
    found = KNOWN_RELEASES[0]
    for known in KNOWN_RELEASES:
        if _order(known) <= wanted:
            found = known
    return found


def _file_record_as(data: dict[str, Any], here: str, target: str) -> dict[str, Any]:
    """A tool result's ``content_file_digests`` as ``target`` serialised it (:data:`FILE_RECORD_SINCE`)."""
    since = _order(FILE_RECORD_SINCE)
    if _order(target) < since <= _order(here) and _FILE_RECORD in data:
        return {key: value for key, value in data.items() if key != _FILE_RECORD}
    if _order(here) < since <= _order(target) and _FILE_RECORD not in data and "tool_call_id" in data:
        content = data.get("content")
        if str(data.get("part_kind", "")).endswith("return") and isinstance(content, (dict, list)):
            return {**data, _FILE_RECORD: []}
    return data


@dataclass(frozen=True)
class _Change:
    drop: frozenset[str] = frozenset()
    add: dict[str, Any] = field(default_factory=dict)
    rewrite: dict[str, tuple[Any, Any]] = field(default_factory=dict)


@lru_cache(maxsize=16)
def _changes(installed: str, target: str) -> dict[str, _Change]:
    """Per class: the fields to drop, the fields to add (with defaults) and the values to rewrite, to go from
    ``installed`` to ``target``."""
    low, high = sorted((installed, target), key=_order)
    between = [known for known in KNOWN_RELEASES if _order(low) < _order(known) <= _order(high)]
    older = _order(target) < _order(installed)
    changes: dict[str, _Change] = {}
    for known in between:
        for name in {*FIELDS_ADDED[known], *VALUES_STAMPED.get(known, {})}:
            added = FIELDS_ADDED[known].get(name, {})
            change = changes.get(name, _Change())
            if older:  # recorded by an older release: it lacked these fields, and left these values unset
                stamped = VALUES_STAMPED.get(known, {}).get(name, {})
                change = _Change(change.drop | frozenset(added), change.add, {**change.rewrite, **stamped})
            else:  # recorded by a newer release: it had these fields, at their default unless this one sets them
                change = _Change(change.drop, {**change.add, **added}, change.rewrite)
            changes[name] = change
    return changes


def as_release(class_name: str, data: dict[str, Any], target: str, installed: str | None = None) -> dict[str, Any]:
    """``data`` (one object of class ``class_name`` serialised by the installed release) as release ``target``
    serialised it: the fields ``target`` did not have dropped, the ones it had added at their default."""
    here = nearest_known(installed or installed_release())
    if here == target:
        return data
    data = _file_record_as(data, here, target)
    change = _changes(here, target).get(class_name)
    if change is None:
        return data
    adapted = {key: value for key, value in data.items() if key not in change.drop}
    for key, value in change.add.items():
        adapted.setdefault(key, value)
    for key, (now, before) in change.rewrite.items():
        if adapted.get(key) == now:
            adapted[key] = before
    return adapted
