"""Damage done to cache entries between two tries, and the agent whose cache gets damaged.

The agent calls ``fetch(1)`` .. ``fetch(N)``, then ``notify()`` (which fails on the first attempt when told
to), then reports every result. :data:`DAMAGES` names each way an entry can be damaged. Used by
tests/unit/test_faults_damage.py (two attempts on a local store) and tests/dags/test_damaged_cache_airflow.py
(a real ``dag.test()`` retry).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.durable.storage.entry import ENTRY_FORMAT, StepEntry

PROMPT = "triage the tickets"
FETCHES = 3


def fetch_result(n: int) -> str:
    return f"ticket {n}: login page times out ({n * 7})"


def build_agent(calls: Counter[str], fail_notify: dict[str, bool], fetches: int = FETCHES) -> Agent[Any, str]:
    """fetch(1) .. fetch(N), then notify(); the model then reports every result."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        done = len(returns)
        if done < fetches:
            return ModelResponse(parts=[ToolCallPart("fetch", {"n": done + 1}, tool_call_id=f"fetch-{done + 1}")])
        if done == fetches:
            return ModelResponse(parts=[ToolCallPart("notify", {}, tool_call_id="notify")])
        return ModelResponse(parts=[TextPart(" / ".join(str(part.content) for part in returns))])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch ticket n."""
        calls[f"fetch {n}"] += 1
        return fetch_result(n)

    @agent.tool_plain
    def notify() -> str:
        """Notify the team."""
        calls["notify"] += 1
        if fail_notify["fail"]:
            fail_notify["fail"] = False
            raise ConnectionError("chat API down (first attempt only)")
        return "posted"

    return agent


def expected_output(fetches: int = FETCHES) -> str:
    return " / ".join([*(fetch_result(n) for n in range(1, fetches + 1)), "posted"])


def entries_on_disk(root: Path) -> dict[tuple[str, int], Path]:
    """(kind, step) -> path of every entry: a tool entry's step is the model step that asked for it."""
    found = {}
    for path in root.glob("*.json"):
        body = json.loads(path.read_bytes())
        found[(body["kind"], body["step"])] = path
    return found


def _garble(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[: middle - 8] + bytes(byte ^ 0x5A for byte in data[middle - 8 : middle + 8]) + data[middle + 8 :]


def reencoded(path: Path, **changes: Any) -> bytes:
    """The entry at ``path`` rewritten with some fields changed and a *valid* checksum."""
    body = json.loads(path.read_bytes())
    entry = StepEntry(
        kind=body["kind"],
        key=body["key"],
        step=body["step"],
        attempt=body["attempt"],
        label=body["label"],
        payload=body["payload"],
        components=body["components"],
        usage=body["usage"],
    )
    fields = {**entry.__dict__, **changes}
    return StepEntry(**fields).to_bytes(owner=body["owner"])


def _future_version(path: Path) -> bytes:
    body = json.loads(path.read_bytes())
    body["version"] = 2
    body["written_by"] = "airflow-pydantic-ai 9.0"
    return json.dumps(body).encode()


def unrebuildable_payload(path: Path) -> bytes:
    body = json.loads(path.read_bytes())
    if body["kind"] == "tool":
        return reencoded(path, payload={"outcome": "return", "value": {"type": "martian", "value": 1}})
    return reencoded(path, payload={"response": {"parts": 7, "kind": "response"}})


def _payload_of_the_wrong_shape(path: Path) -> bytes:
    """A valid, checksummed entry whose payload holds a number where an object belongs."""
    body = json.loads(path.read_bytes())
    if body["kind"] == "tool":
        return reencoded(path, payload={"outcome": "return", "value": 5})
    return reencoded(path, payload={"response": 5})


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _as_directory(path: Path, _other: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("not an entry")


# Each damage: (path of the target, path of a sibling entry of the same kind) -> what to do.
DAMAGES: dict[str, Any] = {
    "truncated": lambda path, other: _write(path, path.read_bytes()[: len(path.read_bytes()) // 2]),
    "truncated-by-one-byte": lambda path, other: _write(path, path.read_bytes()[:-1]),
    "garbled": lambda path, other: _write(path, _garble(path.read_bytes())),
    "empty": lambda path, other: _write(path, b""),
    "nul-bytes": lambda path, other: _write(path, b"\x00" * 512),
    "wrong-schema-field": lambda path, other: _write(path, reencoded(path, step="two")),
    "wrong-schema-kind": lambda path, other: _write(path, reencoded(path, kind="thought")),
    "unrebuildable-payload": lambda path, other: _write(path, unrebuildable_payload(path)),
    "payload-of-the-wrong-shape": lambda path, other: _write(path, _payload_of_the_wrong_shape(path)),
    "future-schema-version": lambda path, other: _write(path, _future_version(path)),
    "foreign-json-object": lambda path, other: _write(path, json.dumps({"hello": "world", "step": 1}).encode()),
    "foreign-json-array": lambda path, other: _write(path, b"[1, 2, 3]"),
    "foreign-same-format-tag": lambda path, other: _write(
        path, json.dumps({"format": ENTRY_FORMAT, "version": 1, "kind": "tool"}).encode()
    ),
    "encrypted-without-key": lambda path, other: _write(
        path, json.dumps({"format": ENTRY_FORMAT, "version": 1, "encrypted": "gAAAAABnot-a-token"}).encode()
    ),
    "edited-content-stale-checksum": lambda path, other: _write(
        path, path.read_bytes().replace(b'"attempt":1', b'"attempt":7')
    ),
    "key-mismatch-copy-of-sibling": lambda path, other: _write(path, other.read_bytes()),
    "directory-in-place": _as_directory,
}
