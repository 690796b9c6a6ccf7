"""The parts the local batch servers share (``batch_servers.py`` is the face): the knobs a test turns, the counters
it reads, one batch as the server keeps it, and the HTTP server that routes requests to a provider's handlers.

Everything here is guarded by the server's lock: the handlers run on the threads of a ``ThreadingHTTPServer``, and a
test reads the counters from its own thread.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

import pytest
from tests.helpers.connections import set_connection
from tests.helpers.wire_server import Turn

__all__ = [
    "API_KEY",
    "Answer",
    "BatchCounters",
    "BatchKnobs",
    "BatchRecord",
    "BatchWireServer",
    "Hold",
    "Outcome",
    "Reply",
    "Turn",
]

API_KEY = "sk-test-key"

Answer = Callable[[dict[str, Any]], Turn]
"""The scripted model: the provider-native request body (a Responses API body for OpenAI, Messages API params for
Anthropic) -> the :class:`Turn` it answers with (text and/or tool calls)."""

Hold = Literal["create", "status", "results"]
"""What a test can make the server hold: see :meth:`BatchWireServer.hold`."""

Outcome = Literal["succeeded", "expired", "errored", "invalid"]
"""How a batch ends for all its requests: ``succeeded`` (each gets its answer), ``expired`` (the batch expired before
running them: pydantic-ai resubmits), ``errored`` (each request failed with a 500 server error: transient, pydantic-ai
resubmits), ``invalid`` (each failed with a 400 invalid request: not transient, the error reaches the run)."""


@dataclass
class BatchKnobs:
    """What a test controls. Change the fields at any time (under no lock: single assignments are atomic)."""

    polls_until_end: int = 1
    """The status poll of a batch that first finds it ended (1: the first poll). Ignored while ``delay`` is set."""
    delay: float | None = None
    """Seconds after its creation a batch ends (wall clock), instead of counting polls."""
    outcomes: list[Outcome] = field(default_factory=list)
    """How the next batches end, one item consumed per batch created, in order; ``succeeded`` once it is empty."""
    background_polls: int = 1
    """The retrieve of a background response that first finds it completed (OpenAI ``background: true``)."""


@dataclass
class BatchRecord:
    """One batch as the server keeps it."""

    id: str
    custom_ids: list[str]
    bodies: dict[str, dict[str, Any]]
    """custom_id -> the provider-native request body."""
    outcome: Outcome
    created: float = field(default_factory=time.monotonic)
    polls: int = 0
    ended: bool = False
    cancelled: bool = False
    results: dict[str, Any] = field(default_factory=dict)
    """custom_id -> the provider-native result line, fixed when the batch ends (a second download is the same)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Provider-specific: file ids for OpenAI."""


@dataclass
class BatchCounters:
    """What happened, for a test to assert on. ``snapshot()`` is a plain dict (also served at ``GET /_counters``)."""

    batches: list[BatchRecord] = field(default_factory=list)
    forgotten: list[BatchRecord] = field(default_factory=list)
    """Batches dropped by ``forget()`` (404 from then on)."""
    files_uploaded: int = 0
    files_deleted: int = 0
    polls: int = 0
    """Status requests of batches (``GET /v1/batches/{id}``, ``GET /v1/messages/batches/{id}``)."""
    downloads_started: int = 0
    """Result downloads that reached the server (a held one counts here while it waits)."""
    downloads: int = 0
    """Result downloads answered (OpenAI: output and error files; Anthropic: the results JSONL)."""
    cancels: int = 0
    live_requests: int = 0
    """Ordinary model requests (``POST /v1/responses`` without background, ``POST /v1/messages``)."""
    background_creates: int = 0
    background_polls: int = 0
    background_cancels: int = 0

    @property
    def batches_created(self) -> int:
        return len(self.batches) + len(self.forgotten)

    @property
    def requests_submitted(self) -> int:
        """Requests over all batches (forgotten ones too): what a provider bills."""
        return sum(len(batch.custom_ids) for batch in [*self.forgotten, *self.batches])

    def snapshot(self) -> dict[str, Any]:
        plain = asdict(self)
        for name in ("batches", "forgotten"):
            plain[name] = [
                {key: getattr(b, key) for key in ("id", "custom_ids", "outcome", "polls", "ended", "cancelled")}
                for b in getattr(self, name)
            ]
        plain["batches_created"] = self.batches_created
        plain["requests_submitted"] = self.requests_submitted
        return plain


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, document: Any, status: int = 200) -> Reply:
        return cls(status, json.dumps(document).encode())


Route = tuple[str, re.Pattern[str], Callable[..., Reply]]


class BatchWireServer:
    """A threading HTTP server on 127.0.0.1 whose subclass lists its ``routes()``: (method, path regex, handler).
    A handler gets the request (:class:`Request`) and the regex groups. A context manager: serving inside ``with``."""

    id_prefix = "batch"
    model_id = "test"
    """The pydantic-ai model id of the model a connection to this server names by default."""

    def __init__(self, answer: Answer, port: int = 0) -> None:
        self.answer = answer
        self.knobs = BatchKnobs()
        self.counters = BatchCounters()
        self.lock = threading.RLock()
        self._numbers = 0
        self._free = {kind: threading.Event() for kind in ("create", "status", "results")}
        for free in self._free.values():
            free.set()
        routes = [(method, re.compile(pattern), handler) for method, pattern, handler in self.routes()]
        routes.append(("GET", re.compile(r"/_counters"), lambda request: Reply.json(self.counters.snapshot())))
        routes.append(("POST", re.compile(r"/_knobs"), self._set_knobs))
        routes.append(("POST", re.compile(r"/_hold/(create|status|results)"), self._hold_route))
        routes.append(("POST", re.compile(r"/_release/(create|status|results)"), self._release_route))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                request = Request(method, self.path, dict(self.headers.items()), self._body())
                path = urlsplit(self.path).path
                for route_method, pattern, handler in routes:
                    if route_method == method and (match := pattern.fullmatch(path)):
                        reply = handler(request, *match.groups())
                        break
                else:
                    reply = Reply.json({"error": {"message": f"no route {method} {path}", "type": "not_found"}}, 404)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while size := int(self.rfile.readline().strip(), 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def routes(self) -> list[tuple[str, str, Callable[..., Reply]]]:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        """What the provider's SDK client takes as ``base_url``."""
        raise NotImplementedError

    def connect(self, monkeypatch: pytest.MonkeyPatch, conn_id: str, model: str | None = None) -> None:
        """Define the Airflow connection ``conn_id`` to this server: API key ``API_KEY``, and in its extra
        ``model`` (a pydantic-ai model id; None: the server's ``model_id``; ``""``: none, the operator names it)."""
        model = self.model_id if model is None else model
        extra = {"extra": {"model": model}} if model else {}
        set_connection(monkeypatch, conn_id, host=self.base_url, password=API_KEY, **extra)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a path."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for free in self._free.values():
            free.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- knobs a test turns -------------------------------------------------------------------------------------

    def hold(self, kind: Hold) -> None:
        """Make the server's answers of one kind wait until :meth:`release`, each counted before it waits (a kill
        point for a test): ``create`` (a batch, or background response, exists but its creator has no answer yet),
        ``status`` (a status poll or background retrieve), ``results`` (a result download: ``downloads_started``)."""
        self._free[kind].clear()

    def release(self, kind: Hold) -> None:
        self._free[kind].set()

    def hold_results(self) -> None:
        self.hold("results")

    def release_results(self) -> None:
        self.release("results")

    def gate(self, kind: Hold) -> None:
        """Wait while ``kind`` is held (call it outside the lock)."""
        self._free[kind].wait()

    def _hold_route(self, request: Request, kind: Hold) -> Reply:
        self.hold(kind)
        return Reply.json({"held": kind})

    def _release_route(self, request: Request, kind: Hold) -> Reply:
        self.release(kind)
        return Reply.json({"released": kind})

    def forget(self) -> None:
        """Drop every batch (and, for OpenAI, every file and background response): later requests about them get
        404, as after the provider's retention period. The counters keep their records in ``forgotten``."""
        with self.lock:
            self.counters.forgotten.extend(self.counters.batches)
            self.counters.batches.clear()
            self.forget_provider_state()

    def forget_provider_state(self) -> None:
        """What a provider keeps besides batches, dropped by :meth:`forget`."""

    def wait_for(self, condition: Callable[[BatchCounters], bool], timeout: float = 30.0) -> None:
        """Wait until ``condition(counters)`` holds (e.g. a held download started), or fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition(self.counters):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met in {timeout}s; counters: {self.counters.snapshot()}")
            time.sleep(0.02)

    def _set_knobs(self, request: Request) -> Reply:
        for name, value in request.json.items():
            setattr(self.knobs, name, value)
        return Reply.json({"knobs": asdict(self.knobs)})

    # -- shared steps for the provider handlers ----------------------------------------------------------------

    def next_number(self) -> int:
        with self.lock:
            self._numbers += 1
            return self._numbers

    def new_batch(self, bodies: dict[str, dict[str, Any]], extra: dict[str, Any] | None = None) -> BatchRecord:
        """Create and count a batch (its outcome the next of ``knobs.outcomes``); held while ``create`` is."""
        with self.lock:
            outcome: Outcome = self.knobs.outcomes.pop(0) if self.knobs.outcomes else "succeeded"
            record = BatchRecord(
                id=f"{self.id_prefix}_{self.next_number()}",
                custom_ids=list(bodies),
                bodies=bodies,
                outcome=outcome,
                extra=dict(extra or {}),
            )
            self.counters.batches.append(record)
        self.gate("create")
        return record

    def find_batch(self, batch_id: str) -> BatchRecord | None:
        with self.lock:
            return next((record for record in self.counters.batches if record.id == batch_id), None)

    def poll(self, record: BatchRecord) -> None:
        """Count a status request of ``record``, and end it when the knobs say it has run long enough."""
        with self.lock:
            self.counters.polls += 1
            record.polls += 1
            if record.ended:
                return
            if self.knobs.delay is not None:
                due = time.monotonic() - record.created >= self.knobs.delay
            else:
                due = record.polls >= self.knobs.polls_until_end
            if due or record.cancelled:
                self.end(record)
        self.gate("status")

    def end(self, record: BatchRecord) -> None:
        """Fix each request's result line (``result_line``), once."""
        with self.lock:
            record.ended = True
            for custom_id in record.custom_ids:
                record.results[custom_id] = self.result_line(record, custom_id)

    def result_line(self, record: BatchRecord, custom_id: str) -> Any:
        raise NotImplementedError

    def download(self) -> None:
        """Count a result download, waiting first while results are held."""
        with self.lock:
            self.counters.downloads_started += 1
        self.gate("results")
        with self.lock:
            self.counters.downloads += 1


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"{}")
