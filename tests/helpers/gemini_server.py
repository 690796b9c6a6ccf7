"""A scripted server speaking the Gemini API (``POST /v1beta/models/{model}:generateContent``, what google-genai
sends; not streamed) on 127.0.0.1.

``script(request_json)`` returns a :class:`~tests.helpers.wire_server.Turn`. Reasoning comes back as a thought
part with a ``thoughtSignature``, tool calls as ``functionCall`` parts with an ``id`` (the first one signed, as
Gemini signs it); ids and signatures are derived from the request's bytes, so the same request gets the same
answer in every run. ``overloaded`` answers 503 ``UNAVAILABLE``, as Gemini does under load.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from tests.helpers.wire_server import Turn, WireRequest, WireServer

__all__ = ["gemini_server"]


def _signature(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def gemini_server(script: Callable[[dict[str, Any]], Turn]) -> WireServer:
    """The server; give google-genai its ``url`` as ``base_url``."""

    def answer(request: WireRequest) -> tuple[int, dict[str, Any]]:
        turn = script(request.json)
        if turn.overloaded:
            return 503, {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
        digest = request.digest
        parts: list[dict[str, Any]] = []
        if turn.thinking:
            parts.append({"text": turn.thinking, "thought": True, "thoughtSignature": _signature(f"thought-{digest}")})
        if turn.text:
            parts.append({"text": turn.text})
        for index, (name, arguments) in enumerate(turn.tool_calls):
            part: dict[str, Any] = {"functionCall": {"id": f"call_{digest}_{index}", "name": name, "args": arguments}}
            if index == 0:
                part["thoughtSignature"] = _signature(f"call-{digest}")
            parts.append(part)
        model = request.path.split("/models/")[1].split(":")[0]
        return 200, {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
            "modelVersion": model,
            "responseId": f"resp_{digest}",
        }

    return WireServer(answer)
