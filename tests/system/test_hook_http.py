"""PydanticAIHook's models against a local OpenAI-compatible HTTP server (on a thread of this process)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic_ai import Agent
from tests.helpers.connections import (
    CONN_ID,
    no_provider_env,  # noqa: F401 - an autouse fixture: imported, it applies here
    set_common_ai_connection,
    set_connection,
)

from airflow_pydantic_ai.hooks.pydantic_ai import PydanticAIHook


@dataclass
class FakeOpenAIServer:
    """An HTTP server on 127.0.0.1 that answers every chat completion with the same text."""

    base_url: str
    answer: str
    requests: list[dict[str, Any]]


@pytest.fixture
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    answer = "Hello from the fake server"
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            requests.append(
                {"path": self.path, "authorization": self.headers.get("Authorization"), "body": json.loads(body)}
            )
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            payload = json.dumps(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1_700_000_000,
                    "model": "fake-model",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": answer},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeOpenAIServer(f"http://127.0.0.1:{server.server_port}/v1", answer, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_agent_runs_against_the_connection_base_url_with_its_api_key(
    monkeypatch: pytest.MonkeyPatch, fake_openai_server: FakeOpenAIServer
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    set_connection(
        monkeypatch,
        host=fake_openai_server.base_url,
        password="sk-reaches-the-server",
        extra={"model": "openai-chat:fake-model", "model_settings": {"temperature": 0.3}},
    )

    result = Agent(PydanticAIHook(llm_conn_id=CONN_ID).get_model()).run_sync("hi")

    assert result.output == fake_openai_server.answer
    [request] = fake_openai_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-reaches-the-server"
    assert request["body"]["model"] == "fake-model"
    assert request["body"]["temperature"] == 0.3
    assert request["body"]["messages"][-1] == {"role": "user", "content": "hi"}


def test_common_ai_connection_with_fallback_chain_fails_over_to_the_backup_connection(
    monkeypatch: pytest.MonkeyPatch, fake_openai_server: FakeOpenAIServer
) -> None:
    # The primary's URL answers 404 (a provider error): the agent must go on with the backup
    # connection's model, key and URL, as common.ai's fallback_conn_ids promise.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    down_url = fake_openai_server.base_url.replace("/v1", "/down/v1")
    set_common_ai_connection(
        monkeypatch,
        "primary_llm",
        host=down_url,
        password="sk-primary",
        extra={"model": "openai-chat:primary-model", "fallback_conn_ids": ["backup_llm", " "]},
    )
    set_common_ai_connection(
        monkeypatch,
        "backup_llm",
        host=fake_openai_server.base_url,
        password="sk-backup",
        extra={"model": "openai-chat:fake-model"},
    )

    result = Agent(PydanticAIHook(llm_conn_id="primary_llm").get_model()).run_sync("hi")

    assert result.output == fake_openai_server.answer
    assert [(r["path"], r["authorization"], r["body"]["model"]) for r in fake_openai_server.requests] == [
        ("/down/v1/chat/completions", "Bearer sk-primary", "primary-model"),
        ("/v1/chat/completions", "Bearer sk-backup", "fake-model"),
    ]
