"""Canonical fingerprints of model requests and tool calls.

A fingerprint is a digest of what the provider (or the tool) would actually see, with the fields that
change on every attempt removed: timestamps, run and conversation ids, usage, response ids. It is
computed from canonical JSON (sorted keys, no ``repr()``, sets sorted), so it is the same in every
process whatever ``PYTHONHASHSEED`` is.

Besides the overall digest, a request's *components* (model, instructions, user prompt, history,
settings, each tool definition, output schema, other parameters) are digested separately so that a
mismatch can say what changed.

Each message is digested once per run and the digest of the unchanged prefix is reused, so
fingerprinting a step costs the size of what is new, not the length of the whole history
(``message_digests.py``); canonical JSON and the digest function are in ``canonical.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage

from airflow_pydantic_ai.durable.keys.canonical import FingerprintError, canonical_json, digest, jsonable, strip
from airflow_pydantic_ai.durable.keys.message_digests import MessageDigests
from airflow_pydantic_ai.durable.keys.schemes import KeyScheme
from airflow_pydantic_ai.durable.keys.wire import LOCAL_PARAMETERS, LOCAL_TOOL_FIELDS, without_defaults

__all__ = [
    "COMPONENT_LABELS",
    "TRANSPORT_SETTINGS",
    "FingerprintError",
    "MessageDigests",
    "RequestFingerprint",
    "canonical_json",
    "changed_components",
    "digest",
    "fingerprint_request",
    "fingerprint_tool_call",
]

TRANSPORT_SETTINGS = frozenset({"timeout", "request_timeout", "first_event_timeout", "max_retries", "extra_headers"})
"""Model settings that change how a request travels, not what it asks: never part of a fingerprint."""
# Tool definition fields key scheme v1 left out (v2 leaves out every field no provider receives: wire.py).
_LEGACY_LOCAL_TOOL_FIELDS = frozenset({"metadata", "timeout", "toolset_id", "capability_id"})
_OUTPUT_PARAMS = (
    "output_mode",
    "output_object",
    "output_tools",
    "prompted_output_template",
    "allow_text_output",
    "allow_image_output",
)
_INSTRUCTION_PARAMS = ("instruction_parts", "instruction_visibility")


# Human-readable names of request components, in the order a warning lists them.
COMPONENT_LABELS: dict[str, str] = {
    "model": "model",
    "instructions": "instructions/system prompt",
    "user_prompt": "user prompt",
    "history": "message history",
    "settings": "model settings",
    "tools": "tool definitions",
    "output_schema": "output schema",
    "parameters": "other request parameters",
}


@dataclass(frozen=True)
class RequestFingerprint:
    """The digest that keys a model request, and the digests of its components."""

    digest: str
    components: dict[str, Any]
    conversation: str = ""
    """The digest of the conversation the request carries (what :meth:`MessageDigests.conversation` gives)."""


def _settings_json(settings: Mapping[str, Any] | None) -> Any:
    if not settings:
        return {}
    return jsonable({key: value for key, value in settings.items() if key not in TRANSPORT_SETTINGS})


def _parameter_fields(parameters: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(parameters):
        raise FingerprintError(f"unexpected request parameters type {type(parameters).__name__}")
    return {
        item.name: getattr(parameters, item.name)
        for item in dataclasses.fields(parameters)
        if not item.name.startswith("_")
    }


def _tool_form(tool: Any, scheme: KeyScheme) -> Any:
    """A tool definition as the key covers it: what a provider receives of it (v2), or all its fields (v1)."""
    data = jsonable(tool)
    if not isinstance(data, dict):
        return data
    if scheme.is_wire:
        return without_defaults(type(tool), data, LOCAL_TOOL_FIELDS, keep=frozenset({"name"}))
    return strip(scheme.as_recorded("ToolDefinition", data), _LEGACY_LOCAL_TOOL_FIELDS)


def _wire_parameters(parameters: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """The request parameters without local fields, fields at their default, and the visibilities that say what
    a field's absence says (every tool visible, every instruction in the prefix)."""
    data = {name: jsonable(value) for name, value in fields.items() if name not in LOCAL_PARAMETERS}
    for name, usual in (("tool_visibility", "visible"), ("instruction_visibility", "prefix")):
        if isinstance(data.get(name), dict):
            data[name] = {key: value for key, value in data[name].items() if value != usual} or None
    if isinstance(data.get("instruction_parts"), list):
        # An instruction part's id as it renders (``agent:name``), not the dataclass it is made of.
        data["instruction_parts"] = [
            without_defaults(type(part), {**item, "id": None if part.id is None else str(part.id)})
            if isinstance(item, dict)
            else item
            for part, item in zip(fields["instruction_parts"], data["instruction_parts"], strict=True)
        ]
    if isinstance(data.get("output_object"), dict):
        data["output_object"] = without_defaults(type(fields["output_object"]), data["output_object"])
    return without_defaults(type(parameters), data)


def _legacy_parameters(scheme: KeyScheme, fields: dict[str, Any]) -> dict[str, Any]:
    """The request parameters as the release that recorded a ``model-request/v1`` key serialised them: the
    parameters' own fields, and those of the objects they hold whose field sets changed (native tools, the
    sources of instruction parts)."""
    data = {name: jsonable(value) for name, value in scheme.as_recorded("ModelRequestParameters", fields).items()}
    native = fields.get("native_tools")
    if isinstance(native, list) and isinstance(data.get("native_tools"), list):
        data["native_tools"] = [
            scheme.as_recorded(type(tool).__name__, item) if isinstance(item, dict) else item
            for tool, item in zip(native, data["native_tools"], strict=True)
        ]
    parts = fields.get("instruction_parts")
    if isinstance(parts, list) and isinstance(data.get("instruction_parts"), list):
        adapted = []
        for part, item in zip(parts, data["instruction_parts"], strict=True):
            if isinstance(item, dict):
                item = scheme.as_recorded("InstructionPart", item)
                source = getattr(getattr(part, "id", None), "source", None)
                if isinstance(item.get("id"), dict) and isinstance(item["id"].get("source"), dict):
                    item["id"] = {
                        **item["id"],
                        "source": scheme.as_recorded(type(source).__name__, item["id"]["source"]),
                    }
            adapted.append(item)
        data["instruction_parts"] = adapted
    return data


def fingerprint_request(
    *,
    model_identity: str,
    messages: Sequence[ModelMessage],
    settings: Mapping[str, Any] | None,
    parameters: Any,
    memo: MessageDigests,
) -> RequestFingerprint:
    """Fingerprint a model request as the provider will see it, in the key scheme of ``memo``.

    ``settings`` and ``parameters`` should be what ``model.prepare_request(...)`` returned, so that
    the model's own settings and its customisation of the parameters are covered.
    Raises :class:`FingerprintError` when any part cannot be reduced to canonical JSON.
    """
    scheme = memo.scheme
    chain = memo.chain(messages)
    fields = _parameter_fields(parameters)
    function_tools = fields.pop("function_tools", []) or []
    output_tools = fields.pop("output_tools", []) or []
    tools = {
        str(getattr(tool, "name", index)): digest(canonical_json(_tool_form(tool, scheme)))
        for index, tool in enumerate(function_tools)
    }
    if scheme.is_wire:
        data = _wire_parameters(parameters, fields)
        output = {name: data.pop(name, None) for name in _OUTPUT_PARAMS if name != "output_tools"}
        instruction_params = {name: data.pop(name, None) for name in _INSTRUCTION_PARAMS}
        other = data
    else:
        data = _legacy_parameters(scheme, fields)
        output = {name: data.pop(name, None) for name in _OUTPUT_PARAMS if name != "output_tools"}
        instruction_params = {name: data.pop(name, None) for name in _INSTRUCTION_PARAMS}
        other = data
    output["output_tools"] = [_tool_form(tool, scheme) for tool in output_tools]
    components: dict[str, Any] = {
        "model": digest(model_identity),
        "instructions": digest(chain.system, chain.run_instructions, canonical_json(instruction_params)),
        "user_prompt": chain.run_prompt,
        "history": chain.history,
        "settings": digest(canonical_json(_settings_json(settings))),
        "tools": tools,
        "output_schema": digest(canonical_json(output)),
        "parameters": digest(canonical_json(other)),
        "message_count": len(messages),
    }
    overall = digest(
        scheme.name,
        model_identity,
        chain.full,
        canonical_json({key: value for key, value in components.items() if key != "message_count"}),
    )
    return RequestFingerprint(digest=overall, components=components, conversation=chain.full)


def changed_components(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Readable names of the components that differ between two fingerprints, in a stable order."""
    changes: list[str] = []
    for name, label in COMPONENT_LABELS.items():
        before, after = recorded.get(name), current.get(name)
        if before == after:
            continue
        if name == "tools" and isinstance(before, dict) and isinstance(after, dict):
            added = sorted(set(after) - set(before))
            removed = sorted(set(before) - set(after))
            edited = sorted(tool for tool in set(before) & set(after) if before[tool] != after[tool])
            details = [f"+{tool}" for tool in added] + [f"-{tool}" for tool in removed]
            details += [f"~{tool}" for tool in edited]
            changes.append(f"{label} ({', '.join(details)})")
        elif name == "history":
            count_before, count_after = recorded.get("message_count"), current.get("message_count")
            if count_before != count_after:
                changes.append(f"{label} ({count_after} messages, was {count_before})")
            else:
                changes.append(label)
        else:
            changes.append(label)
    return changes


def fingerprint_tool_call(
    *,
    tool_name: str,
    raw_arguments: Any,
    tool_call_id: str | None,
    conversation: str,
    lineage: str,
) -> str:
    """Digest of one tool call: the tool, its arguments as the model sent them, and where it happened."""
    if isinstance(raw_arguments, str):
        # The model's JSON text; parse it so that whitespace or key order does not matter.
        try:
            arguments: Any = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except ValueError:
            arguments = {"__raw__": raw_arguments}
    else:
        arguments = raw_arguments
    return digest(
        "tool-call/v1",
        tool_name,
        canonical_json(jsonable(arguments)),
        tool_call_id or "",
        conversation,
        lineage,
    )
