"""OpenAI's Batch API and the Responses API's background mode, as the real ``openai`` SDK speaks them, for
``batch_servers.py``: files (multipart upload, content, delete), batches (create, retrieve, cancel) for the
``/v1/responses`` endpoint, and ``/v1/responses`` itself (live, or ``background: true`` then retrieve and cancel).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any

from tests.helpers.batch_wire import BatchRecord, BatchWireServer, Reply, Request, Turn

__all__ = ["OpenAIBatchServer", "responses_document"]

_CREATED = 1_790_000_000


def responses_document(body: dict[str, Any], turn: Turn, number: int, status: str = "completed") -> dict[str, Any]:
    """A Responses API ``response`` object answering ``body`` with ``turn``; ids derive from ``number``."""
    output: list[dict[str, Any]] = []
    if status == "completed":
        if turn.text is not None or not turn.tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{number}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": turn.text or "", "annotations": []}],
                }
            )
        output.extend(
            {
                "type": "function_call",
                "id": f"fc_{number}_{index}",
                "call_id": f"call_{number}_{index}",
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            for index, (name, arguments) in enumerate(turn.tool_calls)
        )
    items = body.get("input") or []
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": _CREATED + number,
        "model": body.get("model", "gpt-test"),
        "status": status,
        "background": bool(body.get("background")),
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
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "usage": {
            "input_tokens": 100 + 10 * (len(items) if isinstance(items, list) else 1),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110 + 10 * (len(items) if isinstance(items, list) else 1),
        },
    }


class OpenAIBatchServer(BatchWireServer):
    """Give the SDK client ``base_url`` (``.../v1``). ``files`` holds every file by id (uploads and results);
    ``backgrounds`` every background response: id -> (body, polls, status)."""

    id_prefix = "batch"
    model_id = "openai-responses:gpt-4o"

    def __init__(self, answer: Callable[[dict[str, Any]], Turn], port: int = 0) -> None:
        super().__init__(answer, port)
        self.files: dict[str, bytes] = {}
        self.backgrounds: dict[str, dict[str, Any]] = {}

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def routes(self) -> list[tuple[str, str, Callable[..., Reply]]]:
        return [
            ("POST", r"/v1/files", self._upload),
            ("GET", r"/v1/files/([^/]+)/content", self._content),
            ("DELETE", r"/v1/files/([^/]+)", self._delete_file),
            ("POST", r"/v1/batches", self._create_batch),
            ("GET", r"/v1/batches/([^/]+)", self._retrieve_batch),
            ("POST", r"/v1/batches/([^/]+)/cancel", self._cancel_batch),
            ("POST", r"/v1/responses", self._create_response),
            ("GET", r"/v1/responses/([^/]+)", self._retrieve_response),
            ("POST", r"/v1/responses/([^/]+)/cancel", self._cancel_response),
        ]

    def forget_provider_state(self) -> None:
        self.files.clear()
        self.backgrounds.clear()

    # -- files ---------------------------------------------------------------------------------------------------

    def _upload(self, request: Request) -> Reply:
        message = BytesParser(policy=default_policy).parsebytes(
            f"Content-Type: {request.headers.get('Content-Type') or request.headers['content-type']}\r\n\r\n".encode()
            + request.body
        )
        fields = {
            part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in message.iter_parts()
        }
        with self.lock:
            file_id = f"file-{self.next_number()}"
            self.files[file_id] = fields["file"]
            self.counters.files_uploaded += 1
        return Reply.json(self._file_object(file_id, (fields.get("purpose") or b"batch").decode()))

    def _file_object(self, file_id: str, purpose: str) -> dict[str, Any]:
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(self.files[file_id]),
            "created_at": int(time.time()),
            "filename": "batch.jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    def _content(self, request: Request, file_id: str) -> Reply:
        with self.lock:
            content = self.files.get(file_id)
            is_result = any(file_id in (b.extra.get("output"), b.extra.get("error")) for b in self.counters.batches)
        if content is None:
            return Reply.json(
                {"error": {"message": f"No such File object: {file_id}", "type": "invalid_request_error"}}, 404
            )
        if is_result:
            self.download()
        return Reply(200, content, "application/octet-stream")

    def _delete_file(self, request: Request, file_id: str) -> Reply:
        with self.lock:
            self.files.pop(file_id, None)
            self.counters.files_deleted += 1
        return Reply.json({"id": file_id, "object": "file", "deleted": True})

    # -- batches -------------------------------------------------------------------------------------------------

    def _create_batch(self, request: Request) -> Reply:
        params = request.json
        with self.lock:
            lines = [json.loads(line) for line in self.files[params["input_file_id"]].decode().splitlines() if line]
        extra = {"input": params["input_file_id"], "endpoint": params["endpoint"]}
        record = self.new_batch({line["custom_id"]: line["body"] for line in lines}, extra)
        with self.lock:
            return Reply.json(self._batch_object(record))

    def _retrieve_batch(self, request: Request, batch_id: str) -> Reply:
        if (record := self.find_batch(batch_id)) is None:
            return Reply.json({"error": {"message": f"No batch {batch_id}", "type": "invalid_request_error"}}, 404)
        self.poll(record)
        return Reply.json(self._batch_object(record))

    def _cancel_batch(self, request: Request, batch_id: str) -> Reply:
        if (record := self.find_batch(batch_id)) is None:
            return Reply.json({"error": {"message": f"No batch {batch_id}", "type": "invalid_request_error"}}, 404)
        with self.lock:
            self.counters.cancels += 1
            if not record.ended:
                record.cancelled = True
            return Reply.json(self._batch_object(record))

    def end(self, record: BatchRecord) -> None:
        super().end(record)
        with self.lock:
            lines = [record.results[custom_id] for custom_id in record.custom_ids]
            output = [line for line in lines if line.get("response") and line["response"]["status_code"] < 300]
            errors = [line for line in lines if line not in output]
            for kind, kept in (("output", output), ("error", errors)):
                if kept:
                    file_id = f"file-{self.next_number()}"
                    self.files[file_id] = "\n".join(json.dumps(line) for line in kept).encode() + b"\n"
                    record.extra[kind] = file_id

    def result_line(self, record: BatchRecord, custom_id: str) -> Any:
        line: dict[str, Any] = {"id": f"batch_req_{self.next_number()}", "custom_id": custom_id}
        if record.cancelled:
            return {**line, "response": None, "error": {"code": "batch_cancelled", "message": "Batch was cancelled."}}
        if record.outcome == "expired":
            return {**line, "response": None, "error": {"code": "batch_expired", "message": "Batch expired."}}
        if record.outcome in ("errored", "invalid"):
            status, kind = (500, "server_error") if record.outcome == "errored" else (400, "invalid_request_error")
            error = {"message": f"scripted {kind}", "type": kind, "param": None, "code": kind}
            return {
                **line,
                "response": {"status_code": status, "request_id": "req", "body": {"error": error}},
                "error": None,
            }
        body = record.bodies[custom_id]
        document = responses_document(body, self.answer(body), self.next_number())
        return {**line, "response": {"status_code": 200, "request_id": "req", "body": document}, "error": None}

    def _batch_object(self, record: BatchRecord) -> dict[str, Any]:
        if record.ended:
            status = "cancelled" if record.cancelled else {"expired": "expired"}.get(record.outcome, "completed")
        else:
            status = "cancelling" if record.cancelled else "in_progress"
        failed = sum(
            1 for line in record.results.values() if line.get("error") or line["response"]["status_code"] >= 300
        )
        return {
            "id": record.id,
            "object": "batch",
            "endpoint": record.extra.get("endpoint", "/v1/responses"),
            "input_file_id": record.extra["input"],
            "completion_window": "24h",
            "status": status,
            "output_file_id": record.extra.get("output"),
            "error_file_id": record.extra.get("error"),
            "errors": None,
            "created_at": _CREATED,
            "request_counts": {
                "total": len(record.custom_ids),
                "completed": len(record.results) - failed,
                "failed": failed,
            },
        }

    # -- responses: live and background ----------------------------------------------------------------------

    def _create_response(self, request: Request) -> Reply:
        body = request.json
        number = self.next_number()
        if not body.get("background"):
            with self.lock:
                self.counters.live_requests += 1
            return Reply.json(responses_document(body, self.answer(body), number))
        with self.lock:
            self.counters.background_creates += 1
            self.backgrounds[f"resp_{number}"] = {"body": body, "number": number, "polls": 0, "status": "queued"}
        self.gate("create")
        return Reply.json(responses_document(body, Turn(), number, status="queued"))

    def _retrieve_response(self, request: Request, response_id: str) -> Reply:
        with self.lock:
            if (job := self.backgrounds.get(response_id)) is None:
                return Reply.json(
                    {"error": {"message": f"No response {response_id}", "type": "invalid_request_error"}}, 404
                )
            self.counters.background_polls += 1
            job["polls"] += 1
            if job["status"] in ("queued", "in_progress"):
                job["status"] = "completed" if job["polls"] >= self.knobs.background_polls else "in_progress"
            status = job["status"]
        self.gate("status")
        turn = self.answer(job["body"]) if status == "completed" else Turn()
        return Reply.json(responses_document(job["body"], turn, job["number"], status=status))

    def _cancel_response(self, request: Request, response_id: str) -> Reply:
        with self.lock:
            if (job := self.backgrounds.get(response_id)) is None:
                return Reply.json(
                    {"error": {"message": f"No response {response_id}", "type": "invalid_request_error"}}, 404
                )
            self.counters.background_cancels += 1
            if job["status"] in ("queued", "in_progress"):
                job["status"] = "cancelled"
        return Reply.json(responses_document(job["body"], Turn(), job["number"], status=job["status"]))
