"""A damaged cache between two tries: every damaged entry is ignored with a warning naming it, its step
runs live, and the run succeeds with the right answer.

These tests run two attempts of a durable agent on a real local store (no Airflow run) and damage
one entry between them. The first attempt dies where it fails (``killed=True``: its entries stay single,
as a SIGKILL leaves them); tests/unit/test_packs.py has the rows for a damaged pack (what a try that
ends writes). tests/dags/test_damaged_cache_airflow.py does the same through a real ``dag.test()``
retry, with a different kind of damage on each of several entries at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from tests.helpers.damage import (
    DAMAGES,
    FETCHES,
    PROMPT,
    build_agent,
    entries_on_disk,
    expected_output,
    fetch_result,
    reencoded,
    unrebuildable_payload,
)
from tests.helpers.durable import DurableHarness, task_identity

IDENTITY = task_identity("damage_dag", "agent")


def damage_harness(tmp_path: Path) -> DurableHarness:
    return DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)


def killed_first_try(
    tmp_path: Path, fetches: int = FETCHES
) -> tuple[DurableHarness, Counter[str], Callable[[], Agent[Any, str]]]:
    """Try 1 of the damage agent: it records every step it gets to, then fails in notify and is killed.
    Returns the harness, the tools' call counts, and how to build the agent again for the next try."""
    harness = damage_harness(tmp_path)
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail, fetches=fetches), PROMPT, killed=True)
    return harness, calls, lambda: build_agent(calls, fail, fetches=fetches)


@pytest.mark.parametrize("target", ["tool", "model"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_entry_is_ignored_and_its_step_runs_live(tmp_path, damage, target):
    harness, calls, agent = killed_first_try(tmp_path)
    root = harness.root
    entries = entries_on_disk(root)
    assert len(entries) == (FETCHES + 1) + FETCHES  # 4 model answers, 3 fetches (notify failed)
    if target == "tool":
        victim, sibling = entries[("tool", 2)], entries[("tool", 3)]
    else:
        victim = entries[("model", 2)]
        sibling = entries[("model", 3)]
    DAMAGES[damage](victim, sibling)

    result, run, log = harness.run(agent(), PROMPT)

    assert result.output == expected_output()
    named = [warning for warning in log.at("warning") if victim.name in warning]
    assert named, f"no warning names {victim.name}: {log.lines}"
    assert any("live" in warning for warning in named), named
    replayed, executed = run.stats.replayed, run.stats.executed
    if target == "tool":
        # fetch 2 ran again; the model answers and the other fetches replayed.
        assert calls == {"fetch 1": 1, "fetch 2": 2, "fetch 3": 1, "notify": 2}
        assert (replayed.model, replayed.tool, executed.model, executed.tool) == (4, 2, 1, 2)
    else:
        # Model step 2 ran live; it gave the same answer, so every tool call replayed.
        assert calls == {"fetch 1": 1, "fetch 2": 1, "fetch 3": 1, "notify": 2}
        assert (replayed.model, replayed.tool, executed.model, executed.tool) == (3, 3, 2, 1)
    if damage == "directory-in-place":
        # The live step cannot be stored over a directory: said once, and the run goes on.
        [error] = log.at("error")
        assert "could not store" in error and victim.name in error
    else:
        assert not log.at("error")


def test_unrebuildable_model_entry_does_not_claim_the_run_diverged(tmp_path):
    harness, _calls, agent = killed_first_try(tmp_path)
    victim = entries_on_disk(harness.root)[("model", 2)]
    victim.write_bytes(unrebuildable_payload(victim))
    _, run, log = harness.run(agent(), PROMPT)
    assert run.stats.replayed.tool == FETCHES, "the later steps did replay"
    assert not [warning for warning in log.at("warning") if "differs from what attempt" in warning], log.at("warning")


@pytest.mark.parametrize("storage_errors", ["warn", "fail"])
@pytest.mark.parametrize("damage", ["deeply-nested-json", "step-is-infinity"])
def test_one_pathological_entry_does_not_cost_the_whole_cache(tmp_path, damage, storage_errors):
    harness, calls, agent = killed_first_try(tmp_path)
    victim = entries_on_disk(harness.root)[("tool", 2)]
    if damage == "deeply-nested-json":
        victim.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    else:
        victim.write_bytes(reencoded(victim, step=float("inf")))
    result, _run, log = harness.run(agent(), PROMPT, run_options={"storage_errors": storage_errors})
    assert result.output == expected_output()
    assert any(victim.name in warning for warning in log.at("warning")), log.lines
    assert calls == {"fetch 1": 1, "fetch 2": 2, "fetch 3": 1, "notify": 2}, "only the damaged step ran again"


def test_key_mismatch_never_replays_the_other_steps_result(tmp_path):
    """An entry copied under another step's name: the step it was copied onto never gets its result."""
    harness, calls, agent = killed_first_try(tmp_path)
    entries = entries_on_disk(harness.root)
    # Every tool entry now holds fetch 3's result, each under its own (wrong) name.
    source = entries[("tool", 3)].read_bytes()
    for step in (1, 2):
        entries[("tool", step)].write_bytes(source)
    result, _run, log = harness.run(agent(), PROMPT)
    assert result.output == expected_output()
    assert fetch_result(3) not in result.output.split(" / ")[:2]
    assert calls["fetch 1"] == 2 and calls["fetch 2"] == 2 and calls["fetch 3"] == 1
    assert sum("does not match its name" in warning for warning in log.at("warning")) == 2


def test_every_damage_at_once_in_one_cache(tmp_path):
    """Many damaged entries and junk files in one prefix: all skipped, one warning each, nothing else lost."""
    fetches = len(DAMAGES) + 1
    harness, calls, agent = killed_first_try(tmp_path, fetches)
    root = harness.root
    entries = entries_on_disk(root)
    victims = {}
    for step, (damage, apply) in enumerate(sorted(DAMAGES.items()), start=1):
        victim = entries[("tool", step)]
        apply(victim, entries[("tool", fetches)])
        victims[damage] = victim.name
    (root / ".leftover.tmp").write_bytes(b'{"format"')  # a crashed write's temporary file
    (root / "README.txt").write_text("someone left notes here")
    (root / "model-notes.json.bak").write_bytes(b"{}")

    result, run, log = harness.run(agent(), PROMPT)

    assert result.output == expected_output(fetches)
    for damage, name in victims.items():
        assert sum(name in warning for warning in log.at("warning")) >= 1, damage
    assert calls[f"fetch {fetches}"] == 1, "the undamaged fetch replayed"
    assert all(calls[f"fetch {step}"] == 2 for step in range(1, fetches)), calls
    assert run.stats.replayed.tool == 1 and run.stats.replayed.model == fetches + 1
    assert not any(".leftover.tmp" in line or "README" in line or ".bak" in line for _, line in log.lines)
