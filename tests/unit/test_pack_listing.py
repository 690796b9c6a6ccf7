"""A pack's listing: ``cache show --step N`` and the view open only the step they show (issue 35, item 9).

A real failed try records a 12 MB tool result beside small steps, sealed with a Fernet key, and packs them.
The reader lists and numbers the cache from the pack's (sealed) listing and decrypts only the step it shows;
what it shows is what a reader that opens every entry shows (the same pack without a listing, as an older
release wrote it). A listing that does not belong to its pack is ignored, and a listed step that is damaged
is shown as damaged when it is shown.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, local_store, task_identity

from airflow_pydantic_ai.durable.storage.pack import decode_pack, encode_pack
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name
from airflow_pydantic_ai.durable.storage.reader import CacheReader
from airflow_pydantic_ai.durable.storage.stored import stored_bytes

IDENTITY = task_identity("archive_dag", "triage")
LARGE = 12 * 1024 * 1024
LARGE_TOKEN = 1024 * 1024
"""Any token longer than this is the large step's (every other one is a few KB)."""


class CountingCipher:
    """A real Fernet that notes the length of every token it decrypts."""

    def __init__(self, key: bytes) -> None:
        self.fernet = Fernet(key)
        self.decrypted: list[int] = []

    def encrypt(self, data: bytes) -> bytes:
        return self.fernet.encrypt(data)

    def decrypt(self, token: bytes) -> bytes:
        self.decrypted.append(len(token))
        return self.fernet.decrypt(token)

    @property
    def large_decrypts(self) -> int:
        return sum(1 for size in self.decrypted if size > LARGE_TOKEN)


def archive_agent(calls: Counter[str]) -> Agent[Any, str]:
    """fetch_ticket (small), fetch_archive (12 MB), then notify, which fails: the try packs what it recorded."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for message in messages for part in message.parts if isinstance(part, ToolReturnPart))
        plan = ["fetch_ticket", "fetch_archive", "notify"]
        if done < len(plan):
            return ModelResponse(parts=[ToolCallPart(plan[done], {}, tool_call_id=f"call-{done}")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def fetch_ticket() -> str:
        calls["fetch_ticket"] += 1
        return "ticket 7: the login page times out"

    @agent.tool_plain
    def fetch_archive() -> str:
        calls["fetch_archive"] += 1
        return "x" * LARGE

    @agent.tool_plain
    def notify() -> str:
        calls["notify"] += 1
        raise ConnectionError("chat API down")

    return agent


def packed_cache(base: Path, cipher: Any) -> DurableHarness:
    harness = DurableHarness(base=str(base), identity=IDENTITY, cipher=cipher)
    with pytest.raises(ConnectionError):
        harness.run(archive_agent(Counter()), "triage ticket 7")
    return harness


def the_pack(root: Path) -> Path:
    [pack] = [path for path in root.iterdir() if is_pack_name(path.name)]
    return pack


def without_listing(harness: DurableHarness, base: Path) -> DurableHarness:
    """The same pack (the same entries, byte for byte) as a release before the listing wrote it, under ``base``."""
    pack_path = the_pack(harness.root)
    pack = decode_pack(pack_path.read_bytes(), owner=IDENTITY.owner())
    entries = {name: stored_bytes(body) for name, body in pack.bodies.items()}
    data = encode_pack(entries, attempt=pack.attempt, owner=IDENTITY.owner(), replaces=list(pack.replaces))
    older = DurableHarness(base=str(base), identity=IDENTITY, cipher=harness.cipher)
    older.root.mkdir(parents=True)
    (older.root / pack_path.name).write_bytes(data)
    return older


def shown(reader: CacheReader) -> tuple[list[dict[str, Any]], list[str]]:
    """Every row of the listing, and every step rendered (what ``cache show`` and the view print)."""
    steps = reader.steps()
    return [step.as_row() for step in steps], [reader.read(step.number).render(limit=200) for step in steps]


@pytest.fixture
def key() -> bytes:
    return Fernet.generate_key()


def test_showing_a_small_step_never_decrypts_the_large_one(tmp_path: Path, key: bytes) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key))
    cipher = CountingCipher(key)
    reader = CacheReader(local_store(harness.base, IDENTITY, cipher=cipher))

    detail = reader.read(2)

    assert (detail.info.kind, detail.info.name) == ("tool", "fetch_ticket")
    assert "the login page times out" in detail.render()
    assert cipher.large_decrypts == 0, "the 12 MB step was decrypted to show a small one"
    assert len(cipher.decrypted) == 2, "the pack's listing and the step shown"


def test_the_listing_decrypts_no_step_and_showing_the_large_step_decrypts_it_once(tmp_path: Path, key: bytes) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key))
    cipher = CountingCipher(key)
    reader = CacheReader(local_store(harness.base, IDENTITY, cipher=cipher))

    with reader.one_survey():  # the view's page: the steps, the calls and one step from one read
        steps = reader.steps()
        reader.companions()
        listed = len(cipher.decrypted)
        large = reader.read(4)

    assert [step.kind for step in steps] == ["model", "tool", "model", "tool", "model"]
    assert [steps[1].name, steps[3].name] == ["fetch_ticket", "fetch_archive"]
    assert steps[3].size > LARGE and large.info.name == "fetch_archive"
    assert listed == 1, "listing the steps and the calls decrypts the pack's listing only"
    assert cipher.large_decrypts == 1, "showing the large step decrypts it, once"


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_what_is_shown_is_what_opening_every_entry_shows(tmp_path: Path, key: bytes, encrypted: bool) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key) if encrypted else None)
    older = without_listing(harness, tmp_path / "older")

    listed = shown(CacheReader(harness.store()))
    opened = shown(CacheReader(older.store()))

    assert listed == opened
    assert len(listed[0]) == 5 and listed[0][3]["bytes"] > LARGE
    assert len(CacheReader(harness.store()).survey().unopened) == 5, "the steps were listed from the pack's listing"


def test_the_listing_is_sealed_with_the_entries(tmp_path: Path, key: bytes) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key))
    header = the_pack(harness.root).read_bytes().split(b',"entries":{', 1)[0]

    assert b"listing" in header
    assert b"fetch_archive" not in header and b"fetch_ticket" not in header


def test_a_listing_moved_from_another_pack_is_ignored(tmp_path: Path, key: bytes) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key))
    other = packed_cache(tmp_path / "other", CountingCipher(key))
    other_pack = decode_pack(the_pack(other.root).read_bytes(), owner=IDENTITY.owner())
    pack_path = the_pack(harness.root)
    pack = decode_pack(pack_path.read_bytes(), owner=IDENTITY.owner())
    # A bucket writer puts the other pack's sealed listing into this pack's header, and fixes the header checksum.
    document = json.loads(pack_path.read_bytes())
    document["listing"] = other_pack.sealed_listing
    document["names"] = sorted([*document["names"], "tool-" + "f" * 64 + ".json"])
    entries = {name: stored_bytes(body) for name, body in pack.bodies.items()}
    forged = encode_pack(entries, attempt=pack.attempt, owner=IDENTITY.owner(), replaces=[])
    pack_path.write_bytes(forged)
    cipher = CountingCipher(key)

    steps = CacheReader(local_store(harness.base, IDENTITY, cipher=cipher)).steps()

    assert [steps[1].name, steps[3].name] == ["fetch_ticket", "fetch_archive"]
    assert cipher.large_decrypts == 1, "without a listing of its own, the pack's entries are opened one by one"


def test_a_packed_step_damaged_after_packing_is_listed_and_shown_as_damaged(tmp_path: Path, key: bytes) -> None:
    harness = packed_cache(tmp_path / "cache", CountingCipher(key))
    pack_path = the_pack(harness.root)
    pack = decode_pack(pack_path.read_bytes(), owner=IDENTITY.owner())
    name = CacheReader(harness.store()).steps()[1].entry_name
    token = pack.bodies[name]["encrypted"]
    pack.bodies[name]["encrypted"] = token[:100] + ("A" if token[100] != "A" else "B") + token[101:]  # one flip
    entries = {entry: stored_bytes(stored) for entry, stored in pack.bodies.items()}
    listing = pack.listing(harness.cipher)  # the listing as the packer wrote it: it still lists the step as whole
    data = encode_pack(
        entries, attempt=pack.attempt, owner=IDENTITY.owner(), replaces=[], listing=listing, cipher=harness.cipher
    )
    pack_path.write_bytes(data)
    reader = CacheReader(harness.store())

    steps = reader.steps()
    detail = reader.read(steps[-1].number)

    assert [step.kind for step in steps] == ["model", "model", "tool", "model", "damaged"]
    assert steps[-1].entry_name == name and "failed authentication" in steps[-1].problem
    assert detail.content == {"problem": steps[-1].problem}
    assert name not in harness.store().load().entries, "a retry does not replay it either"
