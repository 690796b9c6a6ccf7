"""A damaged cache between two tries: every damaged entry is ignored with a warning naming it, its step
runs live, and the run succeeds with the right answer.

The unit tests run two attempts of a durable agent on a real local store (no Airflow run) and damage
one entry between them. One more test does the same through a real ``dag.test()`` retry, with a
different kind of damage on each of several entries at once.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import fsspec
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.durable import DurableCapability, DurableRun, StepStore, TaskIdentity
from airflow_pydantic_ai.durable.entry import ENTRY_FORMAT, StepEntry

FETCHES = 3


@dataclass
class RecordingLog:
    lines: list[tuple[str, str]] = field(default_factory=list)

    def _add(self, level: str, msg: str, *args: Any) -> None:
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("info", msg, *args)

    def warning(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("warning", msg, *args)

    def error(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("error", msg, *args)

    def debug(self, msg: str, *args: Any, **_: Any) -> None:
        self._add("debug", msg, *args)

    def at(self, level: str) -> list[str]:
        return [text for lvl, text in self.lines if lvl == level]


def fetch_result(n: int) -> str:
    return f"ticket {n}: login page times out ({n * 7})"


def build_agent(calls: Counter[str], fail_notify: dict[str, bool], fetches: int = FETCHES) -> Agent[Any, str]:
    """fetch(1) .. fetch(N), then notify(); the model then reports every result."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        done = len(returns)
        if done < fetches:
            return ModelResponse(parts=[ToolCallPart("fetch", {"n": done + 1}, tool_call_id=f"fetch-{done + 1}")])
        if done == fetches:
            return ModelResponse(parts=[ToolCallPart("notify", {}, tool_call_id="notify")])
        return ModelResponse(parts=[TextPart(" / ".join(str(part.content) for part in returns))])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch ticket n."""
        calls[f"fetch {n}"] += 1
        return fetch_result(n)

    @agent.tool_plain
    def notify() -> str:
        """Notify the team."""
        calls["notify"] += 1
        if fail_notify["fail"]:
            fail_notify["fail"] = False
            raise ConnectionError("chat API down (first attempt only)")
        return "posted"

    return agent


def expected_output(fetches: int = FETCHES) -> str:
    return " / ".join([*(fetch_result(n) for n in range(1, fetches + 1)), "posted"])


@dataclass
class Harness:
    base: str
    attempt: int = 0
    logs: list[RecordingLog] = field(default_factory=list)

    def store(self, log: RecordingLog) -> StepStore:
        identity = TaskIdentity("damage_dag", "manual__2026-11-22T04:00:00+00:00", "agent")
        return StepStore.for_task(
            fsspec.filesystem("file"), self.base, f"file://{self.base}", identity, warn=log.warning
        )

    def run(self, agent: Agent[Any, str], storage_errors: Any = "warn") -> tuple[Any, DurableRun, RecordingLog]:
        self.attempt += 1
        log = RecordingLog()
        self.logs.append(log)
        run = DurableRun.open(self.store(log), attempt=self.attempt, log=log, storage_errors=storage_errors)
        try:
            result = agent.run_sync("triage the tickets", capabilities=[DurableCapability(run)])
        finally:
            run.log_summary()
        return result, run, log


def entries_on_disk(root: Path) -> dict[tuple[str, int], Path]:
    """(kind, step) -> path of every entry: a tool entry's step is the model step that asked for it."""
    found = {}
    for path in root.glob("*.json"):
        body = json.loads(path.read_bytes())
        found[(body["kind"], body["step"])] = path
    return found


def _garble(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[: middle - 8] + bytes(byte ^ 0x5A for byte in data[middle - 8 : middle + 8]) + data[middle + 8 :]


def _reencoded(path: Path, **changes: Any) -> bytes:
    """The entry at ``path`` rewritten with some fields changed and a *valid* checksum."""
    body = json.loads(path.read_bytes())
    entry = StepEntry(
        kind=body["kind"],
        key=body["key"],
        step=body["step"],
        attempt=body["attempt"],
        label=body["label"],
        payload=body["payload"],
        components=body["components"],
        usage=body["usage"],
    )
    fields = {**entry.__dict__, **changes}
    return StepEntry(**fields).to_bytes(owner=body["owner"])


def _future_version(path: Path) -> bytes:
    body = json.loads(path.read_bytes())
    body["version"] = 2
    body["written_by"] = "airflow-pydantic-ai 9.0"
    return json.dumps(body).encode()


def _unrebuildable_payload(path: Path) -> bytes:
    body = json.loads(path.read_bytes())
    if body["kind"] == "tool":
        return _reencoded(path, payload={"outcome": "return", "value": {"type": "martian", "value": 1}})
    return _reencoded(path, payload={"response": {"parts": 7, "kind": "response"}})


def _payload_of_the_wrong_shape(path: Path) -> bytes:
    """A valid, checksummed entry whose payload holds a number where an object belongs."""
    body = json.loads(path.read_bytes())
    if body["kind"] == "tool":
        return _reencoded(path, payload={"outcome": "return", "value": 5})
    return _reencoded(path, payload={"response": 5})


# Each damage: (path of the target, path of a sibling entry of the same kind) -> what to do.
def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _as_directory(path: Path, _other: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("not an entry")


DAMAGES: dict[str, Any] = {
    "truncated": lambda path, other: _write(path, path.read_bytes()[: len(path.read_bytes()) // 2]),
    "truncated-by-one-byte": lambda path, other: _write(path, path.read_bytes()[:-1]),
    "garbled": lambda path, other: _write(path, _garble(path.read_bytes())),
    "empty": lambda path, other: _write(path, b""),
    "nul-bytes": lambda path, other: _write(path, b"\x00" * 512),
    "wrong-schema-field": lambda path, other: _write(path, _reencoded(path, step="two")),
    "wrong-schema-kind": lambda path, other: _write(path, _reencoded(path, kind="thought")),
    "unrebuildable-payload": lambda path, other: _write(path, _unrebuildable_payload(path)),
    "payload-of-the-wrong-shape": lambda path, other: _write(path, _payload_of_the_wrong_shape(path)),
    "future-schema-version": lambda path, other: _write(path, _future_version(path)),
    "foreign-json-object": lambda path, other: _write(path, json.dumps({"hello": "world", "step": 1}).encode()),
    "foreign-json-array": lambda path, other: _write(path, b"[1, 2, 3]"),
    "foreign-same-format-tag": lambda path, other: _write(
        path, json.dumps({"format": ENTRY_FORMAT, "version": 1, "kind": "tool"}).encode()
    ),
    "encrypted-without-key": lambda path, other: _write(
        path, json.dumps({"format": ENTRY_FORMAT, "version": 1, "encrypted": "gAAAAABnot-a-token"}).encode()
    ),
    "edited-content-stale-checksum": lambda path, other: _write(
        path, path.read_bytes().replace(b'"attempt":1', b'"attempt":7')
    ),
    "key-mismatch-copy-of-sibling": lambda path, other: _write(path, other.read_bytes()),
    "directory-in-place": _as_directory,
}


@pytest.mark.parametrize("target", ["tool", "model"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_entry_is_ignored_and_its_step_runs_live(tmp_path, damage, target):
    harness = Harness(base=str(tmp_path / "cache"))
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail))
    root = Path(harness.store(RecordingLog()).root)
    entries = entries_on_disk(root)
    assert len(entries) == (FETCHES + 1) + FETCHES  # 4 model answers, 3 fetches (notify failed)
    if target == "tool":
        victim, sibling = entries[("tool", 2)], entries[("tool", 3)]
    else:
        victim = entries[("model", 2)]
        sibling = entries[("model", 3)]
    DAMAGES[damage](victim, sibling)

    result, run, log = harness.run(build_agent(calls, fail))

    assert result.output == expected_output()
    named = [warning for warning in log.at("warning") if victim.name in warning]
    assert named, f"no warning names {victim.name}: {log.lines}"
    assert any("live" in warning for warning in named), named
    if target == "tool":
        # fetch 2 ran again; the model answers and the other fetches replayed.
        assert calls == {"fetch 1": 1, "fetch 2": 2, "fetch 3": 1, "notify": 2}
        assert (run.replayed.model, run.replayed.tool, run.executed.model, run.executed.tool) == (4, 2, 1, 2)
    else:
        # Model step 2 ran live; it gave the same answer, so every tool call replayed.
        assert calls == {"fetch 1": 1, "fetch 2": 1, "fetch 3": 1, "notify": 2}
        assert (run.replayed.model, run.replayed.tool, run.executed.model, run.executed.tool) == (3, 3, 2, 1)
    if damage == "directory-in-place":
        # The live step cannot be stored over a directory: said once, and the run goes on.
        [error] = log.at("error")
        assert "could not store" in error and victim.name in error
    else:
        assert not log.at("error")


def test_unrebuildable_model_entry_does_not_claim_the_run_diverged(tmp_path):
    harness = Harness(base=str(tmp_path / "cache"))
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail))
    victim = entries_on_disk(Path(harness.store(RecordingLog()).root))[("model", 2)]
    victim.write_bytes(_unrebuildable_payload(victim))
    _, run, log = harness.run(build_agent(calls, fail))
    assert run.replayed.tool == FETCHES, "the later steps did replay"
    assert not [warning for warning in log.at("warning") if "differs from what attempt" in warning], log.at("warning")


@pytest.mark.parametrize("storage_errors", ["warn", "fail"])
@pytest.mark.parametrize("damage", ["deeply-nested-json", "step-is-infinity"])
def test_one_pathological_entry_does_not_cost_the_whole_cache(tmp_path, damage, storage_errors):
    harness = Harness(base=str(tmp_path / "cache"))
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail))
    victim = entries_on_disk(Path(harness.store(RecordingLog()).root))[("tool", 2)]
    if damage == "deeply-nested-json":
        victim.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    else:
        victim.write_bytes(_reencoded(victim, step=float("inf")))
    result, _run, log = harness.run(build_agent(calls, fail), storage_errors=storage_errors)
    assert result.output == expected_output()
    assert any(victim.name in warning for warning in log.at("warning")), log.lines
    assert calls == {"fetch 1": 1, "fetch 2": 2, "fetch 3": 1, "notify": 2}, "only the damaged step ran again"


def test_key_mismatch_never_replays_the_other_steps_result(tmp_path):
    """An entry copied under another step's name: the step it was copied onto never gets its result."""
    harness = Harness(base=str(tmp_path / "cache"))
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail))
    entries = entries_on_disk(Path(harness.store(RecordingLog()).root))
    # Every tool entry now holds fetch 3's result, each under its own (wrong) name.
    source = entries[("tool", 3)].read_bytes()
    for step in (1, 2):
        entries[("tool", step)].write_bytes(source)
    result, _run, log = harness.run(build_agent(calls, fail))
    assert result.output == expected_output()
    assert fetch_result(3) not in result.output.split(" / ")[:2]
    assert calls["fetch 1"] == 2 and calls["fetch 2"] == 2 and calls["fetch 3"] == 1
    assert sum("does not match its name" in warning for warning in log.at("warning")) == 2


def test_every_damage_at_once_in_one_cache(tmp_path):
    """Many damaged entries and junk files in one prefix: all skipped, one warning each, nothing else lost."""
    fetches = len(DAMAGES) + 1
    harness = Harness(base=str(tmp_path / "cache"))
    calls: Counter[str] = Counter()
    fail = {"fail": True}
    with pytest.raises(ConnectionError):
        harness.run(build_agent(calls, fail, fetches=fetches))
    root = Path(harness.store(RecordingLog()).root)
    entries = entries_on_disk(root)
    victims = {}
    for step, (damage, apply) in enumerate(sorted(DAMAGES.items()), start=1):
        victim = entries[("tool", step)]
        apply(victim, entries[("tool", fetches)])
        victims[damage] = victim.name
    (root / ".leftover.tmp").write_bytes(b'{"format"')  # a crashed write's temporary file
    (root / "README.txt").write_text("someone left notes here")
    (root / "model-notes.json.bak").write_bytes(b"{}")

    result, run, log = harness.run(build_agent(calls, fail, fetches=fetches))

    assert result.output == expected_output(fetches)
    for damage, name in victims.items():
        assert sum(name in warning for warning in log.at("warning")) >= 1, damage
    assert calls[f"fetch {fetches}"] == 1, "the undamaged fetch replayed"
    assert all(calls[f"fetch {step}"] == 2 for step in range(1, fetches)), calls
    assert run.replayed.tool == 1 and run.replayed.model == fetches + 1
    assert not any(".leftover.tmp" in line or "README" in line or ".bak" in line for _, line in log.lines)


# --- through Airflow: a real dag.test() retry --------------------------------------------------------

SUMMARY = re.compile(
    r"Durable: replayed (\d+) cached steps \((\d+) model, (\d+) tool\), "
    r"executed (\d+) new steps \((\d+) model, (\d+) tool\)"
)
AIRFLOW_DAMAGES = (
    "truncated",
    "garbled",
    "empty",
    "wrong-schema-field",
    "future-schema-version",
    "foreign-json-object",
    "key-mismatch-copy-of-sibling",
)


def test_damaged_entries_between_two_airflow_tries(airflow_db, tmp_path, monkeypatch, capfd):
    from airflow.sdk import DAG, get_current_context
    from tests.helpers.airflow_run import run_dag, task_states, xcom_value

    from airflow_pydantic_ai.operators.agent import AgentOperator

    base = tmp_path / "cache"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")
    fetches = len(AIRFLOW_DAMAGES) + 1
    calls: Counter[str] = Counter()
    agent = build_agent(calls, {"fail": False}, fetches=fetches)

    @agent.output_validator
    def fail_on_first_try(output: str) -> str:
        if get_current_context()["ti"].try_number == 1:
            raise RuntimeError("result store unavailable (first try only)")
        return output

    victims: dict[str, str] = {}

    def damage(context: Any) -> None:
        ti = context["ti"]
        root = base / ti.dag_id / ti.run_id / ti.task_id / "-1"
        entries = entries_on_disk(root)
        for step, name in enumerate(AIRFLOW_DAMAGES, start=1):
            victim = entries[("tool", step)]
            DAMAGES[name](victim, entries[("tool", fetches)])
            victims[name] = victim.name

    with DAG(
        dag_id="faults_damaged_cache",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        default_args={"retries": 1, "retry_delay": timedelta(0)},
    ) as dag:
        AgentOperator(
            task_id="triage", prompt="triage the tickets", agent=agent, durable=True, on_retry_callback=damage
        )
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success", out[-5000:]
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert xcom_value(dr, "triage") == expected_output(fetches)
    assert set(victims) == set(AIRFLOW_DAMAGES)
    lines = out.splitlines()
    for damage_kind, name in victims.items():
        warned = [line for line in lines if name in line and "ignoring cache entry" in line]
        assert warned, f"{damage_kind}: no warning names {name}"
        assert all("[warning" in line and "will run live" in line for line in warned), warned
    # Try 1 recorded every step (its output failed validation); try 2: the damaged fetches ran live.
    summaries = [tuple(int(group) for group in match.groups()) for match in SUMMARY.finditer(out)]
    model_steps = fetches + 2  # fetches, notify, final answer
    assert summaries == [
        (0, 0, 0, model_steps + fetches + 1, model_steps, fetches + 1),
        (model_steps + 2, model_steps, 2, len(AIRFLOW_DAMAGES), 0, len(AIRFLOW_DAMAGES)),
    ]
    assert calls["notify"] == 1 and calls[f"fetch {fetches}"] == 1
    assert all(calls[f"fetch {step}"] == 2 for step in range(1, fetches))
