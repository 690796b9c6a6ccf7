"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests of the real client.

Each POST to ``/v1/chat/completions`` is answered by ``script(request_json)``, which returns either
``{"tool_calls": [(name, arguments_dict), ...]}`` or ``{"content": "text"}``, or an error
``{"status": 429, "error": {"message", "type", "code"}, "headers": {...}}`` (a rate limit, an
overloaded provider...). Response ids and ``created`` timestamps change on every call, as a real
provider's do.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tests.helpers.connections import set_connection

Script = Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedOpenAIServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                answer = server.script(body)
                if "status" in answer:
                    payload = json.dumps({"error": answer.get("error", {"message": "error"})}).encode()
                    self.send_response(int(answer["status"]))
                    for name, value in answer.get("headers", {}).items():
                        self.send_header(name, str(value))
                else:
                    payload = json.dumps(server._completion(body, answer, len(server.requests))).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def connect(
        self,
        monkeypatch: pytest.MonkeyPatch,
        conn_id: str = "local_openai",
        model: str | None = "openai-chat:gpt-test",
        conn_type: str = "pydantic_ai",
    ) -> None:
        """Define the Airflow connection ``conn_id`` to this server: API key ``sk-test-key``, and ``model`` in its
        extra unless None (the operator's ``model_id`` then names it)."""
        extra = {"extra": {"model": model}} if model is not None else {}
        set_connection(monkeypatch, conn_id, conn_type=conn_type, host=self.base_url, password="sk-test-key", **extra)

    def __enter__(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @staticmethod
    def _completion(request: dict[str, Any], answer: dict[str, Any], number: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
        finish = "stop"
        if answer.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": f"call_{name}_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for index, (name, arguments) in enumerate(answer["tool_calls"])
            ]
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{number}-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()) + number,
            "model": request.get("model", "gpt-test"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100 + number, "completion_tokens": 10, "total_tokens": 110 + number},
        }
