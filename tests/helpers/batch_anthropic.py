"""Anthropic's Message Batches API, as the real ``anthropic`` SDK speaks it (``?beta=true`` included), for
``batch_servers.py``: create, retrieve, the results JSONL at ``results_url``, cancel; and live ``POST /v1/messages``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.helpers.batch_wire import BatchRecord, BatchWireServer, Reply, Request, Turn

__all__ = ["AnthropicBatchServer", "anthropic_message"]

_CREATED = "2026-12-01T00:00:00Z"


def anthropic_message(params: dict[str, Any], turn: Turn, number: int) -> dict[str, Any]:
    """A Messages API ``message`` answering ``params`` with ``turn``; ids derive from ``number``."""
    content: list[dict[str, Any]] = []
    if turn.thinking:
        content.append({"type": "thinking", "thinking": turn.thinking, "signature": f"sig-{number}"})
    if turn.text is not None or not turn.tool_calls:
        content.append({"type": "text", "text": turn.text or ""})
    content.extend(
        {"type": "tool_use", "id": f"toolu_{number}_{index}", "name": name, "input": arguments}
        for index, (name, arguments) in enumerate(turn.tool_calls)
    )
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": params["model"],
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + len(params["messages"]), "output_tokens": 10},
    }


class AnthropicBatchServer(BatchWireServer):
    """Give the SDK client ``url`` as ``base_url`` (the SDK adds ``/v1``)."""

    id_prefix = "msgbatch"
    model_id = "anthropic:claude-sonnet-5-5"

    def __init__(self, answer: Callable[[dict[str, Any]], Turn], port: int = 0) -> None:
        super().__init__(answer, port)

    @property
    def base_url(self) -> str:
        return self.url

    def routes(self) -> list[tuple[str, str, Callable[..., Reply]]]:
        return [
            ("POST", r"/v1/messages", self._live),
            ("POST", r"/v1/messages/batches", self._create),
            ("GET", r"/v1/messages/batches/([^/]+)", self._retrieve),
            ("GET", r"/v1/messages/batches/([^/]+)/results", self._results),
            ("POST", r"/v1/messages/batches/([^/]+)/cancel", self._cancel),
        ]

    def _live(self, request: Request) -> Reply:
        params = request.json
        with self.lock:
            self.counters.live_requests += 1
        return Reply.json(anthropic_message(params, self.answer(params), self.next_number()))

    def _create(self, request: Request) -> Reply:
        record = self.new_batch({item["custom_id"]: item["params"] for item in request.json["requests"]})
        return Reply.json(self._batch_object(record))

    def _retrieve(self, request: Request, batch_id: str) -> Reply:
        if (record := self.find_batch(batch_id)) is None:
            return _not_found(batch_id)
        self.poll(record)
        return Reply.json(self._batch_object(record))

    def _results(self, request: Request, batch_id: str) -> Reply:
        if (record := self.find_batch(batch_id)) is None or not record.ended:
            return _not_found(batch_id)
        self.download()
        lines = [json.dumps({"custom_id": cid, "result": record.results[cid]}) for cid in record.custom_ids]
        return Reply(200, ("\n".join(lines) + "\n").encode(), "application/binary")

    def _cancel(self, request: Request, batch_id: str) -> Reply:
        if (record := self.find_batch(batch_id)) is None:
            return _not_found(batch_id)
        with self.lock:
            self.counters.cancels += 1
            if not record.ended:
                record.cancelled = True
            return Reply.json(self._batch_object(record))

    def result_line(self, record: BatchRecord, custom_id: str) -> Any:
        if record.cancelled:
            return {"type": "canceled"}
        if record.outcome == "expired":
            return {"type": "expired"}
        if record.outcome in ("errored", "invalid"):
            kind = "api_error" if record.outcome == "errored" else "invalid_request_error"
            return {
                "type": "errored",
                "error": {"type": "error", "error": {"type": kind, "message": f"scripted {kind}"}},
            }
        params = record.bodies[custom_id]
        return {"type": "succeeded", "message": anthropic_message(params, self.answer(params), self.next_number())}

    def _batch_object(self, record: BatchRecord) -> dict[str, Any]:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if record.ended:
            for result in record.results.values():
                counts[result["type"]] += 1
        else:
            counts["processing"] = len(record.custom_ids)
        status = "ended" if record.ended else ("canceling" if record.cancelled else "in_progress")
        return {
            "id": record.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": _CREATED,
            "expires_at": "2026-12-02T00:00:00Z",
            "ended_at": _CREATED if record.ended else None,
            "cancel_initiated_at": _CREATED if record.cancelled else None,
            "archived_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{record.id}/results" if record.ended else None,
        }


def _not_found(batch_id: str) -> Reply:
    return Reply.json({"type": "error", "error": {"type": "not_found_error", "message": f"No batch {batch_id}"}}, 404)
