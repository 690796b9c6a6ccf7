"""The per-step store on a real local filesystem."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from tests.helpers.durable import RUN_ID, RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable import StepStore, TaskIdentity
from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, StepEntry


def make_store(tmp_path, identity: TaskIdentity | None = None, warnings: list[str] | None = None) -> StepStore:
    sink = warnings if warnings is not None else []
    return local_store(tmp_path / "base", identity or task_identity(), warn=sink.append)


def entry(key: str = "a" * 64, kind: str = "tool", payload: dict | None = None) -> StepEntry:
    return StepEntry(
        kind=kind,  # type: ignore[arg-type]
        key=key,
        step=1,
        attempt=1,
        label="lookup",
        payload=payload if payload is not None else {"outcome": "return", "value": {"type": "json", "value": 1}},
    )


def test_location_is_readable_and_keeps_run_id_characters(tmp_path):
    store = make_store(tmp_path, TaskIdentity("my.dag-1", RUN_ID, "group.task", 3))
    assert store.location == f"file://{tmp_path}/base/my.dag-1/{RUN_ID}/group.task/3/"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (TaskIdentity("etl", RUN_ID, "load_data"), TaskIdentity("etl_load", RUN_ID, "data")),
        (TaskIdentity("a/b", RUN_ID, "c"), TaskIdentity("a", RUN_ID, "b/c")),
        (TaskIdentity("dag", RUN_ID, "task", -1), TaskIdentity("dag", RUN_ID, "task", 0)),
        (TaskIdentity("dag", "run%2F1", "task"), TaskIdentity("dag", "run/1", "task")),
        (TaskIdentity("dag", "..", "task"), TaskIdentity("dag", "%2E%2E", "task")),
    ],
)
def test_locations_never_collide(tmp_path, first, second):
    assert make_store(tmp_path, first).root != make_store(tmp_path, second).root


def test_no_segment_escapes_the_base(tmp_path):
    store = make_store(tmp_path, TaskIdentity("..", "..", ".."))
    assert os.path.normpath(store.root).startswith(str(tmp_path / "base"))
    assert "/../" not in store.root


def test_put_then_load_round_trips(tmp_path):
    store = make_store(tmp_path)
    written = entry()
    store.put(written)
    loaded = store.load()
    assert loaded.entries == {written.name: written}
    assert loaded.bytes_read == store.bytes_written > 0
    assert store.objects_written == 1


@pytest.fixture
def usual_umask():
    """The usual umask, under which group and others may read what ``os.makedirs`` creates."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_local_writes_are_atomic_and_private(tmp_path, usual_umask):
    store = make_store(tmp_path)
    store.put(entry())
    names = os.listdir(store.root)
    assert names == [entry().name], "no temporary file is left behind"
    assert os.stat(os.path.join(store.root, names[0])).st_mode & 0o777 == 0o600
    folder = store.root
    for _ in store.owner or []:  # map index, task, run and dag folders: none readable by others
        assert os.stat(folder).st_mode & 0o077 == 0, folder
        folder = os.path.dirname(folder)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[: len(data) // 2], "not valid JSON"),
        (lambda data: b"", "empty"),
        (lambda data: b"\xff\xfe garbage", "not valid JSON"),
        (lambda data: json.dumps({"hello": "world"}).encode(), "not an airflow-pydantic-ai step entry"),
        (lambda data: data.replace(b'"version":1', b'"version":99'), "schema version 99"),
        (lambda data: data.replace(b'"value":1', b'"value":2'), "checksum"),
    ],
)
def test_damaged_entries_are_skipped_with_a_warning(tmp_path, damage, reason):
    warnings: list[str] = []
    store = make_store(tmp_path, warnings=warnings)
    good, bad = entry("b" * 64), entry("c" * 64)
    store.put(good)
    store.put(bad)
    path = os.path.join(store.root, bad.name)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(damage(data))
    loaded = store.load()
    assert list(loaded.entries) == [good.name]
    assert reason in loaded.skipped[bad.name]
    [warning] = warnings
    assert bad.name in warning and reason in warning


def test_entry_under_another_name_is_rejected():
    data = entry("d" * 64).to_bytes()
    with pytest.raises(CorruptEntry, match="does not match its name"):
        StepEntry.from_bytes(data, name=f"tool-{'e' * 64}.json")


def test_clear_removes_the_task_instance_only(tmp_path):
    mapped0 = make_store(tmp_path, TaskIdentity("dag", RUN_ID, "task", 0))
    mapped1 = make_store(tmp_path, TaskIdentity("dag", RUN_ID, "task", 1))
    mapped0.put(entry())
    mapped1.put(entry())
    mapped0.clear()
    assert not mapped0.exists()
    assert mapped1.exists() and list(mapped1.load().entries)
    mapped1.clear()
    assert os.listdir(tmp_path / "base") == [], "empty parent folders go too"


def test_load_of_missing_cache_is_empty(tmp_path):
    loaded = make_store(tmp_path).load()
    assert loaded.entries == {} and loaded.skipped == {}


def test_remove_is_idempotent(tmp_path):
    store = make_store(tmp_path)
    store.put(entry())
    store.remove(entry().name)
    store.remove(entry().name)
    assert store.load().entries == {}


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plain"])
def test_an_entry_copied_from_another_task_instance_is_never_replayed(tmp_path, encrypted):
    """Keys are content digests: the same prompt in yesterday's run gives the same names. Copying
    yesterday's (authentic) entries into today's prefix must not make today replay yesterday's results."""
    import shutil

    from cryptography.fernet import Fernet
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from airflow_pydantic_ai.durable import Attempt, DurableCapability

    cipher = Fernet(Fernet.generate_key()) if encrypted else None
    prices = iter(["101.5", "97.25"])
    agent: Agent[None, str] = Agent(TestModel())

    @agent.tool_plain
    def get_price(symbol: str) -> str:
        return next(prices)

    def open_run(run_id: str, log: RecordingLog) -> Attempt:
        identity = task_identity("prices", "quote", run_id=run_id)
        store = local_store(tmp_path / "base", identity, warn=log.warning, cipher=cipher)
        return Attempt.open(store, attempt=1, log=log)

    yesterday = open_run("scheduled__2026-11-22", RecordingLog())
    agent.run_sync("quote ACME", capabilities=[DurableCapability(yesterday)])
    shutil.copytree(yesterday.store.root, tmp_path / "base" / "prices" / "scheduled__2026-11-23" / "quote" / "-1")

    log = RecordingLog()
    today = open_run("scheduled__2026-11-23", log)
    result = agent.run_sync("quote ACME", capabilities=[DurableCapability(today)])
    assert today.stats.replayed.total == 0
    assert "97.25" in result.output, "today's price, not yesterday's"
    assert sum("written for another task instance" in warning for warning in log.at("warning")) == 3


def test_long_ids_stay_within_one_file_name_and_never_collide(tmp_path):
    """Airflow ids may be 250 characters; percent-encoding triples non-ASCII ones. A local file name
    holds 255 bytes: long segments keep a readable start and a digest of the whole id."""
    long_dag = "報告" * 60  # 120 characters, 360 bytes of UTF-8, 1080 encoded
    twins = [TaskIdentity(long_dag + suffix, RUN_ID, "t" * 250) for suffix in ("a", "b")]
    stores = [make_store(tmp_path, identity) for identity in twins]
    for store in stores:
        store.put(entry())
        assert all(len(segment.encode()) <= 200 for segment in store.root.split("/"))
        assert store.location.split("/")[-5].startswith("%E5%A0%B1%E5%91%8A"), "still recognisable"
    assert stores[0].root != stores[1].root
    assert [list(store.load().entries) for store in stores] == [[entry().name]] * 2
    assert TaskIdentity("x" * 200, RUN_ID, "t").segments()[0] == "x" * 200, "short enough ids are kept as they are"


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_the_result_entry_has_the_guarantees_of_a_step(tmp_path, encrypted):
    """Checksum, owner binding and encryption cover the recorded output; another task instance's is rejected."""
    from cryptography.fernet import Fernet

    from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY

    cipher = Fernet(Fernet.generate_key()) if encrypted else None
    store = make_store(tmp_path)
    store.cipher = cipher
    result = StepEntry(
        kind="result",
        key="output",
        step=3,
        attempt=1,
        label="output",
        payload={"value": {"type": "json", "value": "the answer"}},
        role="result",
    )
    assert result.name == RESULT_ENTRY
    store.put(result)
    data = (tmp_path / "base" / "dag" / RUN_ID / "task" / "-1" / RESULT_ENTRY).read_bytes()
    assert (b"the answer" in data) is not encrypted
    assert store.load().entries == {RESULT_ENTRY: result}
    tomorrow = make_store(tmp_path, TaskIdentity("dag", "manual__2026-11-23T04:00:00+00:00", "task"))
    tomorrow.cipher = cipher
    with pytest.raises(CorruptEntry, match="another task instance"):
        StepEntry.from_bytes(data, name=RESULT_ENTRY, cipher=cipher, owner=tomorrow.owner)
    if not encrypted:
        edited = data.replace(b"the answer", b"the forged")
        with pytest.raises(CorruptEntry, match="checksum"):
            StepEntry.from_bytes(edited, name=RESULT_ENTRY, owner=store.owner)


def test_clear_deletes_the_given_entries_first_and_the_result_last(tmp_path):
    from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY

    store = make_store(tmp_path)
    names = [entry(key=key * 64).name for key in "abc"]
    for key in "abc":
        store.put(entry(key=key * 64))
    store.put(StepEntry(kind="result", key="output", step=1, attempt=1, label="output", payload={}))
    deleted: list[str] = []
    store.fs = _DeletionLog(store.fs, deleted)
    store.clear(newest_first=[names[2], names[0]])
    assert deleted == [names[2], names[0], names[1], RESULT_ENTRY]
    assert not store.exists()


class _DeletionLog:
    """A filesystem that notes the name of every file deleted through ``rm_file``, in order."""

    def __init__(self, real: Any, deleted: list[str]) -> None:
        self._real = real
        self._deleted = deleted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def rm_file(self, path: str) -> None:
        self._deleted.append(path.rsplit("/", 1)[-1])
        self._real.rm_file(path)
