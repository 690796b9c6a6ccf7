"""The counts a person reads in the task log are in words that agree with the number ("1 model request"),
except the summary line, whose wording never changes: dashboards grep for its documented form."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic_ai.usage import RequestUsage
from tests.helpers.durable import RecordingLog

from airflow_pydantic_ai.durable.reporting.stats import AttemptStats, StepCount
from airflow_pydantic_ai.durable.wording import plural

ROOT = Path(__file__).resolve().parents[2]


def _stats(
    replayed: tuple[int, int] = (0, 0), executed: tuple[int, int] = (0, 0), saved: tuple[int, int] = (0, 0)
) -> AttemptStats:
    """An attempt's stats after (model, tool) steps replayed and executed, the first replayed model step
    having saved ``saved`` (input, output) tokens: counted as steps count them, through ``step_done``."""
    stats = AttemptStats()
    for side, (models, tools) in ((True, replayed), (False, executed)):
        for index in range(models):
            usage = RequestUsage(input_tokens=saved[0], output_tokens=saved[1]) if side and index == 0 else None
            stats.step_done(StepCount("model", replayed=side, usage=usage))
        for _ in range(tools):
            stats.step_done(StepCount("tool", replayed=side))
    return stats


def _documented_summary() -> str:
    """The summary line as docs/durability.rst shows it (what a dashboard's pattern is written from)."""
    text = (ROOT / "docs" / "durability.rst").read_text()
    [line] = [line.strip() for line in text.splitlines() if line.strip().startswith("Durable: replayed ")]
    return line


def test_the_summary_line_keeps_its_documented_wording_at_every_count() -> None:
    documented = _documented_summary()
    # A dashboard's pattern: the documented line with its numbers made variable.
    pattern = re.compile(re.sub(r"\d+", lambda _: r"\d+", re.escape(documented)))
    assert pattern.pattern.count(r"\d+") == 6
    for counts in [(0, 0, 0, 0), (1, 0, 0, 1), (1, 1, 1, 1), (2, 1, 3, 12)]:
        stats = _stats(replayed=counts[:2], executed=counts[2:])
        assert pattern.fullmatch(stats.summary()), stats.summary()
    one = _stats(replayed=(1, 0), executed=(0, 1)).summary()
    assert one == "Durable: replayed 1 cached steps (1 model, 0 tool), executed 1 new steps (0 model, 1 tool)"


def test_the_lines_after_the_summary_agree_with_their_numbers() -> None:
    log = RecordingLog()
    stats = _stats(replayed=(1, 1), saved=(1, 8))

    stats.log(log, not_persisted=1, what_next="will run again on a retry")

    assert "Durable: the replay saved 1 model request (1 input token, 8 output tokens) and 1 tool call" in log.at(
        "info"
    )
    assert log.at("warning") == ["Durable: 1 step of this attempt was not persisted and will run again on a retry"]
    assert (plural(0, "step"), plural(2, "try", "tries")) == ("0 steps", "2 tries")


def test_the_opening_line_counts_the_steps_found_in_words(tmp_path: Path) -> None:
    from tests.helpers.durable import local_store, task_identity

    from airflow_pydantic_ai.durable import Attempt
    from airflow_pydantic_ai.durable.storage.entry import StepEntry

    store = local_store(tmp_path, task_identity())
    store.put(StepEntry(kind="model", key="a" * 64, step=1, attempt=1, label="test", payload={"response": {}}))
    log = RecordingLog()

    Attempt.open(store, attempt=2, log=log)

    assert any(line.startswith("Durable: found 1 step recorded by earlier attempts (") for line in log.at("info"))
