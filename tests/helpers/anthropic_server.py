"""A scripted server speaking Anthropic's Messages API (``POST /v1/messages``, not streamed) on 127.0.0.1.

``script(request_json)`` returns a :class:`~tests.helpers.wire_server.Turn`. Reasoning comes back as a signed
``thinking`` block and a ``redacted_thinking`` block, tool calls as ``tool_use`` blocks; ids and signatures are
derived from the request's bytes, so the same request gets the same answer in every run. ``overloaded`` answers
529 ``overloaded_error``, as Anthropic does under load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.helpers.wire_server import Turn, WireRequest, WireServer

__all__ = ["anthropic_server"]


def anthropic_server(script: Callable[[dict[str, Any]], Turn]) -> WireServer:
    """The server; give the Anthropic client its ``url`` as ``base_url``."""

    def answer(request: WireRequest) -> tuple[int, dict[str, Any]]:
        body = request.json
        turn = script(body)
        if turn.overloaded:
            return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        digest = request.digest
        content: list[dict[str, Any]] = []
        if turn.thinking:
            content.append({"type": "thinking", "thinking": turn.thinking, "signature": f"sig-{digest}"})
            content.append({"type": "redacted_thinking", "data": f"redacted-{digest}"})
        if turn.text:
            content.append({"type": "text", "text": turn.text})
        content.extend(
            {"type": "tool_use", "id": f"toolu_{digest}_{index}", "name": name, "input": arguments}
            for index, (name, arguments) in enumerate(turn.tool_calls)
        )
        return 200, {
            "id": f"msg_{digest}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 100 + len(body["messages"]), "output_tokens": 10},
        }

    return WireServer(answer)
