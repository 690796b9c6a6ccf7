"""A local HTTP server on 127.0.0.1 that keeps every request's body as the client sent it, for tests that run a
real provider SDK (``anthropic_server.py``, ``gemini_server.py`` speak their wire formats on top of it).

``answer(request)`` returns ``(status, json_document)``. The bytes of each request are kept, so a test can say
that a request after a replay is byte for byte the one a run that never failed sent. A :class:`Turn` is what a
scripted model answers, whatever the format it is sent in.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Turn", "WireRequest", "WireServer"]


@dataclass(frozen=True)
class Turn:
    """One answer of a scripted model: its reasoning (sent with the provider's signatures), the tool calls it
    makes (name, arguments), its text; or, with ``overloaded``, the provider's "overloaded" error instead."""

    thinking: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    text: str | None = None
    overloaded: bool = False


@dataclass(frozen=True)
class WireRequest:
    """One request as it reached the server: its path (query included) and its body, byte for byte."""

    path: str
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def digest(self) -> str:
        """A digest of the body: a deterministic server derives its ids from it, so that the same request gets
        the same answer (ids, signatures) in every run, as from a caching gateway."""
        return hashlib.sha256(self.body).hexdigest()[:16]


class WireServer:
    """The server; ``requests`` holds what it received, in order. A context manager: serving inside ``with``."""

    def __init__(self, answer: Callable[[WireRequest], tuple[int, Any]]) -> None:
        self.requests: list[WireRequest] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = WireRequest(self.path, self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(request)
                status, document = answer(request)
                payload = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a path."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
