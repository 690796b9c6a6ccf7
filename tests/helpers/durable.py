"""What the durable tests share: a logger that keeps its lines, the task identity, one harness that runs
attempts of a durable agent the way ``AgentOperator`` does, on a local folder and without Airflow, and the
agent most of them run (``counting_agent``).

An attempt: the task instance's ``file://`` store in a folder of the test's own, ``Attempt.open`` with the
next attempt number, then ``run_agent`` (the operator's own entry point) inside ``run.ending()``, which logs the
summary at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.test import TestModel

from airflow_pydantic_ai.durable import Attempt, AttemptOptions, StepStore, TaskIdentity, run_agent

__all__ = [
    "RUN_ID",
    "DurableHarness",
    "RecordingLog",
    "counting_agent",
    "local_store",
    "stored_entries",
    "task_identity",
    "tool_returns",
    "unpack",
]

RUN_ID = "manual__2026-11-22T04:00:00+00:00"
"""The run id of the task instances the durable tests write caches for (a manual run's id, with ``:`` and ``+``)."""


def task_identity(
    dag_id: str = "dag", task_id: str = "task", *, run_id: str = RUN_ID, map_index: int = -1
) -> TaskIdentity:
    """The identity of one task instance (an unmapped task of :data:`RUN_ID` unless told otherwise)."""
    return TaskIdentity(dag_id, run_id, task_id, map_index)


@dataclass
class RecordingLog:
    """A logger for ``Attempt`` and ``StepStore`` that keeps every line with its level, ``%``-args applied."""

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
        """The lines logged at ``level``, in order."""
        return [text for logged_at, text in self.lines if logged_at == level]

    @property
    def texts(self) -> list[str]:
        """Every line, whatever its level, in order."""
        return [text for _, text in self.lines]

    def summary(self) -> str:
        """The attempt's summary line (``Durable: replayed N cached steps ...``, at INFO)."""
        return next(line for line in self.at("info") if line.startswith("Durable: replayed "))


def local_store(base: str | Path, identity: TaskIdentity, **options: Any) -> StepStore:
    """The store of ``identity`` under the local folder ``base`` (as a ``file://`` URL); ``options`` go to
    ``StepStore.for_task`` (``warn``, ``cipher``, ``timeout``)."""
    return StepStore.for_task(fsspec.filesystem("file"), str(base), f"file://{base}", identity, **options)


def _packed(pack: Path) -> Iterator[tuple[str, bytes]]:
    """(name, exact stored bytes) of every entry of a pack: each is a JSON value spliced in unchanged."""
    text = pack.read_bytes().decode()
    decoder = json.JSONDecoder()
    position = text.index('"entries":{') + len('"entries":{')
    while text[position] != "}":
        name, position = decoder.raw_decode(text, position)
        start = position + 1  # past the ":"
        _, position = decoder.raw_decode(text, start)
        yield name, text[start:position].encode()
        position += text[position] == ","


def stored_entries(folder: str | Path, pattern: str = "*") -> dict[str, bytes]:
    """Entry name -> its stored bytes, for every entry under ``folder`` (searched recursively) whose name matches
    ``pattern``: single entries as they are, and the entries of packs, byte for byte as they were packed."""
    found: dict[str, bytes] = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.name.endswith(".pack") and not path.name.startswith("."):
            found.update((name, data) for name, data in _packed(path) if Path(name).match(pattern))
        elif path.name.endswith(".json") and not path.name.startswith(".") and path.match(pattern):
            found[path.name] = path.read_bytes()
    return found


def unpack(folder: str | Path) -> None:
    """Turn every pack under ``folder`` back into single entries, byte for byte, as a try killed before it
    packed would have left them (for tests that damage one entry on disk)."""
    for pack in sorted(Path(folder).rglob("*.pack")):
        if pack.name.startswith("."):
            continue
        for name, data in _packed(pack):
            (pack.parent / name).write_bytes(data)
        pack.unlink()


@dataclass
class DurableHarness:
    """Attempts of one task instance on its store under ``base``: each :meth:`open` or :meth:`run` is the next
    attempt (numbered from 1) with a :class:`RecordingLog` of its own, kept in ``logs``."""

    base: str
    identity: TaskIdentity = field(default_factory=task_identity)
    attempt: int = 0
    logs: list[RecordingLog] = field(default_factory=list)
    cipher: Any = None
    """Seals every entry (a Fernet object: ``durable_encrypt``); None: entries are plain JSON."""

    def store(self, log: RecordingLog | None = None) -> StepStore:
        """The task instance's store; its warnings go to ``log`` (to a log nobody reads without one)."""
        return local_store(self.base, self.identity, warn=(log or RecordingLog()).warning, cipher=self.cipher)

    @property
    def root(self) -> Path:
        """The folder of the task instance's entries."""
        return Path(self.store().root)

    def open(self, **run_options: Any) -> tuple[Attempt, RecordingLog]:
        """The next attempt's ``Attempt`` (``run_options``: fields of its ``AttemptOptions``) and its log."""
        self.attempt += 1
        log = RecordingLog()
        self.logs.append(log)
        return Attempt.open(self.store(log), attempt=self.attempt, log=log, options=AttemptOptions(**run_options)), log

    def run(
        self,
        agent: Any,
        prompt: str,
        *,
        run_options: dict[str, Any] | None = None,
        capabilities: Sequence[Any] = (),
        killed: bool = False,
        **agent_kwargs: Any,
    ) -> tuple[Any, Attempt, RecordingLog]:
        """One attempt, as AgentOperator makes it: ``run_agent`` (the durable capability first, then
        ``capabilities``; an answer that ends in ``UnexpectedModelBehavior`` is forgotten) inside
        ``run.ending()`` (the summary is logged whatever happens; a try that fails packs its entries).
        ``killed``: the try dies where it fails (a SIGKILL): no ``ending``, so its entries stay single.
        ``agent_kwargs`` go to ``agent.run_sync``."""
        run, log = self.open(**(run_options or {}))
        if killed:
            return run_agent(run, agent, prompt, capabilities=capabilities, **agent_kwargs), run, log
        with run.ending():
            result = run_agent(run, agent, prompt, capabilities=capabilities, **agent_kwargs)
        return result, run, log


def counting_agent(calls: dict[str, int], fail_on: set[str] | None = None, **agent_kwargs: Any) -> Agent[Any, Any]:
    """A ``TestModel`` agent with two tools, ``lookup`` and ``notify``, that count their calls in ``calls``;
    ``notify`` fails once (``ConnectionError``) when ``fail_on`` holds it. ``agent_kwargs`` go to ``Agent``."""
    agent: Agent[Any, Any] = Agent(TestModel(), **agent_kwargs)

    @agent.tool_plain
    def lookup(city: str) -> str:
        calls["lookup"] = calls.get("lookup", 0) + 1
        return f"weather in {city}: sunny"

    @agent.tool_plain
    def notify(message: str) -> str:
        calls["notify"] = calls.get("notify", 0) + 1
        if fail_on and "notify" in fail_on:
            fail_on.discard("notify")
            raise ConnectionError("chat API down")
        return "sent"

    return agent


def tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results the last message hands the model (none when it is not a request): what a scripted
    ``FunctionModel`` answers to."""
    last = messages[-1]
    return [part for part in last.parts if isinstance(part, ToolReturnPart)] if isinstance(last, ModelRequest) else []
