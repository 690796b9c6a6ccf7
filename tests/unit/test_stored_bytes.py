"""What is stored, byte for byte: the encoded form of known entries and the digests of known messages are pinned.

Speed work on the record path (one serialisation where there were two, issue 37) must not change one stored byte
or one key: an entry written by this release must read back in every earlier one, and a cache recorded earlier
must keep replaying. The pins were taken from the code before that work; a change to them is a format change.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from airflow_pydantic_ai.durable.keys.message_digests import MessageDigests
from airflow_pydantic_ai.durable.keys.releases import installed_release
from airflow_pydantic_ai.durable.storage.entry import StepEntry

_OWNER = ["dag", "run", "task", -1]
_AT = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
_BIG = "".join(chr(32 + (index * 7) % 95) for index in range(70_000))
"""A large tool result with every printable ASCII character (quotes and backslashes to escape)."""

ENTRIES: dict[str, StepEntry] = {
    "tool, sorted payload": StepEntry(
        kind="tool",
        key="a" * 64,
        step=3,
        attempt=1,
        label="fetch_page",
        payload={"outcome": "return", "value": {"type": "json", "value": _BIG}},
        call_id="call-3",
        role="tool",
        recorded_at=1796598519.7275715,
        recorded_with={"pydantic_ai": "2.78.0", "keys": "model-request/v2"},
    ),
    "model, unsorted payload and components": StepEntry(
        kind="model",
        key="b" * 64,
        step=2,
        attempt=2,
        label="function:bench",
        payload={
            "response": {
                "parts": [{"tool_name": "fetch", "args": {"z": 1, "a": [1.5, None, True]}, "part_kind": "tool-call"}],
                "usage": {"output_tokens": 12, "input_tokens": 50},
            },
            "cost": None,
        },
        components={"model": "m", "history": "h", "tools": {"b": "1", "a": "2"}, "message_count": 3},
        usage={"output_tokens": 12, "input_tokens": 50},
        recorded_at=1.5,
        scope={"parent": "top", "index": 1, "at": 2, "agent": "inner", "depth": 1},
        recorded_with={"pydantic_ai": "2.78.0", "keys": "model-request/v2"},
    ),
    "text beyond ASCII, no recorded_with (0.2.0)": StepEntry(
        kind="tool",
        key="c" * 64,
        step=1,
        attempt=1,
        label="météo",
        payload={"outcome": "return", "value": {"type": "json", "value": {"ville": "Zürich", "temp": "\u22123 °C 🌨"}}},
    ),
    "lone surrogate (an undecodable file name)": StepEntry(
        kind="tool",
        key="d" * 64,
        step=1,
        attempt=1,
        label="ls",
        payload={"outcome": "return", "value": {"type": "json", "value": ["ok", "bad\udcff.txt"]}},
    ),
    "numbers and empty containers": StepEntry(
        kind="tool",
        key="e" * 64,
        step=4,
        attempt=3,
        label="calc",
        payload={"value": {"b": [], "a": {}, "c": [0.1, -0.0, 1e300, 2**70, False]}, "outcome": "return"},
        call_id="c4",
    ),
}

STORED_SHA256: dict[str, str] = {
    "tool, sorted payload": "e95f5678346dc8193e462a37004782ee731c0a62b449a444cc02243a3ca574fc",
    "model, unsorted payload and components": "3b23955bbf6f96ab7b3157ea3008edb3d61ac502349633e841da35dbe5a639e9",
    "text beyond ASCII, no recorded_with (0.2.0)": "c2a50f598febd2bf73bb6a1761101c77693101cbb560b5f40b81cd31026c2fe7",
    "lone surrogate (an undecodable file name)": "12883e205a71fe195c9a15a74302c2761af82ad5167b63bc483dce5cef5a20f2",
    "numbers and empty containers": "5712dea4ee47b7e006cfc668a786a4b65d489fa2622b982787183444b3541563",
}

MESSAGES: dict[str, list[ModelMessage]] = {
    "a prompt, a call, a large return": [
        ModelRequest(
            parts=[SystemPromptPart("Be brief.", timestamp=_AT), UserPromptPart("Fetch the pages.", timestamp=_AT)],
            instructions="Use the tools.",
            run_id="run-1",
        ),
        ModelResponse(
            parts=[ToolCallPart("fetch_page", {"step": 0}, tool_call_id="c0")],
            model_name="bench",
            timestamp=_AT,
        ),
        ModelRequest(
            parts=[ToolReturnPart("fetch_page", _BIG, tool_call_id="c0", timestamp=_AT)],
            instructions="Use the tools.",
            run_id="run-1",
        ),
        ModelResponse(parts=[TextPart("Done.")], model_name="bench", timestamp=_AT),
    ],
    "a prompt beside a tool return": [
        ModelRequest(
            parts=[
                ToolReturnPart("fetch_page", {"rows": [1, 2], "next": "é"}, tool_call_id="c1", timestamp=_AT),
                UserPromptPart("And now the summary.", timestamp=_AT),
            ],
            run_id="run-2",
        ),
    ],
}

DIGESTS: dict[str, list[tuple[str, str, str, str, str]]] = {
    "a prompt, a call, a large return": [
        (
            "c92c92fbc0e6dae0f5f75d7f8e67751ede412df081e35fc607877b990010f797",
            "a6edadf566ab851abf7ad5711c7ca0f0f3a0f4968befb41784322c9636c81cad",
            "1fbbfb7eb435de93aed774ba1d7f62ac1fd384f4c7ac508ba7aa5beeec38273d",
            "15c4907f036dc3190507c950b0915b7353798acaac4a04853a74cc4001dd1d9c",
            "a572666ff4cb5224395d89be1d95e6b3665ea08982218d3f74a0d72173d13a7c",
        ),
        (
            "542fe810726a796d55ef7fa4d47c7b8040f6d470516b7530e2794dc99385191b",
            "",
            "67ec4cfa5a08ee3f4811073d39c4d443d4c84b5452778eb3d0a613ee12f6e6ee",
            "04041a39e9767c77f7fc63538c94ad54c941e29bd62a274dfd5f8d26ddecbc95",
            "542fe810726a796d55ef7fa4d47c7b8040f6d470516b7530e2794dc99385191b",
        ),
        (
            "dfbe0edc43cd5f1562378d2467d23faa2aa96ac8dfa8f86ccc5efde2a062652d",
            "",
            "1fbbfb7eb435de93aed774ba1d7f62ac1fd384f4c7ac508ba7aa5beeec38273d",
            "04041a39e9767c77f7fc63538c94ad54c941e29bd62a274dfd5f8d26ddecbc95",
            "924fbbc9b2d36cdedc8650b1b03b52352ea28e460c8bfe57951758567249d7a1",
        ),
        (
            "c326f9c0e68f5f4408b1f53e32ecf3cf2232f58ecacdd12e53fb9b346b60853d",
            "",
            "67ec4cfa5a08ee3f4811073d39c4d443d4c84b5452778eb3d0a613ee12f6e6ee",
            "04041a39e9767c77f7fc63538c94ad54c941e29bd62a274dfd5f8d26ddecbc95",
            "c326f9c0e68f5f4408b1f53e32ecf3cf2232f58ecacdd12e53fb9b346b60853d",
        ),
    ],
    "a prompt beside a tool return": [
        (
            "918e5f28eab3a59391ff6c83bf390fff6fd41236c18a6d77d46f0a952759e019",
            "",
            "67ec4cfa5a08ee3f4811073d39c4d443d4c84b5452778eb3d0a613ee12f6e6ee",
            "7f2cf3f25cdefa4b31fb78494e11407e71cbec2ab8a72016e78a33a3959d2143",
            "e84b7374099e43c88e39942b0a212934360e6f50bf3212309ba01af9f2b916fc",
        )
    ],
}


def digests_of(messages: list[ModelMessage]) -> list[tuple[str, str, str, str, str]]:
    memo = MessageDigests()
    return [
        (digest.full, digest.system, digest.instructions, digest.user_prompt, digest.other)
        for digest in map(memo.message, messages)
    ]


@pytest.mark.parametrize("name", list(ENTRIES))
def test_stored_bytes_are_pinned(name: str) -> None:
    data = ENTRIES[name].to_bytes(owner=_OWNER)
    assert hashlib.sha256(data).hexdigest() == STORED_SHA256[name]
    # ...and they read back as the same entry.
    assert StepEntry.from_bytes(data, name=ENTRIES[name].name, owner=_OWNER) == ENTRIES[name]


def test_stored_form_is_compact_json_in_field_order_with_a_checksum_over_sorted_keys() -> None:
    """The format in words, for the one entry whose payload is not in sorted order."""
    entry = ENTRIES["model, unsorted payload and components"]
    body = json.loads(entry.to_bytes(owner=_OWNER))
    checksum = body.pop("checksum")
    assert list(body["payload"]["response"]["usage"]) == ["output_tokens", "input_tokens"]  # the payload's own order
    assert list(body["components"]["tools"]) == ["b", "a"]
    ordered = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert checksum == hashlib.sha256(ordered.encode()).hexdigest()


_MORE: dict[str, StepEntry] = {
    "many small objects in order (more than one walk looks at)": dataclasses.replace(
        ENTRIES["tool, sorted payload"],
        payload={"outcome": "return", "value": [{"a": i, "b": [i]} for i in range(3000)]},
    ),
    "an object out of order deep down": dataclasses.replace(
        ENTRIES["tool, sorted payload"], payload={"outcome": "return", "value": [[[{"b": 1, "a": _BIG}]]]}
    ),
    "keys that are not text": dataclasses.replace(
        ENTRIES["tool, sorted payload"], payload={"outcome": "return", "value": {1: "one", 2: "two"}}
    ),
}


@pytest.mark.parametrize("name", [*ENTRIES, *_MORE])
def test_stored_bytes_are_the_format_in_words(name: str) -> None:
    """json.dumps of the fields in their order, then the SHA-256 of json.dumps(sort_keys=True) of them."""
    entry = ENTRIES.get(name) or _MORE[name]
    body = {"format": "airflow-pydantic-ai/step", "version": 1, "owner": _OWNER}
    body |= {key: getattr(entry, key) for key in ("kind", "key", "step", "attempt", "label", "components", "usage")}
    body |= {key: getattr(entry, key) for key in ("call_id", "role", "recorded_at", "payload")}
    body |= {key: getattr(entry, key) for key in ("scope", "recorded_with") if getattr(entry, key) is not None}
    ordered = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body["checksum"] = hashlib.sha256(ordered.encode("utf-8", "surrogatepass")).hexdigest()
    try:
        expected = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        expected = json.dumps(body, separators=(",", ":")).encode()
    assert entry.to_bytes(owner=_OWNER) == expected


def test_keys_that_do_not_sort_are_refused_as_before() -> None:
    """A payload json cannot sort is not stored (the writer catches the TypeError and says why)."""
    entry = dataclasses.replace(ENTRIES["tool, sorted payload"], payload={"value": {1: "one", "a": "two"}})
    with pytest.raises(TypeError):
        entry.to_bytes(owner=_OWNER)


@pytest.mark.skipif(
    installed_release() != "2.78.0",
    reason="pinned under pydantic-ai 2.78.0: other releases serialise other message fields (the keys across releases "
    "are test_keys_across_releases.py's)",
)
@pytest.mark.parametrize("name", list(MESSAGES))
def test_message_digests_are_pinned(name: str) -> None:
    assert digests_of(MESSAGES[name]) == DIGESTS[name]
