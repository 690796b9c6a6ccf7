"""Forgetting the answer a run failed on leaves no gap: a tombstone is written before anything is deleted, and
every later load ignores the forgotten copy wherever it sits (a pack a kill left behind, a zombie's later pack),
while the answer the model gives when it is asked again (the same request, so the same entry name) is replayed.

Each try runs a real agent (``tests/helpers/forgetting.py``): the failed answer ("bad") would fail the retry
the same way if it were replayed; asked again, the model says "good".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest
from pydantic_ai.exceptions import UnexpectedModelBehavior
from tests.helpers.durable import DurableHarness, task_identity
from tests.helpers.forgetting import PROMPT, Killed, Script, answering_agent

from airflow_pydantic_ai.durable import run_agent
from airflow_pydantic_ai.durable.storage.catalog import list_caches
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name
from airflow_pydantic_ai.durable.storage.reader import CacheReader
from airflow_pydantic_ai.durable.storage.store import StepStore
from airflow_pydantic_ai.durable.storage.tombstone import Mark, forgotten_by, tombstone

IDENTITY = task_identity("forget_dag", "summarise")


def harness_for(tmp_path: Path) -> DurableHarness:
    return DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)


def tombstones(root: Path) -> list[str]:
    """The tombstones the prefix holds, single or packed (names, from the packs' own lists)."""
    names = [path.name for path in root.iterdir() if path.name.startswith("forgotten-")]
    for pack in (path for path in root.iterdir() if is_pack_name(path.name)):
        names += [name for name in _pack_names(pack) if name.startswith("forgotten-")]
    return names


def _pack_names(pack: Path) -> list[str]:
    from airflow_pydantic_ai.durable.storage.pack import decode_pack

    return list(decode_pack(pack.read_bytes(), owner=IDENTITY.owner()).bodies)


def answer_recorded_then_try_failed(harness: DurableHarness, script: Script) -> None:
    """Try 1: the model says "bad" (recorded), then the checker is down: the try fails and packs the answer."""
    with pytest.raises(ConnectionError):
        harness.run(answering_agent(script), PROMPT)


def kill_at_the_first_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker dies right after its first deletion, or as it starts writing a pack (whichever comes first)."""
    remove_objects = StepStore._remove_objects

    def remove_then_die(store: StepStore, names: Any) -> None:
        remove_objects(store, names)
        if names:
            raise Killed

    def die(store: StepStore, attempt: int) -> None:
        raise Killed

    monkeypatch.setattr(StepStore, "_remove_objects", remove_then_die)
    monkeypatch.setattr(StepStore, "pack", die)


def assert_asked_again(harness: DurableHarness, script: Script) -> None:
    """The next try asks the model again (the forgotten "bad" is not replayed) and succeeds."""
    asked = script.asked
    result, run, _ = harness.run(answering_agent(script), PROMPT)
    assert result.output == "good"
    assert script.asked == asked + 1, "the model was asked again"
    assert run.stats.replayed.model == 0


@pytest.mark.parametrize("copies", ["packed", "packed and single"])
def test_a_kill_between_deleting_the_answer_and_rewriting_its_pack_does_not_bring_it_back(
    tmp_path, monkeypatch, copies
):
    harness, script = harness_for(tmp_path), Script(["bad", "good"], down={"bad"})
    if copies == "packed":
        answer_recorded_then_try_failed(harness, script)
    else:  # the pack was written and the try killed before it deleted the singles: the answer is held twice
        with pytest.raises(ConnectionError):
            harness.run(answering_agent(script), PROMPT, killed=True)
        store = harness.store()
        store.load()
        with monkeypatch.context() as patch:
            patch.setattr(StepStore, "_remove_objects", lambda store, names: None)
            store.pack(1)
        assert sorted(path.suffix for path in harness.root.iterdir() if not path.name.startswith(".")) == [
            ".json",
            ".pack",
        ]

    with monkeypatch.context() as patch:  # try 2 replays "bad", gives up, and is killed while it forgets it
        kill_at_the_first_removal(patch)
        with pytest.raises(Killed):
            harness.run(answering_agent(script), PROMPT)
    assert script.asked == 1
    assert any(is_pack_name(path.name) for path in harness.root.iterdir()), "the old pack still holds the answer"

    assert_asked_again(harness, script)


def test_a_zombie_packing_what_it_loaded_does_not_bring_a_forgotten_answer_back(tmp_path):
    harness, script = harness_for(tmp_path), Script(["bad", "good"], down={"bad"})
    zombie, _ = harness.open()  # try 1: records "bad", then loses its heartbeat while the checker is down
    with pytest.raises(ConnectionError):
        run_agent(zombie, answering_agent(script), PROMPT)

    with pytest.raises(UnexpectedModelBehavior):  # try 2: replays "bad", gives up and forgets it
        harness.run(answering_agent(script), PROMPT)
    zombie.pack_for_next_try()  # try 1 ends at last, and packs the answer it recorded

    assert script.asked == 1
    assert_asked_again(harness, script)


def test_the_answer_asked_again_is_replayed_despite_the_tombstone(tmp_path):
    harness, script = harness_for(tmp_path), Script(["bad", "good"], down={"bad", "good"})
    zombie, _ = harness.open()
    with pytest.raises(ConnectionError):
        run_agent(zombie, answering_agent(script), PROMPT)
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    forgotten = next(iter(harness.store().load().tombstones.values()))
    zombie.pack_for_next_try()

    with pytest.raises(ConnectionError):  # try 3: asked again, "good" is recorded, then the checker is down
        harness.run(answering_agent(script), PROMPT)
    assert script.asked == 2

    result, run, _ = harness.run(answering_agent(script), PROMPT)  # try 4 replays "good"

    assert result.output == "good"
    assert script.asked == 2 and run.stats.replayed.model == 1
    [answer] = run.entries.values()
    assert (answer.attempt, list(forgotten_by(forgotten))) == (3, [answer.name]), "the same name, recorded later"


def test_success_deletes_the_tombstones_with_the_cache(tmp_path):
    harness, script = harness_for(tmp_path), Script(["bad", "good"])
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    assert len(tombstones(harness.root)) == 1

    result, run, _ = harness.run(answering_agent(script), PROMPT)
    run.finish()

    assert result.output == "good"
    assert not harness.root.exists()


def test_a_tombstone_that_cannot_be_written_leaves_the_answer_in_place_and_says_so(tmp_path, monkeypatch):
    harness, script = harness_for(tmp_path), Script(["bad", "good"])
    put = StepStore.put

    def put_but_no_tombstone(store: StepStore, entry: StepEntry) -> None:
        if entry.kind == "forgotten":
            raise PermissionError("access denied")
        put(store, entry)

    monkeypatch.setattr(StepStore, "put", put_but_no_tombstone)
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    log = harness.logs[-1]

    [error] = log.at("error")
    assert "nothing was removed" in error and "fails the same way" in error and "access denied" in error
    assert not any("removed from the cache" in line for line in log.at("info"))
    with pytest.raises(UnexpectedModelBehavior):  # as the log said: the answer is replayed, the retry fails
        harness.run(answering_agent(script), PROMPT)
    assert script.asked == 1


def test_forgetting_logs_one_info_line_and_keeps_the_tombstone_out_of_every_listing(tmp_path):
    harness, script = harness_for(tmp_path), Script(["bad", "good"])
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    log = harness.logs[-1]

    assert any("removed from the cache so a retry asks again" in line for line in log.at("info"))
    assert not log.at("error") and not log.at("warning")
    store = harness.store()
    assert store.load().entries == {}
    assert CacheReader(store).steps() == []
    [cache] = list_caches(fsspec.filesystem("file"), harness.base, f"file://{harness.base}")
    assert (cache.model_steps, cache.tool_steps) == (0, 0)


def test_a_tombstone_forgets_its_copy_and_older_ones_wherever_they_sit_never_a_later_one(tmp_path):
    store = harness_for(tmp_path).store()

    def answer(attempt: int, at: float) -> StepEntry:
        return StepEntry(kind="model", key="a" * 64, step=1, attempt=attempt, label="m", payload={}, recorded_at=at)

    store.put(answer(1, 10.0))
    store.pack(1)  # the copy of try 1, packed
    store.put(answer(2, 20.0))  # the copy of try 2, single
    store.put(tombstone({answer(2, 20.0).name: Mark(2, 20.0)}, attempt=2, step=1, recorded_at=21.0))

    assert store.load().entries == {}
    store.pack(2)  # the tombstone is carried; the forgotten copies are not
    [pack] = [path for path in Path(store.root).iterdir()]
    assert [name.split("-")[0] for name in _pack_names(pack)] == ["forgotten"]

    store.put(answer(3, 30.0))
    assert store.load().entries[answer(3, 30.0).name].attempt == 3


def test_a_cache_of_an_earlier_dag_run_holding_only_a_tombstone_is_discarded(tmp_path):
    harness, script = harness_for(tmp_path), Script(["bad", "good"])
    with pytest.raises(UnexpectedModelBehavior):
        harness.run(answering_agent(script), PROMPT)
    assert tombstones(harness.root)

    _, log = harness.open(belongs=lambda tries: False)  # a new DAG run with the same ids, at try 1 again

    assert any("left by an earlier run" in line for line in log.at("warning"))
    assert not harness.root.exists() or not tombstones(harness.root)
