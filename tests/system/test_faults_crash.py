"""Crash at any point: SIGKILL a durable run, resume it, and check what the cache gave back.

A child process (forked by ``python -m tests.helpers.crash_worker serve``) runs a durable agent of
8 sequential tool steps (17 steps: 9 model answers, 8 tool calls) on a ``file://`` store. The parent
kills it with SIGKILL either after a seeded pseudo-random delay, or exactly at a chosen point: in a
tool before or after its side effect, after a model answer, half-way through writing an entry's
temporary file, between the temporary file and the rename, just after the rename, or half-way
through an in-place write (a filesystem without atomic rename, which leaves a truncated entry).
Then attempt 2 runs to completion in a fresh child, and we check:

- it succeeds, with the same output as an uninterrupted reference run;
- every entry that was completely written before the kill is replayed, and nothing else is
  (no wrong replays: leftover ``.tmp`` files are ignored, a truncated entry is skipped with a warning
  naming it);
- at most the one step in flight is lost (its side effect happens again).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.crash_worker import KILL_KINDS, ForkServer, cache_root, expected_output

from airflow_pydantic_ai.durable.storage.entry import CorruptEntry, StepEntry

SEED = 20261122
STEPS = 8
TOTAL_STEPS = 2 * STEPS + 1  # 9 model answers, 8 tool calls
DELAY_TRIALS = 12
EXACT_TRIALS = 35  # 5 of each of the 7 exact kinds
PROMPT = "run the crash drill"
REPO_ROOT = Path(__file__).resolve().parents[2]

# How many completed steps an exact kill point loses at most (its side effect will happen again).
LOST_AT = {
    "tool-start": 0,
    "tool-done": 1,
    "model-done": 1,
    "put-partial": 1,
    "put-before-rename": 1,
    "put-after-rename": 0,
    "torn-direct": 1,
}
EVENTS = {"tool-start": STEPS, "tool-done": STEPS, "model-done": STEPS + 1}


@dataclass
class CacheState:
    complete: set[str]
    corrupt: dict[str, str]
    temporary: list[str]


def inspect_cache(base: Path) -> CacheState:
    root = cache_root(base)
    state = CacheState(complete=set(), corrupt={}, temporary=[])
    if not root.exists():
        return state
    for path in root.iterdir():
        if path.name.startswith(".attempt-"):
            continue  # a finished try's record (summary line, for the UI view), not a step nor a temporary file
        if path.name.startswith("."):
            state.temporary.append(path.name)
            continue
        try:
            StepEntry.from_bytes(path.read_bytes(), name=path.name)
        except CorruptEntry as error:
            state.corrupt[path.name] = str(error)
        else:
            state.complete.add(path.name)
    return state


def marks(marker: Path, attempt: int) -> Counter[str]:
    counted: Counter[str] = Counter()
    if marker.exists():
        for line in marker.read_text().splitlines():
            kind, _step, line_attempt = line.split()
            if int(line_attempt) == attempt:
                counted[kind] += 1
    return counted


def job(tmp: Path, name: str, attempt: int, **extra: Any) -> dict[str, Any]:
    return {
        "base": str(tmp / "cache"),
        "attempt": attempt,
        "prompt": PROMPT,
        "steps": STEPS,
        "marker": str(tmp / "marker"),
        "result": str(tmp / f"{name}.json"),
        "log": str(tmp / f"{name}.log"),
        "tool_sleep": 0.005,
        **extra,
    }


def plan_trials(reference_seconds: float) -> list[tuple[str, float | int]]:
    rng = random.Random(SEED)
    trials: list[tuple[str, float | int]] = []
    for _ in range(DELAY_TRIALS):
        trials.append(("delay", round(rng.uniform(0.0, 1.15 * reference_seconds), 4)))
    for index in range(EXACT_TRIALS):
        kind = KILL_KINDS[index % len(KILL_KINDS)]
        trials.append((kind, rng.randint(1, EVENTS.get(kind, TOTAL_STEPS))))
    rng.shuffle(trials)
    return trials


@dataclass
class Trial:
    kind: str
    point: float | int
    killed: bool
    lost: int
    wrong: int
    torn_skipped: int
    temporary_left: int
    replayed: int


def run_trial(server: ForkServer, tmp: Path, kind: str, point: float | int, reference: str) -> Trial:
    tmp.mkdir()
    ready = tmp / "ready"
    first = job(tmp, "attempt1", 1)
    if kind != "delay":
        first.update(kill_at=f"{kind}:{point}", ready=str(ready))
    pid = server.spawn(first)
    if kind == "delay":
        time.sleep(float(point))
    else:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert time.monotonic() < deadline, f"kill point {kind}:{point} was never reached"
            time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)
    code = server.wait(pid)
    killed = code == -signal.SIGKILL
    assert killed or (kind == "delay" and code == 0), f"{kind}:{point}: attempt 1 exited with {code}"

    after_kill = inspect_cache(tmp / "cache")
    completed = marks(tmp / "marker", 1)
    if kind in ("put-partial", "put-before-rename"):
        assert after_kill.temporary, "the kill landed between the temporary file and the rename"
        assert len(after_kill.complete) == int(point) - 1
    if kind == "put-after-rename":
        assert len(after_kill.complete) == int(point)
    if kind == "torn-direct":
        assert len(after_kill.corrupt) == 1, after_kill
        assert len(after_kill.complete) == int(point) - 1

    second = server.run(job(tmp, "attempt2", 2, finish=True))
    replayed = set(second["replayed_entries"])
    wrong = replayed - after_kill.complete
    not_replayed = after_kill.complete - replayed
    lost = (completed["model"] - second["replayed"]["model"]) + (completed["tool"] - second["replayed"]["tool"])

    context = f"{kind}:{point} (attempt 1 exit {code}); attempt 2: {second['summary']}; warnings {second['warnings']}"
    assert second.get("output") == reference, context
    assert not wrong, f"replayed entries that were not completely written: {wrong}; {context}"
    assert not not_replayed, f"complete entries that were not replayed: {not_replayed}; {context}"
    assert len(replayed) == second["replayed"]["model"] + second["replayed"]["tool"], context
    assert 0 <= lost <= 1, f"{lost} completed steps were lost; {context}"
    if kind != "delay":
        assert lost == LOST_AT[kind], context
    # A truncated entry is skipped with a warning that names it; leftover temporary files are silent.
    for name in after_kill.corrupt:
        assert any(name in warning and "will run live" in warning for warning in second["warnings"]), context
    if not after_kill.corrupt:
        assert not second["warnings"], context
    assert not second["errors"], context
    # Side effects: each tool ran once, plus once more for a lost tool step.
    tool_runs = completed["tool"] + marks(tmp / "marker", 2)["tool"]
    assert tool_runs == STEPS + (completed["tool"] - second["replayed"]["tool"]), context
    # finish() removed everything, leftover temporary files included.
    assert not cache_root(tmp / "cache").exists()
    return Trial(
        kind=kind,
        point=point,
        killed=killed,
        lost=lost,
        wrong=len(wrong),
        torn_skipped=len(after_kill.corrupt),
        temporary_left=len(after_kill.temporary),
        replayed=len(replayed),
    )


def format_table(trials: list[Trial]) -> str:
    by_kind: dict[str, list[Trial]] = defaultdict(list)
    for trial in trials:
        by_kind[trial.kind].append(trial)
    lines = [
        f"{'kill point':<18} {'trials':>6} {'killed':>6} {'done1st':>7} {'replayed':>8} {'lost':>4} "
        f"{'wrong':>5} {'torn':>4} {'tmp':>4}"
    ]
    for kind in ("delay", *KILL_KINDS):
        rows = by_kind.get(kind, [])
        lines.append(
            f"{kind:<18} {len(rows):>6} {sum(t.killed for t in rows):>6} {sum(not t.killed for t in rows):>7} "
            f"{sum(t.replayed for t in rows):>8} {sum(t.lost for t in rows):>4} {sum(t.wrong for t in rows):>5} "
            f"{sum(t.torn_skipped for t in rows):>4} {sum(t.temporary_left for t in rows):>4}"
        )
    lines.append(
        f"{'total':<18} {len(trials):>6} {sum(t.killed for t in trials):>6} "
        f"{sum(not t.killed for t in trials):>7} {sum(t.replayed for t in trials):>8} "
        f"{sum(t.lost for t in trials):>4} {sum(t.wrong for t in trials):>5} "
        f"{sum(t.torn_skipped for t in trials):>4} {sum(t.temporary_left for t in trials):>4}"
    )
    return "\n".join(lines)


def test_sigkill_at_any_point_then_resume(fork_server, tmp_path):
    started = time.monotonic()
    reference_job = job(tmp_path, "reference", 1)
    reference_job["base"] = str(tmp_path / "reference-cache")
    spawned = time.monotonic()
    reference = fork_server.run(reference_job)
    reference_seconds = time.monotonic() - spawned
    assert reference["output"] == expected_output(PROMPT, STEPS)
    assert reference["executed"] == {"model": STEPS + 1, "tool": STEPS}

    trials = [
        run_trial(fork_server, tmp_path / f"trial-{index:02d}", kind, point, reference["output"])
        for index, (kind, point) in enumerate(plan_trials(reference_seconds))
    ]
    table = format_table(trials)
    print(
        f"\nSIGKILL trials (seed {SEED}, reference run {reference_seconds:.3f} s, {time.monotonic() - started:.1f} s)"
    )
    print(table)
    assert len(trials) >= 30
    assert sum(t.wrong for t in trials) == 0
    assert {t.kind for t in trials if t.killed} == {"delay", *KILL_KINDS}
    assert sum(t.killed for t in trials if t.kind == "delay") >= DELAY_TRIALS // 2, "most delays land mid-run"


def test_sigkill_of_a_fresh_python_process_between_write_and_rename(tmp_path):
    """The same drill without the fork server: ``python -m tests.helpers.crash_worker run`` twice."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    ready = tmp_path / "ready"
    first = job(tmp_path, "attempt1", 1, kill_at="put-before-rename:6", ready=str(ready))
    command = [sys.executable, "-m", "tests.helpers.crash_worker", "run"]
    with open(tmp_path / "attempt1.log", "w") as log:
        child = subprocess.Popen([*command, json.dumps(first)], cwd=REPO_ROOT, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 30
            while not ready.exists():
                assert child.poll() is None, (tmp_path / "attempt1.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.001)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    state = inspect_cache(tmp_path / "cache")
    assert len(state.complete) == 5 and len(state.temporary) == 1 and not state.corrupt

    second = job(tmp_path, "attempt2", 2)
    done = subprocess.run(
        [*command, json.dumps(second)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    )
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["output"] == expected_output(PROMPT, STEPS)
    assert set(outcome["replayed_entries"]) == state.complete
    assert outcome["summary"] == (
        "Durable: replayed 5 cached steps (3 model, 2 tool), executed 12 new steps (6 model, 6 tool)"
    )
    assert not outcome["warnings"]
    # The temporary file of the killed write is still there, and still ignored.
    assert len(inspect_cache(tmp_path / "cache").temporary) == 1


# --- the success window ---------------------------------------------------------------------------
# After the last step, the operator records the output (a ``result`` entry), pushes it to XCom, and
# has the cache deleted once Airflow has stored the task's success. Here the deletion is cut short
# at every point as if it ran before the success was stored (on Airflow 3.3 a success callback also
# runs when the success report failed and the supervisor re-sends it later): the retry must return
# the recorded output without a model or tool call, and finish the deletion.
ENTRIES = TOTAL_STEPS + 1  # 17 steps and the result entry
SUCCESS_WINDOW_POINTS = ["output-recorded:1", *(f"delete:{count}" for count in range(1, ENTRIES))]


def test_sigkill_in_the_success_window_then_retry(fork_server, tmp_path):
    started = time.monotonic()
    reference = expected_output(PROMPT, STEPS)
    rows = []
    for index, point in enumerate(SUCCESS_WINDOW_POINTS):
        tmp = tmp_path / f"trial-{index:02d}"
        tmp.mkdir()
        assert fork_server.kill_at(job(tmp, "attempt1", 1, finish=True, tool_sleep=0), point) == -signal.SIGKILL
        left = inspect_cache(tmp / "cache")
        deleted = int(point.partition(":")[2]) if point.startswith("delete") else 0
        assert len(left.complete) == ENTRIES - deleted, point
        assert "result-output.json" in left.complete, f"{point}: the result entry is deleted last"
        assert marks(tmp / "marker", 1) == {"model": STEPS + 1, "tool": STEPS}

        second = fork_server.run(job(tmp, "attempt2", 2, finish=True, tool_sleep=0))
        context = f"{point}: {second['summary']}; warnings {second['warnings']}"
        assert second["output"] == reference, context
        assert second["returned_recorded_output"], context
        assert marks(tmp / "marker", 2) == {}, f"the retry called the model or a tool again; {context}"
        assert second["executed"] == {"model": 0, "tool": 0}, context
        assert not second["warnings"] and not second["errors"], context
        assert not cache_root(tmp / "cache").exists(), f"the retry finished the deletion; {context}"
        rows.append((point, ENTRIES - deleted))
    print(f"\nsuccess-window SIGKILL trials: {len(rows)} in {time.monotonic() - started:.1f} s; 0 steps run again")
    assert len(rows) == len(SUCCESS_WINDOW_POINTS) == 18


def test_steps_are_deleted_newest_first(fork_server, tmp_path):
    """Cut after 9 of 18 deletions: what is left is the result and the oldest steps of the chain."""
    assert fork_server.kill_at(job(tmp_path, "attempt1", 1, finish=True), "delete:9") == -signal.SIGKILL
    root = cache_root(tmp_path / "cache")
    entries = [StepEntry.from_bytes(path.read_bytes(), name=path.name) for path in root.glob("*.json")]
    steps = sorted(entry.step for entry in entries if entry.kind == "model")
    assert [entry.kind for entry in entries].count("result") == 1
    assert steps == list(range(1, len(steps) + 1)), f"the oldest model steps remain, got {steps}"
    assert len(entries) == ENTRIES - 9


# --- packing ----------------------------------------------------------------------------------------
# A try that fails packs the entries it saw into one object, then removes the single entries it packed.
# Attempt 1 fails at tool step FAIL_AT (its earlier steps are recorded: FAIL_AT + 1 model answers and
# FAIL_AT tool calls) and is killed while it packs: half-way through the pack's temporary file, once the
# pack is in place, and after each of the single entries it removes. Attempt 2 must replay every entry
# attempt 1 finished (from the pack, the singles, or both), nothing else, and call nothing twice.
FAIL_AT = 4
PACKED = 2 * FAIL_AT + 1
PACK_POINTS = ["pack-partial:1", "pack-written:1", *(f"delete:{count}" for count in range(1, PACKED + 1))]


def packed_state(base: Path) -> CacheState:
    """The entries a cache holds, single or packed (each verified), torn objects, and temporary files."""
    from tests.helpers.durable import stored_entries

    root = cache_root(base)
    state = CacheState(complete=set(), corrupt={}, temporary=[])
    if not root.exists():
        return state
    state.temporary = [path.name for path in root.iterdir() if path.name.endswith(".tmp")]
    for pack in root.glob("*.pack"):
        try:
            stored_entries(pack.parent, pack.name)  # parses the pack
        except ValueError as error:
            state.corrupt[pack.name] = str(error)
    for name, data in stored_entries(root).items():
        try:
            StepEntry.from_bytes(data, name=name)
        except CorruptEntry as error:
            state.corrupt[name] = str(error)
        else:
            state.complete.add(name)
    return state


def test_sigkill_while_a_failed_try_packs_then_resume(fork_server, tmp_path):
    reference = expected_output(PROMPT, STEPS)
    rows = []
    for index, point in enumerate(PACK_POINTS):
        tmp = tmp_path / f"trial-{index:02d}"
        tmp.mkdir()
        first = job(tmp, "attempt1", 1, fail_at_step=FAIL_AT, ending=True, tool_sleep=0)
        assert fork_server.kill_at(first, point) == -signal.SIGKILL, point
        left = packed_state(tmp / "cache")
        assert len(left.complete) == PACKED and not left.corrupt, f"{point}: {left}"
        packs = sorted(path.name for path in cache_root(tmp / "cache").glob("*.pack"))
        singles = sorted(path.name for path in cache_root(tmp / "cache").glob("*.json"))
        if point == "pack-partial:1":
            assert not packs and len(singles) == PACKED and left.temporary, point
        else:
            deleted = int(point.partition(":")[2]) if point.startswith("delete") else 0
            assert len(packs) == 1 and len(singles) == PACKED - deleted, point
        done = marks(tmp / "marker", 1)
        assert done == {"model": FAIL_AT + 1, "tool": FAIL_AT}, point

        second = fork_server.run(job(tmp, "attempt2", 2, finish=True, ending=True, tool_sleep=0))
        replayed = set(second["replayed_entries"])
        context = f"{point}: {second['summary']}; warnings {second['warnings']}"
        assert second["output"] == reference, context
        assert replayed == left.complete, f"wrong or lost replays; {context}"
        assert second["replayed"] == {"model": FAIL_AT + 1, "tool": FAIL_AT}, context
        assert marks(tmp / "marker", 2)["tool"] == STEPS - FAIL_AT, f"a finished tool ran again; {context}"
        assert not second["warnings"] and not second["errors"], context
        assert not cache_root(tmp / "cache").exists(), context
        rows.append((point, len(packs), len(singles)))
    print(f"\npacking SIGKILL trials: {len(rows)}; 0 wrong replays, 0 finished steps lost")
    for row in rows:
        print(f"  {row[0]:<16} packs {row[1]} singles {row[2]}")
    assert len(rows) == PACKED + 2


def test_a_torn_pack_is_ignored_and_the_singles_it_would_replace_replay(fork_server, tmp_path):
    """A filesystem without atomic rename tears the pack itself: the singles are still there, the pack is skipped."""
    first = job(tmp_path, "attempt1", 1, fail_at_step=FAIL_AT, ending=True, tool_sleep=0)
    assert fork_server.kill_at(first, "pack-written:1") == -signal.SIGKILL
    [pack] = cache_root(tmp_path / "cache").glob("*.pack")
    data = pack.read_bytes()
    pack.write_bytes(data[: len(data) // 2])

    second = fork_server.run(job(tmp_path, "attempt2", 2, finish=True, ending=True, tool_sleep=0))

    assert second["output"] == expected_output(PROMPT, STEPS)
    assert second["replayed"] == {"model": FAIL_AT + 1, "tool": FAIL_AT}
    [warning] = second["warnings"]
    assert pack.name in warning and "half-way" in warning


def test_two_tries_packing_at_once_lose_nothing(fork_server, tmp_path):
    """A zombie and its successor load the same cache and pack it at the same moment; one is killed half-way
    through removing what it replaced. The next try replays every finished step, once."""
    first = job(tmp_path, "attempt1", 1, fail_at_step=FAIL_AT, tool_sleep=0)  # killed: its entries stay single
    assert fork_server.run(first)["error"].startswith("RuntimeError")
    barrier = tmp_path / "go"
    loaded = [tmp_path / "zombie-loaded", tmp_path / "successor-loaded"]
    zombie = job(tmp_path, "zombie", 1, pack_only=True, pack_after=str(barrier), loaded=str(loaded[0]))
    ready = tmp_path / "ready"
    successor = job(tmp_path, "successor", 2, pack_only=True, pack_after=str(barrier), loaded=str(loaded[1]))
    successor.update(kill_at="delete:3", ready=str(ready))
    pids = [fork_server.spawn(zombie), fork_server.spawn(successor)]
    deadline = time.monotonic() + 30
    while not all(path.exists() for path in loaded):  # both have loaded the cache and wait at the barrier
        assert time.monotonic() < deadline
        time.sleep(0.001)
    barrier.write_text("go")
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    os.kill(pids[1], signal.SIGKILL)
    assert fork_server.wait(pids[0]) == 0
    assert fork_server.wait(pids[1]) == -signal.SIGKILL
    left = packed_state(tmp_path / "cache")
    assert len(left.complete) == PACKED and not left.corrupt, left

    third = fork_server.run(job(tmp_path, "attempt3", 3, finish=True, ending=True, tool_sleep=0))

    assert third["output"] == expected_output(PROMPT, STEPS)
    assert set(third["replayed_entries"]) == left.complete
    assert third["replayed"] == {"model": FAIL_AT + 1, "tool": FAIL_AT}
    assert not third["warnings"] and not third["errors"], third["warnings"]
    assert marks(tmp_path / "marker", 3)["tool"] == STEPS - FAIL_AT
