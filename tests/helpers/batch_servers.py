"""Local batch servers on 127.0.0.1 for the real ``openai`` and ``anthropic`` SDKs, as pydantic-ai's
``BatchModelRequests`` and OpenAI's background mode use them (issue 38).

Fixtures (registered in ``tests/conftest.py``, any tier)::

    def test_x(openai_batch_server, anthropic_batch_server): ...

Each yields a started server whose scripted model is ``server.answer(body) -> Turn`` (``tests.helpers.wire_server``:
``Turn(text=...)`` or ``Turn(tool_calls=[(name, args)])``; ``body`` is the provider-native request: a Responses API
body for OpenAI, Messages params for Anthropic). The default answer echoes the request's last text
(:func:`echo`). Models on the real SDKs: :func:`openai_model` (``OpenAIResponsesModel``: pydantic-ai batches OpenAI
only through the Responses API; ``OpenAIChatModel`` has no batch API) and :func:`anthropic_model`;
:func:`batching` is a ``BatchModelRequests`` with test-sized waits; :func:`fast_background` shortens pydantic-ai's
2 s background poll interval in this process. ``server.connect(monkeypatch, conn_id)`` defines an Airflow
connection (model ``openai-responses:gpt-4o`` / ``anthropic:claude-sonnet-5-5`` unless told).

Endpoints. OpenAI (``server.base_url`` = ``.../v1``): ``POST /files`` (multipart JSONL), ``GET /files/{id}/content``,
``DELETE /files/{id}``, ``POST /batches``, ``GET /batches/{id}``, ``POST /batches/{id}/cancel``, ``POST /responses``
(live, or ``background: true`` answered ``queued``), ``GET /responses/{id}``, ``POST /responses/{id}/cancel``.
Anthropic (``server.base_url`` = the root): ``POST /v1/messages``, ``POST /v1/messages/batches``,
``GET /v1/messages/batches/{id}``, ``GET .../{id}/results`` (the ``results_url``), ``POST .../{id}/cancel``.
Both: ``GET /_counters`` (``counters.snapshot()`` as JSON), ``POST /_knobs`` (JSON fields of ``BatchKnobs``),
``POST /_hold/{kind}`` and ``POST /_release/{kind}``.

Knobs (``server.knobs``, a :class:`~tests.helpers.batch_wire.BatchKnobs`): ``polls_until_end`` (the status poll
that first sees a batch ended, default 1), ``delay`` (seconds of wall clock instead), ``outcomes`` (a queue, one per
batch created: ``succeeded`` / ``expired`` / ``errored`` (500, resubmitted by pydantic-ai) / ``invalid`` (400)),
``background_polls`` (the retrieve that first sees a background response completed). Kill points:
``server.hold(kind)`` makes answers of one kind wait, counted first, until ``server.release(kind)``: ``"create"``
(the batch or background response exists, its creator has no id yet), ``"status"`` (a poll), ``"results"`` (a
download; ``hold_results()`` / ``release_results()``); ``server.wait_for(lambda c: c.downloads_started == 1)``
waits for a condition on the counters. ``server.forget()`` drops every batch (404, as after the provider's
retention).

Counters (``server.counters``, a :class:`~tests.helpers.batch_wire.BatchCounters`): ``batches`` (records with
``id``, ``custom_ids``, ``bodies``, ``outcome``, ``polls``, ``ended``, ``cancelled``), ``batches_created``,
``requests_submitted``, ``files_uploaded``, ``files_deleted``, ``polls``, ``downloads_started``, ``downloads``,
``cancels``, ``live_requests``, ``background_creates``, ``background_polls``, ``background_cancels``, ``forgotten``.

The server lives in the test process; tasks in other processes (``dag.test()`` subprocesses, a scheduler's workers
and triggerer) reach it over HTTP, so its state spans them. Standalone, for manual trials::

    python -m tests.helpers.batch_servers --provider openai --port 8765
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from tests.helpers.batch_anthropic import AnthropicBatchServer
from tests.helpers.batch_openai import OpenAIBatchServer
from tests.helpers.batch_wire import API_KEY, BatchCounters, BatchKnobs, BatchRecord, Turn

__all__ = [
    "AnthropicBatchServer",
    "BatchCounters",
    "BatchKnobs",
    "BatchRecord",
    "OpenAIBatchServer",
    "Turn",
    "anthropic_batch_server",
    "anthropic_model",
    "batching",
    "echo",
    "fast_background",
    "openai_batch_server",
    "openai_model",
]


def last_text(body: dict[str, Any]) -> str:
    """The text of the last user message of an OpenAI Responses body or Anthropic Messages params."""
    items = body.get("input", body.get("messages")) or []
    if isinstance(items, str):
        return items
    for item in reversed(items):
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [part.get("text") for part in content if isinstance(part, dict) and part.get("text")]
            if texts:
                return texts[-1]
    return ""


def echo(body: dict[str, Any]) -> Turn:
    """The default scripted answer: ``answer to: <the last text of the request>``."""
    return Turn(text=f"answer to: {last_text(body)}")


def openai_model(server: OpenAIBatchServer, model_name: str = "gpt-4o", **kwargs: Any) -> Any:
    """An ``OpenAIResponsesModel`` on the real ``openai`` SDK, talking to ``server``."""
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIResponsesModel(
        model_name, provider=OpenAIProvider(base_url=server.base_url, api_key=API_KEY), **kwargs
    )


def anthropic_model(server: AnthropicBatchServer, model_name: str = "claude-sonnet-5-5", **kwargs: Any) -> Any:
    """An ``AnthropicModel`` on the real ``anthropic`` SDK, talking to ``server``."""
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel(model_name, provider=AnthropicProvider(base_url=server.base_url, api_key=API_KEY), **kwargs)


def batching(**overrides: Any) -> Any:
    """``BatchModelRequests`` with test-sized waits: submitted after 0.05 s, polled every 0.05 s (at most 0.2 s)."""
    from pydantic_ai.capabilities import BatchModelRequests

    settings: dict[str, Any] = {
        "max_wait": timedelta(seconds=0.05),
        "poll_interval": timedelta(seconds=0.05),
        "max_poll_interval": timedelta(seconds=0.2),
        **overrides,
    }
    return BatchModelRequests(**settings)


def fast_background(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.02) -> None:
    """Poll background responses every ``seconds`` in this process (pydantic-ai's constant is 2 s, no setting)."""
    from pydantic_ai.models.openai import _responses_model

    monkeypatch.setattr(_responses_model, "_OPENAI_BACKGROUND_POLL_INTERVAL", seconds)


@pytest.fixture
def openai_batch_server() -> Iterator[OpenAIBatchServer]:
    """A started :class:`OpenAIBatchServer` answering with :func:`echo` until the test sets ``answer``."""
    with OpenAIBatchServer(echo) as server:
        yield server


@pytest.fixture
def anthropic_batch_server() -> Iterator[AnthropicBatchServer]:
    """A started :class:`AnthropicBatchServer` answering with :func:`echo` until the test sets ``answer``."""
    with AnthropicBatchServer(echo) as server:
        yield server


def main(argv: list[str] | None = None) -> None:
    """Serve one provider's batch API on ``--port`` until interrupted, printing the counters when they change."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--polls-until-end", type=int, default=1)
    parser.add_argument("--delay", type=float, default=None, help="seconds until a batch ends (instead of polls)")
    parser.add_argument("--background-polls", type=int, default=1)
    args = parser.parse_args(argv)
    server_type = OpenAIBatchServer if args.provider == "openai" else AnthropicBatchServer
    with server_type(echo, port=args.port) as server:
        server.knobs.polls_until_end = args.polls_until_end
        server.knobs.delay = args.delay
        server.knobs.background_polls = args.background_polls
        print(f"{args.provider} batch server at {server.base_url} (API key {API_KEY}); Ctrl-C stops it", flush=True)
        seen = ""
        try:
            while True:
                time.sleep(0.5)
                if (now := json.dumps(server.counters.snapshot(), sort_keys=True)) != seen:
                    print(now, flush=True)
                    seen = now
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
