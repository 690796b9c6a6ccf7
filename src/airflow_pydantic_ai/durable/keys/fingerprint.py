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
# Tool definition fields that stay on our side: the provider never sees them.
_LOCAL_TOOL_FIELDS = frozenset({"metadata", "timeout", "toolset_id", "capability_id"})
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


def _tool_json(tool: Any) -> Any:
    data = jsonable(tool)
    if isinstance(data, dict):
        return strip(data, _LOCAL_TOOL_FIELDS)
    return data


def _parameter_fields(parameters: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(parameters):
        raise FingerprintError(f"unexpected request parameters type {type(parameters).__name__}")
    return {
        item.name: getattr(parameters, item.name)
        for item in dataclasses.fields(parameters)
        if not item.name.startswith("_")
    }


def fingerprint_request(
    *,
    model_identity: str,
    messages: Sequence[ModelMessage],
    settings: Mapping[str, Any] | None,
    parameters: Any,
    memo: MessageDigests,
) -> RequestFingerprint:
    """Fingerprint a model request as the provider will see it.

    ``settings`` and ``parameters`` should be what ``model.prepare_request(...)`` returned, so that
    the model's own settings and its customisation of the parameters are covered.
    Raises :class:`FingerprintError` when any part cannot be reduced to canonical JSON.
    """
    chain = memo.chain(messages)
    fields = _parameter_fields(parameters)
    tools = {
        str(getattr(tool, "name", index)): digest(canonical_json(_tool_json(tool)))
        for index, tool in enumerate(fields.pop("function_tools", []) or [])
    }
    output = {name: jsonable(fields.pop(name, None)) for name in _OUTPUT_PARAMS}
    if isinstance(output.get("output_tools"), list):
        output["output_tools"] = [
            strip(tool, _LOCAL_TOOL_FIELDS) if isinstance(tool, dict) else tool for tool in output["output_tools"]
        ]
    instruction_params = {name: jsonable(fields.pop(name, None)) for name in _INSTRUCTION_PARAMS}
    other = jsonable(fields)
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
        "model-request/v1",
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
