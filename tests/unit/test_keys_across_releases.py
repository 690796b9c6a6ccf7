"""Issue 34 items 2 and 3: what was recorded keeps replaying across pydantic-ai releases, and a miss says which
release recorded the step.

- every entry records ``recorded_with`` (the pydantic-ai release and the key scheme);
- a cache keyed with ``model-request/v1`` under another release (its field set, ``keys/releases.py``), whose
  entries do not name it (written before 0.4.0), replays: the first model step finds the release;
- a step that misses where a step recorded under another pydantic-ai release stood says so: both releases, and
  that pydantic-ai changed the request.

The same, with real releases installed side by side: ``make cross-release`` (scripts/cross_release.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import DurableHarness, counting_agent

from airflow_pydantic_ai.durable.keys.releases import as_release, installed_release, nearest_known
from airflow_pydantic_ai.durable.keys.schemes import LEGACY, WIRE, KeyScheme
from airflow_pydantic_ai.durable.storage.entry import StepEntry

_PART_CLASSES = {"tool-call": "ToolCallPart", "text": "TextPart"}
OTHER = "2.68.0" if installed_release() == "2.62.0" else "2.62.0"
"""A supported release that is not the one installed here."""


def _agent(calls: dict[str, int], description: str = "Look the weather up.") -> Agent[None, str]:
    agent = counting_agent(calls)
    agent._function_toolset.tools["lookup"].description = description  # type: ignore[attr-defined]
    return agent


def _entries(harness: DurableHarness) -> list:
    return [entry for entry in harness.store().load().entries.values() if entry.is_step]


def test_every_entry_records_the_release_and_the_key_scheme(tmp_path: Path) -> None:
    harness = DurableHarness(str(tmp_path))
    harness.run(counting_agent({}), "weather")

    entries = _entries(harness)
    assert entries
    assert {(entry.kind, str(entry.recorded_with)) for entry in entries} == {
        (kind, str({"pydantic_ai": installed_release(), "keys": WIRE})) for kind in ("model", "tool")
    }


@pytest.mark.parametrize("release", ["2.62", "2.68", "2.78"])
def test_a_cache_keyed_by_another_release_before_entries_named_it_replays(tmp_path: Path, release: str) -> None:
    harness = DurableHarness(str(tmp_path))
    run, log = harness.open()
    # As release 0.3.0 recorded it under pydantic-ai `release`: every field of that release digested, no
    # recorded_with in the entries.
    run.first.keys.fingerprinter.use(KeyScheme(LEGACY, release))
    run.writer.recorded_with = None
    persist = run.writer.persist

    def as_recorded_by(entry: StepEntry, what: str, **options: Any) -> bool:
        """The recorded response as `release` serialised it: with its fields (how its release is recognised)."""
        if entry.kind == "model":
            response = as_release("ModelResponse", entry.payload["response"], release)
            response["parts"] = [
                as_release(_PART_CLASSES.get(part["part_kind"], ""), part, release) for part in response["parts"]
            ]
            entry = dataclasses.replace(entry, payload={**entry.payload, "response": response})
        return persist(entry, what, **options)

    run.writer.persist = as_recorded_by  # type: ignore[method-assign]
    calls: dict[str, int] = {}
    from airflow_pydantic_ai.durable import run_agent

    with run.ending():
        run_agent(run, counting_agent(calls), "weather")
    assert all(entry.recorded_with is None for entry in _entries(harness))
    recorded = dict(calls)

    calls.clear()
    _, replay, log = harness.run(counting_agent(calls), "weather")

    assert calls == {}, log.lines  # nothing ran again
    assert replay.stats.replayed.model >= 2
    assert not log.at("warning"), log.lines
    assert recorded  # the first try did call the tools
    # What the replay records goes on in the scheme of the cache, and says so.
    assert replay.first.keys.recorded_with() == {"pydantic_ai": installed_release(), "keys": LEGACY}


def test_a_miss_under_another_release_names_both_releases(tmp_path: Path) -> None:
    harness = DurableHarness(str(tmp_path))
    run, _ = harness.open()
    run.writer.recorded_with = lambda: {"pydantic_ai": OTHER, "keys": WIRE}
    from airflow_pydantic_ai.durable import run_agent

    with run.ending():
        run_agent(run, _agent({}), "weather")

    _, _, log = harness.run(_agent({}, description="Look the weather up, in Celsius."), "weather")

    [warning] = log.at("warning")
    assert f"recorded as step 1 under pydantic-ai {OTHER}" in warning, warning
    assert f"this worker runs pydantic-ai {installed_release()}, which changed the request it sends" in warning
    assert "(changed: tool definitions (~lookup))" in warning


def test_a_miss_under_the_same_release_blames_the_request_as_before(tmp_path: Path) -> None:
    harness = DurableHarness(str(tmp_path))
    harness.run(_agent({}), "weather")
    _, _, log = harness.run(_agent({}, description="Look the weather up, in Celsius."), "weather")

    [warning] = log.at("warning")
    assert "; changed: tool definitions (~lookup). It runs live" in warning
    assert "pydantic-ai" not in warning


def test_a_legacy_key_is_computed_with_the_field_set_of_the_recording_release() -> None:
    data = {"name": "t", "ui_visibility": None, "durable": None}
    as_2_68 = as_release("ToolDefinition", data, "2.68", installed="2.78.0")
    assert as_2_68 == {"name": "t"}
    assert as_release("ToolDefinition", {"name": "t"}, "2.78", installed="2.68.0") == data
    assert as_release("ModelResponse", {"parts": []}, "2.68", installed="2.62.0") == {
        "parts": [],
        "canonical_system": None,
        "model_id": None,
    }
    # 2.78 marks an output tool's call; 2.68 did not.
    assert as_release("ToolCallPart", {"tool_kind": "output"}, "2.68", installed="2.78.0") == {"tool_kind": None}
    assert nearest_known("2.70.1") == "2.68"
    assert nearest_known("2.80.0") == "2.78"
    assert TestModel  # the releases are told apart by their field sets, not by the model


def test_cache_verify_says_under_which_release_the_recording_was_made(tmp_path: Path) -> None:
    """``cache verify`` run where the upgrade is installed answers "what would run live after this upgrade":
    its verdict names the release the recording was made under (the verdict's wording: testing/verify.py)."""
    from airflow_pydantic_ai.durable import run_agent
    from airflow_pydantic_ai.testing.verify import _releases

    harness = DurableHarness(str(tmp_path))
    run, _ = harness.open()
    with run.ending():
        run_agent(run, counting_agent({}), "weather")
    same, _ = harness.open()
    assert _releases(same) == ""

    older = DurableHarness(str(tmp_path / "older"))
    run, _ = older.open()
    run.writer.recorded_with = lambda: {"pydantic_ai": OTHER, "keys": WIRE}
    with run.ending():
        run_agent(run, counting_agent({}), "weather")
    upgraded, _ = older.open()
    assert _releases(upgraded) == f" (recorded under pydantic-ai {OTHER}; installed here: {installed_release()})"
