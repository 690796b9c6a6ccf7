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


def summaries(log: str | list[str]) -> list[tuple[int, ...]]:
    """The six numbers of each summary line in ``log`` (captured output, or a task log's events), in order."""
    text = log if isinstance(log, str) else "\n".join(log)
    return [tuple(int(group) for group in match.groups()) for match in SUMMARY.finditer(text)]
