"""Reading the task logs the task supervisor writes (JSON lines), and the durable summary lines in them."""

from __future__ import annotations

import json
import re
from pathlib import Path

SUMMARY = re.compile(
    r"Durable: replayed (\d+) cached steps \((\d+) model, (\d+) tool\), "
    r"executed (\d+) new steps \((\d+) model, (\d+) tool\)"
)


def log_events(path: Path) -> list[str]:
    """The messages of a task log file (JSON lines written by the task supervisor)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            events.append(line)
            continue
        events.append(str(record.get("event", "")) if isinstance(record, dict) else line)
    return events


def summaries(events: list[str]) -> list[tuple[int, ...]]:
    return [tuple(int(group) for group in match.groups()) for event in events if (match := SUMMARY.search(event))]
