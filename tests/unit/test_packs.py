"""Packs: a try that ends without success packs what it saw into one object; the next try reads it whole.

The fault rows for packs that need no process to kill: a pack written half-way, a damaged entry inside a
pack, a damaged pack whose entries are still single, two tries that packed at once (a zombie), and a
pack beside the single entries of a later try that was killed. Each checks the same two numbers as the
crash table: no wrong replay, no finished step lost. The read side (steps, delete from step N), the
catalog and the count see a packed cache as steps, exactly as the same cache unpacked.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import fsspec
import pytest
from tests.helpers.damage import FETCHES, PROMPT, build_agent, expected_output
from tests.helpers.durable import DurableHarness, task_identity

from airflow_pydantic_ai.durable.storage.catalog import list_caches
from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY, StepEntry
from airflow_pydantic_ai.durable.storage.pack import decode_pack
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name, parse_pack_name
from airflow_pydantic_ai.durable.storage.reader import CacheReader

IDENTITY = task_identity("pack_dag", "agent")
STEPS = 2 * FETCHES + 1  # model answers and fetches before notify failed: 4 + 3


def harness_for(tmp_path: Path) -> DurableHarness:
    return DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)


def objects(root: Path) -> list[str]:
    """What the prefix holds, notes (names starting with ".") left out."""
    return sorted(path.name for path in root.iterdir() if not path.name.startswith("."))


def failed_try(harness: DurableHarness, calls: Counter[str], fail: dict[str, bool], *, killed: bool = False) -> None:
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail), PROMPT, killed=killed)


def the_pack(root: Path) -> Path:
    [pack] = [path for path in root.iterdir() if is_pack_name(path.name)]
    return pack


def test_a_failed_try_packs_its_entries_and_the_retry_replays_them_all(tmp_path):
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail)
    root = harness.root

    [name] = objects(root)
    parsed = parse_pack_name(name)
    assert parsed is not None and (parsed.attempt, parsed.model, parsed.tool, parsed.entries) == (1, 4, 3, STEPS)

    result, run, log = harness.run(build_agent(calls, fail), PROMPT)

    assert result.output == expected_output()
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (4, 3)
    assert calls == {"fetch 1": 1, "fetch 2": 1, "fetch 3": 1, "notify": 2}
    assert not log.at("warning") and not log.at("error")


def test_a_second_failed_try_replaces_the_first_pack(tmp_path):
    harness, calls = harness_for(tmp_path), Counter[str]()
    failed_try(harness, calls, {"fail": True})
    first = the_pack(harness.root).name
    failed_try(harness, calls, {"fail": True})  # replays all, fails again at notify, packs again

    [second] = objects(harness.root)
    assert second != first and parse_pack_name(second).attempt == 2  # type: ignore[union-attr]
    assert decode_pack(the_pack(harness.root).read_bytes(), owner=IDENTITY.owner()).replaces == (first,)


def test_the_recorded_output_is_never_packed(tmp_path):
    harness = harness_for(tmp_path)
    run, _ = harness.open()
    run.record_output("the answer")
    run.pack_for_next_try()

    assert RESULT_ENTRY in objects(harness.root)
    assert not any(is_pack_name(name) for name in objects(harness.root)), "nothing but the result: no pack"


# --- the fault rows for packs -----------------------------------------------------------------------


def test_a_pack_written_half_way_is_ignored_with_a_warning_and_its_steps_run_live(tmp_path):
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail)
    pack = the_pack(harness.root)
    data = pack.read_bytes()
    pack.write_bytes(data[: len(data) // 2])  # as a filesystem without atomic rename leaves it

    result, run, log = harness.run(build_agent(calls, fail), PROMPT)

    assert result.output == expected_output()
    assert run.stats.replayed.total == 0, "nothing of a torn pack is replayed"
    [warning] = [line for line in log.at("warning") if pack.name in line]
    assert "half-way" in warning and "run live" in warning


def test_a_damaged_entry_inside_a_pack_costs_that_entry_only(tmp_path):
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail)
    pack = the_pack(harness.root)
    document = json.loads(pack.read_bytes())
    [victim] = [name for name, body in document["entries"].items() if body["call_id"] == "fetch-2"]
    document["entries"][victim]["payload"]["forged"] = True  # its checksum no longer matches
    pack.write_text(json.dumps(document))

    result, run, log = harness.run(build_agent(calls, fail), PROMPT)

    assert result.output == expected_output()
    assert calls == {"fetch 1": 1, "fetch 2": 2, "fetch 3": 1, "notify": 2}, "only fetch 2 ran again"
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (4, 2)
    [warning] = log.at("warning")
    assert victim in warning and pack.name in warning and "checksum" in warning


def test_a_damaged_pack_loses_nothing_a_single_entry_still_holds(tmp_path):
    """Killed after the pack was written and before the singles were removed; then the pack was damaged."""
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    singles = killed_then_packed(harness, calls, fail)
    pack = the_pack(harness.root)
    pack.write_bytes(pack.read_bytes()[:-40])

    result, run, log = harness.run(build_agent(calls, fail), PROMPT)

    assert result.output == expected_output()
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (4, 3), "every step came from its single entry"
    assert len(singles) == STEPS
    [warning] = log.at("warning")
    assert pack.name in warning and "single entries" in warning


def killed_then_packed(harness: DurableHarness, calls: Counter[str], fail: dict[str, bool]) -> dict[str, bytes]:
    """A try killed where it failed (single entries), then a pack of them written and the process killed
    before it removed the singles: the singles are put back as the kill left them. Returns them."""
    failed_try(harness, calls, fail, killed=True)
    singles = {path.name: path.read_bytes() for path in harness.root.iterdir() if not path.name.startswith(".")}
    store = harness.store()
    store.load()
    assert store.pack(1) is not None
    for single, data in singles.items():
        (harness.root / single).write_bytes(data)
    return singles


def test_a_pack_beside_the_singles_it_holds_replays_each_step_once(tmp_path):
    """Killed after the pack was written, before the single entries it holds were removed."""
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    killed_then_packed(harness, calls, fail)

    result, run, log = harness.run(build_agent(calls, fail), PROMPT)

    assert result.output == expected_output()
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (4, 3)
    assert len(run.entries) == STEPS
    assert not log.at("warning")
    assert [step.number for step in CacheReader(harness.store()).steps()] == list(range(1, STEPS + 3))


def test_two_tries_packing_at_once_lose_nothing_and_the_next_pack_replaces_both(tmp_path):
    """A zombie and its successor both loaded the same cache and both packed it, each under its own name."""
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail, killed=True)
    zombie, successor = harness.store(), harness.store()
    zombie.load()
    successor.load()
    first, second = zombie.pack(1), successor.pack(2)
    assert first != second
    assert sorted(objects(harness.root)) == sorted([first, second])

    failed_try(harness, calls, {"fail": True})  # attempt 1 of the harness again: replays all, packs both into one

    [last] = objects(harness.root)
    assert set(decode_pack((harness.root / last).read_bytes(), owner=IDENTITY.owner()).replaces) == {first, second}
    assert calls == {"fetch 1": 1, "fetch 2": 1, "fetch 3": 1, "notify": 2}


def test_a_pack_of_another_task_instance_is_never_replayed(tmp_path):
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail)
    pack = the_pack(harness.root)
    other = DurableHarness(base=str(tmp_path / "cache"), identity=task_identity("pack_dag", "other"))
    other.root.mkdir(parents=True)
    shutil.copy(pack, other.root / pack.name)

    result, run, log = other.run(build_agent(Counter(), {"fail": False}), PROMPT)

    assert result.output == expected_output()
    assert run.stats.replayed.total == 0
    assert any("another task instance" in line for line in log.at("warning"))


def test_what_failed_is_forgotten_also_when_it_was_packed(tmp_path):
    harness = harness_for(tmp_path)
    run, _ = harness.open()
    entries = [StepEntry(kind="tool", key=key * 64, step=1, attempt=1, label="t", payload={}) for key in "ab"]
    for entry in entries:
        run.writer.persist(entry, "a step")
    run.pack_for_next_try()
    store = harness.store()
    assert set(store.load().entries) == {entry.name for entry in entries}

    store.remove(entries[0].name)

    assert set(harness.store().load().entries) == {entries[1].name}
    [name] = objects(harness.root)
    assert is_pack_name(name)


# --- the read side, the catalog, the commands --------------------------------------------------------


def test_the_read_side_sees_a_packed_cache_as_the_same_steps(tmp_path):
    packed, single = harness_for(tmp_path / "packed"), harness_for(tmp_path / "single")
    failed_try(packed, Counter(), {"fail": True})
    failed_try(single, Counter(), {"fail": True}, killed=True)

    def rows(harness: DurableHarness) -> list[tuple[object, ...]]:
        return [(s.number, s.kind, s.name, s.call_id, s.attempt) for s in CacheReader(harness.store()).steps()]

    assert rows(packed) == rows(single) and len(rows(packed)) == STEPS
    assert CacheReader(packed.store()).read(2).content == CacheReader(single.store()).read(2).content

    catalog = {
        where: [
            (c.entries, c.model_steps, c.tool_steps)
            for c in list_caches(fsspec.filesystem("file"), base, f"file://{base}")
        ]
        for where, base in (
            ("packed", str(tmp_path / "packed" / "cache")),
            ("single", str(tmp_path / "single" / "cache")),
        )
    }
    assert catalog["packed"] == catalog["single"] == [(STEPS, 4, 3)]
    assert packed.store().count_entries() == STEPS


def stored_spans(pack: Path) -> dict[str, int]:
    """Entry name -> bytes of its stored form inside ``pack``, found in the pack's own text (not re-encoded)."""
    text, decoder = pack.read_text(), json.JSONDecoder()
    names = decode_pack(pack.read_bytes(), owner=IDENTITY.owner()).bodies
    spans = {}
    for name in names:
        start = text.index(f"{json.dumps(name)}:", text.index('"entries":{')) + len(json.dumps(name)) + 1
        _, end = decoder.raw_decode(text, start)
        spans[name] = len(text[start:end].encode())
    return spans


def test_each_packed_step_shows_its_own_stored_size(tmp_path):
    harness = harness_for(tmp_path)
    failed_try(harness, Counter(), {"fail": True})
    spans = stored_spans(the_pack(harness.root))

    steps = CacheReader(harness.store()).steps()

    assert {step.entry_name: step.size for step in steps} == spans
    model = next(step for step in steps if step.kind == "model")
    fetch = next(step for step in steps if step.kind == "tool")
    assert model.size != fetch.size, "a model answer and a tool result are not the same size"
    assert sum(step.size for step in steps) < the_pack(harness.root).stat().st_size  # the header is no step's


def test_a_step_keeps_its_size_when_it_is_packed(tmp_path):
    harness = harness_for(tmp_path)
    failed_try(harness, Counter(), {"fail": True}, killed=True)  # killed: its entries stay single
    single = {step.entry_name: step.size for step in CacheReader(harness.store()).steps()}
    store = harness.store()
    store.load()
    store.pack(attempt=1)

    assert is_pack_name(the_pack(harness.root).name)
    assert {step.entry_name: step.size for step in CacheReader(harness.store()).steps()} == single


def test_delete_from_step_n_of_a_packed_cache_forks_there(tmp_path):
    harness, calls, fail = harness_for(tmp_path), Counter[str](), {"fail": True}
    failed_try(harness, calls, fail)
    reader = CacheReader(harness.store())

    deleted = reader.delete_from(4)  # model 1, fetch 1, model 2 stay

    assert [step.number for step in deleted] == list(range(4, STEPS + 1))
    assert [step.number for step in CacheReader(harness.store()).steps()] == [1, 2, 3]
    result, run, _ = harness.run(build_agent(calls, fail), PROMPT)
    assert result.output == expected_output()
    assert (run.stats.replayed.model, run.stats.replayed.tool) == (2, 1)
    assert calls["fetch 2"] == 2 and calls["fetch 1"] == 1


def test_delete_all_of_a_packed_cache_counts_its_steps(tmp_path):
    harness = harness_for(tmp_path)
    failed_try(harness, Counter(), {"fail": True})

    assert CacheReader(harness.store()).delete_all() == STEPS
    assert not harness.root.exists()


def test_packing_never_drops_what_it_could_not_read(tmp_path):
    """A try that cannot verify some packed entries (sealed with a key it does not have: ``durable_encrypt``
    was turned off between tries) carries them into its own pack as they are."""
    from cryptography.fernet import Fernet
    from tests.helpers.durable import local_store

    cipher = Fernet(Fernet.generate_key())
    sealed = local_store(tmp_path / "cache", IDENTITY, cipher=cipher)
    entries = [StepEntry(kind="tool", key=key * 64, step=1, attempt=1, label="t", payload={}) for key in "ab"]
    for entry in entries:
        sealed.put(entry)
    sealed.pack(1)
    plain = local_store(tmp_path / "cache", IDENTITY)
    assert plain.load().entries == {}
    new = StepEntry(kind="model", key="c" * 64, step=1, attempt=2, label="m", payload={})
    plain.put(new)

    plain.pack(2)

    [name] = objects(harness_for(tmp_path).root)
    assert parse_pack_name(name).entries == 3  # type: ignore[union-attr]
    assert set(local_store(tmp_path / "cache", IDENTITY, cipher=cipher).load().entries) == {
        entry.name for entry in entries
    }, "the sealed entries are all still there (and the plain one is not readable with the key: it is plain)"
