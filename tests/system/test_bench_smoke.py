"""The benchmark's smallest cell runs end to end, so that its seams into the durable core cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_benchmark_smallest_cell_records_and_replays(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    command = [sys.executable, "-m", "bench", "--steps", "3", "--sizes", "1k", "--reps", "1", "--backends", "file"]
    command += ["--parallel-steps", "", "--no-info-run", "--output", str(output)]

    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)

    assert finished.returncode == 0, finished.stderr[-3000:]
    cell = json.loads(output.read_text())["cells"][0]["summary"]
    # 3 steps of one tool call each, then the final answer: 4 model entries and 3 tool entries, one PUT each.
    assert (cell["steps"], cell["objects_written"], cell["write_requests"]) == (3, 7, 7)
    assert cell["replay_bytes_read"] == cell["bytes_written"] > cell["floor_bytes"]
    assert cell["warnings"] == 0
