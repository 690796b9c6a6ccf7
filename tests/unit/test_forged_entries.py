"""Issue 35 (5): an entry forged by someone who can write to the cache (checksum recomputed) gains no code.

A stored value names the classes it is rebuilt as; a replay builds only the classes the tool itself declares
(``allowed_types.py``). A forged entry that names another class is ignored with a warning, and the call runs
live, as for any damaged entry.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.damage import reencoded
from tests.helpers.durable import DurableHarness, counting_agent, unpack


@pytest.fixture
def tripwire_module(tmp_path, monkeypatch):
    """The name of an importable module that leaves a file behind if anything imports it."""
    name = f"tripwire_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    assert name not in sys.modules, "a forged entry imported a module on the worker"
    assert not (tmp_path / f"{name}.ran").exists(), "a forged entry ran a module's code on the worker"


def _tool_entry(root: Path, tool: str) -> Path:
    [path] = [p for p in root.glob("tool-*.json") if json.loads(p.read_bytes())["label"] == tool]
    return path


FORGERIES: dict[str, Any] = {
    "import-string": lambda module: {"type": "adapted", "class": "pydantic.types:ImportString", "value": module},
    "any-dataclass": lambda module: {
        "type": "dataclass",
        "class": "airflow_pydantic_ai.durable.storage.entry:StepEntry",
        "fields": {},
    },
    "any-model": lambda module: {"type": "pydantic", "class": "pydantic.main:BaseModel", "fields": {}, "set": []},
}


@pytest.mark.parametrize("forge", list(FORGERIES.values()), ids=list(FORGERIES))
def test_a_forged_entry_naming_a_class_the_tool_never_returns_is_ignored_and_the_call_runs_live(
    harness: DurableHarness, tripwire_module: str, forge: Any
) -> None:
    calls: dict[str, int] = {}
    agent = counting_agent(calls, fail_on={"notify"})
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather?")  # try 1: lookup is recorded, notify fails
    unpack(harness.root)
    entry = _tool_entry(harness.root, "lookup")
    forged = {"outcome": "return", "value": forge(tripwire_module)}
    entry.write_bytes(reencoded(entry, payload=forged))  # a valid checksum: only the class is wrong

    result, _, log = harness.run(agent, "weather?")

    assert result.output, "try 2 finished"
    assert calls["lookup"] == 2, "the forged result was replayed instead of running the tool"
    assert any("cannot be rebuilt" in line and "lookup" in line and "runs live" in line for line in log.at("warning"))
