"""The read side of a cache: steps in recorded order, one step decoded, delete all, delete from step N."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cache_fixture import FIXTURE, IDENTITY, fixture_agent
from tests.helpers.durable import RecordingLog, local_store

from airflow_pydantic_ai.durable import Attempt, DurableCapability, StepStore, TaskIdentity
from airflow_pydantic_ai.durable.storage.reader import CacheReader


def store_for(base: Path, identity: TaskIdentity = IDENTITY, log: RecordingLog | None = None) -> StepStore:
    warn = log.warning if log is not None else (lambda message: None)
    return local_store(base, identity, warn=warn)


def run_attempt(base: Path, attempt: int, calls: list[str]) -> tuple[Any, RecordingLog]:
    log = RecordingLog()
    run = Attempt.open(store_for(base, log=log), attempt=attempt, log=log)
    try:
        result = fixture_agent(calls).run_sync("triage", capabilities=[DurableCapability(run)])
    finally:
        run.log_summary()
    return result, log


def test_steps_of_a_cache_written_by_0_1_0_in_recorded_order(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "fixture_dag", tmp_path / "fixture_dag")

    steps = CacheReader(store_for(tmp_path)).steps()

    # Entries of 0.1.0 carry no role, call id or time: an output function shows as a tool call.
    assert [step.kind for step in steps] == ["model", "tool", "tool", "model", "tool", "model", "tool"]
    assert [step.number for step in steps] == list(range(1, 8))
    assert {steps[1].name, steps[2].name} == {"fetch_ticket", "flaky_lookup"}
    assert [steps[4].name, steps[6].name] == ["flaky_lookup", "file_triage"]
    assert all(step.name == "test:test" for step in steps if step.kind == "model")
    assert all(step.attempt == 1 and step.recorded_at is not None and step.size > 0 for step in steps)


def test_steps_show_kind_name_call_id_and_attempt_of_new_entries(tmp_path: Path) -> None:
    run_attempt(tmp_path, 1, ["flaky_lookup"])  # flaky_lookup has failed once already: no ModelRetry

    steps = CacheReader(store_for(tmp_path)).steps()

    # The two tools of the first answer run concurrently: they are numbered in the order they finished.
    assert [step.kind for step in steps] == ["model", "tool", "tool", "model", "output"]
    assert [steps[0].name, steps[3].name, steps[4].name] == ["test:test", "test:test", "file_triage"]
    assert {(steps[1].name, steps[1].call_id), (steps[2].name, steps[2].call_id)} == {
        ("fetch_ticket", "pyd_ai_tool_call_id__fetch_ticket"),
        ("flaky_lookup", "pyd_ai_tool_call_id__flaky_lookup"),
    }
    assert steps[4].call_id == "pyd_ai_tool_call_id__final_result"
    assert steps[0].call_id is None
    times = [step.recorded_at for step in steps]
    assert all(time is not None for time in times)
    assert times == sorted(times)  # type: ignore[type-var]
    assert steps[0].as_row().keys() == {
        "step",
        "kind",
        "name",
        "call_id",
        "attempt",
        "recorded_at",
        "bytes",
        "input_tokens",
        "output_tokens",
        "cost_usd",
    }
    # A model step shows the tokens its request reported (TestModel has no price: no cost); a tool step none.
    assert type(steps[0].as_row()["input_tokens"]) is int and steps[0].as_row()["cost_usd"] == ""
    assert steps[1].as_row()["input_tokens"] == ""


def test_read_decodes_a_model_answer_and_a_tool_result(tmp_path: Path) -> None:
    run_attempt(tmp_path, 1, ["flaky_lookup"])
    reader = CacheReader(store_for(tmp_path))

    model = reader.read(1)
    tool = next(reader.read(n) for n in (2, 3) if reader.read(n).info.name == "fetch_ticket")

    assert model.info.kind == "model"
    assert [part["part_kind"] for part in model.content["parts"]] == ["tool-call", "tool-call"]
    assert tool.content["outcome"] == "return"
    assert "Printer on fire" in tool.render()
    with pytest.raises(KeyError, match="no step 9"):
        reader.read(9)


def test_render_truncates_and_masks() -> None:
    from airflow_pydantic_ai.durable.storage.reader import StepDetail, StepInfo

    info = StepInfo(1, "tool", "t", "c", 1, None, 10, "tool-x.json")
    detail = StepDetail(info, {"outcome": "return", "value": "hunter2 " + "x" * 10_000})

    text = detail.render(limit=100, redact=lambda s: s.replace("hunter2", "***"))

    assert "hunter2" not in text and "***" in text
    assert "more characters; show the whole step with --full" in text
    assert len(detail.render(limit=None)) > 10_000


def test_delete_from_step_n_makes_the_next_try_replay_steps_before_it(tmp_path: Path) -> None:
    run_attempt(tmp_path, 1, ["flaky_lookup"])
    reader = CacheReader(store_for(tmp_path))
    assert len(reader.steps()) == 5

    deleted = reader.delete_from(4)  # the second model answer and the output function call

    assert [step.number for step in deleted] == [4, 5]
    assert len(reader.steps()) == 3
    calls = ["flaky_lookup"]
    _, log = run_attempt(tmp_path, 2, calls)
    assert log.summary() == (
        "Durable: replayed 3 cached steps (1 model, 2 tool), executed 2 new steps (1 model, 1 tool)"
    )
    assert calls == ["flaky_lookup", "file_triage"]  # only the output function ran again


def test_delete_all_leaves_neighbours_that_share_a_string_prefix(tmp_path: Path) -> None:
    run_attempt(tmp_path, 1, ["flaky_lookup"])
    neighbour = TaskIdentity(IDENTITY.dag_id, IDENTITY.run_id, IDENTITY.task_id + "2", -1)
    neighbour_store = store_for(tmp_path, neighbour)
    neighbour_store.write("model-" + "0" * 64 + ".json", b"{}")
    sibling_file = Path(store_for(tmp_path).root + "x")
    sibling_file.write_text("keep me")
    reader = CacheReader(store_for(tmp_path))

    assert reader.delete_all() == 5

    assert not reader.exists()
    assert reader.steps() == []
    assert neighbour_store.list_entries().keys() == {"model-" + "0" * 64 + ".json"}
    assert sibling_file.read_text() == "keep me"


def test_damaged_and_encrypted_entries_are_listed_last_and_deleted(tmp_path: Path) -> None:
    run_attempt(tmp_path, 1, ["flaky_lookup"])
    store = store_for(tmp_path)
    root = Path(store.root)
    # A tool call's entry (an output function's is stored as a tool- entry too): which one sorts first by key
    # depends on the key scheme, so pick by role.
    first_tool = next(
        path for path in sorted(root.glob("tool-*.json")) if json.loads(path.read_bytes()).get("role") != "output"
    )
    first_tool.write_bytes(first_tool.read_bytes()[:40])  # torn
    sealed = root / ("model-" + "1" * 64 + ".json")
    sealed.write_text(json.dumps({"format": "airflow-pydantic-ai/step", "version": 1, "encrypted": "gAAAA"}))
    reader = CacheReader(store)

    steps = reader.steps()

    assert sorted(step.kind for step in steps[-2:]) == ["damaged", "encrypted"]
    assert [step.kind for step in steps[:-2]] == ["model", "tool", "model", "output"]
    damaged = next(step for step in steps if step.kind == "damaged")
    assert "not valid JSON" in damaged.problem
    assert "problem" in reader.read(damaged.number).content
    reader.delete_from(len(steps) - 1)
    assert {step.kind for step in reader.steps()} <= {"model", "tool", "output"}
    assert reader.delete_all() == 4
    assert not root.exists()


@dataclasses.dataclass
class Ticket:
    id: int
    tags: tuple[str, ...]


def test_a_step_shows_its_recorded_value_plain_and_as_stored_on_request(tmp_path: Path) -> None:
    import datetime as dt

    from airflow_pydantic_ai.cache_tools.access import CacheAccess
    from airflow_pydantic_ai.durable.encoding.allowed_types import AllowedTypes
    from airflow_pydantic_ai.durable.encoding.codec import encode_value
    from airflow_pydantic_ai.durable.storage.entry import StepEntry

    value = {"ticket": Ticket(42, ("auth", "login")), "when": dt.date(2026, 11, 25), "raw": b"\x00", 1: [1.5, None]}
    identity = TaskIdentity("d", "r", "t", -1)
    store = local_store(tmp_path, identity)
    here = AllowedTypes(modules=frozenset({__name__}))  # a tool of this module returned it
    payload = {"outcome": "return", "value": encode_value(value, here)}
    store.put(StepEntry(kind="tool", key="k", step=1, attempt=1, label="lookup", payload=payload, call_id="c1"))
    access = CacheAccess(identity=identity, store=store, reader=CacheReader(store))

    _, plain = access.render_step(1)
    _, raw = access.render_step(1, raw=True)

    shown = json.loads(plain)["value"]
    assert shown["ticket"] == {"class": shown["ticket"]["class"], "id": 42, "tags": ["auth", "login"]}
    assert shown["ticket"]["class"].endswith("Ticket")
    assert shown["when"] == "2026-11-25" and shown["1"] == [1.5, None]
    assert shown["raw"]["type"] == "bytes", "no plain form: the stored node"
    assert '"type": "json"' not in plain and '"type": "json"' in raw
    assert json.loads(raw)["value"] == payload["value"]
