"""A scripted server for OpenAI's Responses API (``POST /v1/responses``) on 127.0.0.1, for tests of the real client.

It keeps what a stored response chain needs, as OpenAI does: every response it creates is stored under its id
with the conversation it was created from, so a request with ``previous_response_id`` continues that
conversation with only its new input items; an id it does not hold (expired, deleted: :meth:`forget`) is
rejected with OpenAI's 400 ``previous_response_not_found``. ``requests`` holds each request body as sent.

``script(conversation)`` answers from the whole conversation (the stored items, then the new ones) with
``{"tool_calls": [(name, arguments_dict), ...]}`` or ``{"content": "text"}``. Ids count up per server
(``resp_1``, ``call_1``...), so two servers given the same requests answer with the same ids. Usage: 100
input tokens plus 10 per item of the whole conversation (a chained request is billed its context too), 10
output tokens.

A request with ``"stream": true`` is answered with server-sent events. The same answers come over a Responses
WebSocket (``websocket_url``: ``response.create`` frames answered with
the event stream a real socket sends, ``store`` echoed), and ``requests`` holds those bodies too, without the
frame's ``type``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Script = Callable[[list[dict[str, Any]]], dict[str, Any]]

__all__ = ["ResponsesServer"]


class ResponsesServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.transports: list[str] = []
        """How each request came: ``"http"`` or ``"websocket"``."""
        self.stored: dict[str, list[dict[str, Any]]] = {}
        """Response id -> the conversation it ends (its input items, then its output items)."""
        self._ids = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload = server._answer(body, "http")
                if status == 200 and body.get("stream"):
                    self._stream(server._events(payload))
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, events: list[dict[str, Any]]) -> None:
                """Server-sent events, then the connection closes (HTTP/1.0)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for number, event in enumerate(events):
                    event["sequence_number"] = number
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._loop = asyncio.new_event_loop()
        self._socket_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._socket_server: Any = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def websocket_url(self) -> str:
        host, port = self._socket_server.sockets[0].getsockname()[:2]
        return f"ws://{host}:{port}/v1"

    def __enter__(self) -> ResponsesServer:
        from websockets.asyncio.server import serve

        self._thread.start()
        self._socket_thread.start()

        async def start() -> Any:
            return await serve(self._socket, "127.0.0.1", 0)

        self._socket_server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._socket_server.close()
        asyncio.run_coroutine_threadsafe(self._socket_server.wait_closed(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _socket(self, connection: Any) -> None:
        async for frame in connection:
            body = json.loads(frame)
            body.pop("type", None)
            stream_id = body.pop("stream_id", None)
            status, payload = self._answer(body, "websocket")
            events = self._events(payload) if status == 200 else [{"type": "error", "status": status, **payload}]
            for number, event in enumerate(events):
                event["sequence_number"] = number
                if stream_id is not None:
                    event["stream_id"] = stream_id
                await connection.send(json.dumps(event))

    @staticmethod
    def _events(response: dict[str, Any]) -> list[dict[str, Any]]:
        """The events a Responses stream sends for ``response``: created, each item added and done (a message's
        text as one delta), completed."""
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}
        ]
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(
                    {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}
                )
                where = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events.append({"type": "response.output_text.delta", **where, "delta": text, "logprobs": []})
                events.append({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
            else:
                events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": response})
        return events

    def forget(self) -> None:
        """Drop every stored response, as OpenAI does when they expire."""
        with self._lock:
            self.stored.clear()

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _answer(self, body: dict[str, Any], transport: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            self.transports.append(transport)
            new_items = body.get("input") or []
            if isinstance(new_items, str):
                new_items = [{"role": "user", "content": new_items}]
            previous = body.get("previous_response_id")
            if previous is not None and previous not in self.stored:
                return 400, {
                    "error": {
                        "message": f"Previous response with id '{previous}' not found.",
                        "type": "invalid_request_error",
                        "param": "previous_response_id",
                        "code": "previous_response_not_found",
                    }
                }
            conversation = [*(self.stored[previous] if previous else []), *new_items]
            answer = self.script(conversation)
            number = self._next_id()
            output = self._output(answer)
            response_id = f"resp_{number}"
            if body.get("store", True):
                self.stored[response_id] = [*conversation, *output]
            usage = {
                "input_tokens": 100 + 10 * len(conversation),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 110 + 10 * len(conversation),
            }
            return 200, {
                "id": response_id,
                "object": "response",
                "created_at": 1_790_000_000 + number,
                "model": body.get("model", "gpt-test"),
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "error": None,
                "incomplete_details": None,
                "instructions": None,
                "metadata": {},
                "temperature": 1.0,
                "top_p": 1.0,
                "previous_response_id": previous,
                "store": body.get("store", True),
                "usage": usage,
            }

    def _output(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        if answer.get("tool_calls"):
            items = []
            for name, arguments in answer["tool_calls"]:
                number = self._next_id()
                items.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{number}",
                        "call_id": f"call_{number}",
                        "name": name,
                        "arguments": json.dumps(arguments),
                        "status": "completed",
                    }
                )
            return items
        return [
            {
                "type": "message",
                "id": f"msg_{self._next_id()}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer["content"], "annotations": []}],
            }
        ]
