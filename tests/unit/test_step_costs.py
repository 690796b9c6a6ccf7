"""Tokens and cost of recorded model steps on the read side: per step, the total line, the view's columns."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.durable import local_store, task_identity

from airflow_pydantic_ai.durable import CacheReader
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.step_costs import StepCost, format_usd, replay_total
from airflow_pydantic_ai.ui.pages import TaskRef, ViewData, view_page


def test_the_total_line_sums_model_tokens_and_priced_costs() -> None:
    steps = [
        ("model", StepCost(11_000, 400, 0.0315)),
        ("tool", StepCost()),
        ("model", StepCost(1_000, 0, 0.0085)),
        ("result", StepCost()),
    ]
    assert (
        replay_total(steps) == "A retry replays 3 steps (2 model): 12,400 tokens (12,000 input, 400 output), ~$0.0400"
    )


def test_unpriced_model_steps_are_said_not_guessed() -> None:
    assert replay_total([("model", StepCost(10, 5, None))]) == (
        "A retry replays 1 step (1 model): 15 tokens (10 input, 5 output), cost unknown (no price for the model)"
    )
    assert replay_total([("model", StepCost(10, 5, 2.5)), ("model", StepCost(1, 1, None))]).endswith(
        "~$2.50 (+ 1 model step without a price)"
    )
    assert format_usd(0.0035) == "~$0.0035"


def test_a_model_entry_shows_its_recorded_tokens_and_cost_and_a_tool_entry_none(tmp_path: Path) -> None:
    store = local_store(tmp_path, task_identity())
    usage = {"input_tokens": 1200, "output_tokens": 80, "cost_usd": 0.004}
    store.put(StepEntry("model", "m" * 64, 1, 1, "openai:gpt-4o", {"response": {"parts": []}}, usage=usage))
    store.put(StepEntry("tool", "t" * 64, 1, 1, "lookup", {"outcome": "return", "value": 1}))
    steps = CacheReader(store).steps()

    assert [step.cost for step in steps] == [StepCost(1200, 80, 0.004), StepCost()]
    task = TaskRef("dag", "run", "task", -1, "/pydantic-ai/cache")
    page = view_page(
        ViewData(task=task, state="failed", try_number=1, operator="Op", location="x", exists=True, steps=steps), "/s"
    )
    assert "<th>Tokens</th><th>Cost</th>" in page
    assert "1,280<span" in page and "~$0.0040" in page
    assert "A retry replays 2 steps (1 model): 1,280 tokens (1,200 input, 80 output), ~$0.0040" in page
