"""Model requests described as plain JSON ("specs"), so that another process can rebuild the same request.

``python -m tests.helpers.fingerprint_specs`` reads a JSON list of specs on stdin and prints the JSON
list of their fingerprints (digest and components), one per spec. A value ``{"__set__": [...]}`` in
a spec becomes a Python ``set``, whose iteration order depends on ``PYTHONHASHSEED``.

A spec::

    {"model": str, "instructions": str | None, "system": str | None, "prompt": str,
     "turns": [{"tool": str, "args": {...}, "call_id": str, "result": str}],
     "settings": {...}, "tools": [{"name": str, "description": str, "schema": {...}}],
     "revealed": {"__set__": [...]} | None,
     "volatile": {"timestamp": iso, "run_id": str, "conversation_id": str,
                  "provider_response_id": str, "input_tokens": int, "output_tokens": int}}
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any


def unmark(value: Any) -> Any:
    """Turn ``{"__set__": [...]}`` markers into sets (recursively)."""
    if isinstance(value, dict):
        if set(value) == {"__set__"}:
            return {unmark(item) for item in value["__set__"]}
        return {key: unmark(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unmark(item) for item in value]
    return value


def build(spec: dict[str, Any]) -> tuple[list[Any], dict[str, Any], Any]:
    """(messages, settings, parameters) of a spec."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RequestUsage

    volatile = spec["volatile"]
    when = datetime.fromisoformat(volatile["timestamp"])
    ids = {"run_id": volatile["run_id"], "conversation_id": volatile["conversation_id"]}
    first_parts: list[Any] = []
    if spec.get("system") is not None:
        first_parts.append(SystemPromptPart(spec["system"], timestamp=when))
    first_parts.append(UserPromptPart(spec["prompt"], timestamp=when))
    messages: list[Any] = [
        ModelRequest(parts=first_parts, instructions=spec.get("instructions"), timestamp=when, **ids)
    ]
    for turn in spec["turns"]:
        messages.append(
            ModelResponse(
                parts=[ToolCallPart(turn["tool"], turn["args"], tool_call_id=turn["call_id"])],
                usage=RequestUsage(input_tokens=volatile["input_tokens"], output_tokens=volatile["output_tokens"]),
                provider_response_id=volatile["provider_response_id"],
                timestamp=when,
                **ids,
            )
        )
        messages.append(
            ModelRequest(
                parts=[ToolReturnPart(turn["tool"], turn["result"], tool_call_id=turn["call_id"], timestamp=when)],
                timestamp=when,
                **ids,
            )
        )
    parameters = ModelRequestParameters(
        function_tools=[
            ToolDefinition(name=tool["name"], description=tool["description"], parameters_json_schema=tool["schema"])
            for tool in spec["tools"]
        ]
    )
    if spec.get("revealed") is not None:
        parameters.revealed_tool_names = unmark(spec["revealed"])
    return messages, unmark(spec["settings"]), parameters


def fingerprint(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_pydantic_ai.durable.keys.fingerprint import MessageDigests, fingerprint_request

    messages, settings, parameters = build(spec)
    result = fingerprint_request(
        model_identity=spec["model"],
        messages=messages,
        settings=settings,
        parameters=parameters,
        memo=MessageDigests(),
    )
    return {"digest": result.digest, "components": result.components}


def main() -> None:
    specs = json.load(sys.stdin)
    json.dump([fingerprint(spec) for spec in specs], sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
