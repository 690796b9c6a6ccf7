"""scripts/demo_story.py reads the log of ``airflow dags test`` (an excerpt of a real ``make demo`` run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _demo_story() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_story_under_test", ROOT / "scripts" / "demo_story.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_story_has_each_try_in_order_with_its_failure_reason_and_state() -> None:
    lines = (ROOT / "tests" / "fixtures" / "demo" / "dags_test_excerpt.log").read_text().splitlines()
    tries, run_state = _demo_story().read_story(lines)

    assert run_state == "success"
    assert [(attempt.task_id, attempt.number) for attempt in tries] == [("triage_ticket", 1), ("triage_ticket", 2)]
    first, second = tries
    assert first.failure == "ConnectionError: team chat API unavailable (simulated, first try only)"
    assert first.state == "up_for_retry"
    assert first.lines[2:] == [
        "Durable: step 1: model function:scripted-llm ran live in 0.01 s",
        "fetch_ticket(42) called on try 1",
        "Durable: step 2: tool fetch_ticket (call fetch-42) ran live in 0.00 s",
        "notify_team(42) called on try 1",
        "Durable: step 3: tool notify_team (call notify-42) failed after 0.02 s (ConnectionError); it is not cached "
        "and runs again on a retry",
        "Durable: replayed 0 cached steps (0 model, 0 tool), executed 3 new steps (1 model, 2 tool)",
    ]
    assert second.failure is None
    assert second.state == "success"
    assert "Durable: step 2: tool fetch_ticket (call fetch-42) replayed from the cache" in second.lines
    assert "Durable: replayed 2 cached steps (1 model, 1 tool), executed 2 new steps (1 model, 1 tool)" in second.lines
