"""Record three durable agents under one pydantic-ai release and replay them under another (issue 34).

``make cross-release FROM=2.68.0 TO=2.78.0`` runs ``record`` in a venv with pydantic-ai FROM and ``replay`` in
one with TO (venvs under ``.xrel/``, made with ``.tools/bin/uv`` as ``make matrix`` makes its own). The agents, as
a fleet has them:

1. ``triage``: instructions, a system prompt, a tool and structured output;
2. ``parallel``: model settings, two parallel tool calls with a pydantic argument;
3. ``delegate``: a tool that runs a delegate agent carrying ``DurableCapability``.

Their models are ``FunctionModel``\\ s that count their calls, as do the tools; ``replay`` fails (exit 1) when any
model or tool is called again, or any step runs live, and prints the figures either way.

    python scripts/cross_release.py record|replay FOLDER

To check that a cache recorded by an earlier release of this provider replays, record with its code first:
``PYTHONPATH=/path/to/its/src .xrel/pydantic-ai-2.62.0/bin/python scripts/cross_release.py record FOLDER``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import fsspec
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.durable import AttemptOptions, DurableCapability, DurableRun, StepStore, run_agent
from airflow_pydantic_ai.durable.storage.identity import TaskIdentity

try:
    from airflow_pydantic_ai.durable.keys.releases import installed_release
except ImportError:  # recording with the code of 0.3.0 or earlier (PYTHONPATH=its src): keys of model-request/v1
    from importlib.metadata import version

    def installed_release() -> str:
        return version("pydantic-ai-slim")


CALLS: Counter[str] = Counter()


class Ticket(BaseModel):
    ticket_id: int
    priority: str


class Triage(BaseModel):
    priority: int
    summary: str


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    if not isinstance(last, ModelRequest):
        return []
    return [part for part in last.parts if isinstance(part, ToolReturnPart)]


def triage_agent() -> Agent[None, Triage]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["triage model"] += 1
        if not _returns(messages):
            return ModelResponse(parts=[ToolCallPart("fetch_ticket", {"ticket_id": 42}, tool_call_id="t1")])
        output = info.output_tools[0].name
        return ModelResponse(parts=[ToolCallPart(output, {"priority": 2, "summary": "printer on fire"}, "o1")])

    agent: Agent[None, Triage] = Agent(
        FunctionModel(model), output_type=Triage, instructions="Triage the ticket.", system_prompt="You are support."
    )

    @agent.tool_plain
    def fetch_ticket(ticket_id: int) -> dict[str, Any]:
        """Fetch a support ticket from the helpdesk."""
        CALLS["fetch_ticket"] += 1
        return {"id": ticket_id, "title": "Printer on fire"}

    return agent


def parallel_agent() -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["parallel model"] += 1
        if not _returns(messages):
            return ModelResponse(
                parts=[
                    ToolCallPart("file", {"ticket": {"ticket_id": 1, "priority": "high"}}, tool_call_id="p1"),
                    ToolCallPart("file", {"ticket": {"ticket_id": 2, "priority": "low"}}, tool_call_id="p2"),
                ]
            )
        return ModelResponse(parts=[TextPart(", ".join(str(part.content) for part in _returns(messages)))])

    agent: Agent[None, str] = Agent(FunctionModel(model), model_settings={"temperature": 0.2, "max_tokens": 300})

    @agent.tool_plain
    def file(ticket: Ticket) -> str:
        """File a ticket."""
        CALLS["file"] += 1
        return f"filed {ticket.ticket_id} ({ticket.priority})"

    return agent


def delegate_agent() -> Agent[None, str]:
    def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["helper model"] += 1
        if not _returns(messages):
            return ModelResponse(parts=[ToolCallPart("look_up", {"topic": "printers"}, tool_call_id="h1")])
        return ModelResponse(parts=[TextPart("printers need toner")])

    helper: Agent[None, str] = Agent(FunctionModel(helper_model), name="helper", capabilities=[DurableCapability()])

    @helper.tool_plain
    def look_up(topic: str) -> str:
        CALLS["look_up"] += 1
        return f"notes on {topic}"

    def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        CALLS["outer model"] += 1
        if not _returns(messages):
            return ModelResponse(parts=[ToolCallPart("ask_helper", {"question": "printers?"}, tool_call_id="d1")])
        return ModelResponse(parts=[TextPart(f"helper says: {_returns(messages)[0].content}")])

    outer: Agent[None, str] = Agent(FunctionModel(outer_model), name="outer")

    @outer.tool
    async def ask_helper(ctx: RunContext[None], question: str) -> str:
        CALLS["ask_helper"] += 1
        result = await helper.run(question)
        return result.output

    return outer


AGENTS = {"triage": triage_agent, "parallel": parallel_agent, "delegate": delegate_agent}


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _add(self, level: str, msg: str, *args: Any, **_: Any) -> None:
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg: str, *args: Any, **kw: Any) -> None:
        self._add("info", msg, *args)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self._add("debug", msg, *args)

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self._add("warning", msg, *args)

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self._add("error", msg, *args)


def _store(folder: Path, task_id: str, log: _Log) -> StepStore:
    identity = TaskIdentity(dag_id="cross_release", run_id="manual__1", task_id=task_id, map_index=-1)
    base = str(folder.resolve())
    return StepStore.for_task(fsspec.filesystem("file"), base, f"file://{base}", identity, warn=log.warning)


def main(mode: str, folder: Path) -> int:
    failed = False
    for name, build in AGENTS.items():
        CALLS.clear()
        log = _Log()
        attempt = 1 if mode == "record" else 2
        run = DurableRun.open(_store(folder, name, log), attempt=attempt, log=log, options=AttemptOptions())
        if mode == "record":
            # The first try records every step and then dies (no ending): its steps stay for the next try.
            run_agent(run, build(), "go")
            print(f"{name}: recorded under pydantic-ai {installed_release()}: {dict(CALLS)}")
            continue
        with run.ending():
            result = run_agent(run, build(), "go")
        replayed, live = run.stats.replayed, run.stats.executed
        warnings = [line for level, line in log.lines if level in ("warning", "error")]
        print(
            f"{name}: replayed under pydantic-ai {installed_release()}: {replayed.model} model and {replayed.tool} "
            f"tool steps replayed, {live.model} model and {live.tool} tool steps live, calls {dict(CALLS)}; "
            f"output {result.output!r}"
        )
        for line in warnings:
            print(f"  {line}")
        if CALLS or live.model or live.tool or warnings:
            failed = True
    if mode == "replay":
        print(json.dumps({"ok": not failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
