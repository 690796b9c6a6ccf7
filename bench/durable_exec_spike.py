"""Spike (issue 18; by hand: ``python -m bench.durable_exec_spike 300``): pydantic-ai's durable engine surface.

A step protocol as the execute() of a CallableOperationBackend under BaseDurabilityCapability.

The backend's execute() stands for a durable step: it memoizes by (operation name, occurrence) in a dict,
the way a journal engine does. Checks what the base class asks of users, and the cost per step.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pydantic_ai
from pydantic_ai import Agent
from pydantic_ai.durable_exec import (
    IDENTITY_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    JournalOperationNamer,
    RoleBasedOperationConfig,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits

L = UsageLimits(request_limit=None)

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
JOURNAL: dict[Any, Any] = {}
IN_CONTAINER = {"on": True}


class SpikeBackend(CallableOperationBackend[dict]):
    def __init__(self, agent_name: str) -> None:
        super().__init__(
            namer=JournalOperationNamer(agent_name),
            config=RoleBasedOperationConfig(model={}, event={}, capability={}, tool={}),
        )
        self.seq: Counter[str] = Counter()

    async def execute(self, *, operation_id, name, body, cache_key, config):  # type: ignore[override]
        occurrence = self.seq[name]
        self.seq[name] += 1
        key = (name, occurrence)
        if key in JOURNAL:
            return JOURNAL[key]
        value = await body()
        JOURNAL[key] = value
        return value


@dataclass(init=False, kw_only=True)
class SpikeDurability(BaseDurabilityCapability[Any]):
    engine_spec = DurabilityEngineSpec(
        engine_name="Spike",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="attempt",
        codec=IDENTITY_CODEC,
        unsupported_runtime_toolset_kinds=frozenset(),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        tool_call_result_upgrade_lenient=True,
        journal_discovery=False,
        sequential_tools_in_durable_context=False,
        tool_config_key="spike",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend: SpikeBackend | None = None

    @property
    def in_durable_context(self) -> bool:
        return IN_CONTAINER["on"]

    def get_durable_operation_backend(self):  # type: ignore[override]
        if self._backend is None:
            self._backend = SpikeBackend(self.name)
        return self._backend


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    steps = sum(1 for message in messages if isinstance(message, ModelResponse))
    if steps < N:
        return ModelResponse(parts=[ToolCallPart("lookup", {"i": steps})])
    return ModelResponse(parts=[TextPart("done")])


def lookup(i: int) -> str:
    return "x" * 64


def attempt(what: str, make) -> None:
    try:
        make()
        print(f"{what}: accepted")
    except Exception as error:
        print(f"{what}: REFUSED: {type(error).__name__}: {str(error)[:220]}")


print("pydantic-ai", pydantic_ai.__version__ if hasattr(pydantic_ai, "__version__") else "?")
# 2. Speed: plain run vs recording vs replay through the engine surface.
plain = Agent(FunctionModel(script), toolsets=[FunctionToolset([lookup])])
print("plain...", flush=True)
t = time.perf_counter()
plain.run_sync("go", usage_limits=L)
plain_s = time.perf_counter() - t
agent = Agent(
    FunctionModel(script), name="bench", toolsets=[FunctionToolset([lookup], id="t")], capabilities=[SpikeDurability()]
)
JOURNAL.clear()
t = time.perf_counter()
agent.run_sync("go", usage_limits=L)
record_s = time.perf_counter() - t
for obj in gc.get_objects():
    if isinstance(obj, SpikeBackend):
        obj.seq.clear()
t = time.perf_counter()
agent.run_sync("go", usage_limits=L)
replay_s = time.perf_counter() - t
first, second = record_s / plain_s, replay_s / plain_s
print(f"N={N}: plain {plain_s:.2f}s, through the surface (in-memory journal, no I/O, no fingerprints):")
print(f"  first run {record_s:.2f}s ({first:.2f}x), second {replay_s:.2f}s ({second:.2f}x); entries {len(JOURNAL)}")

# 1. What the base asks of users.
attempt(
    "agent without a name",
    lambda: Agent(
        FunctionModel(script), toolsets=[FunctionToolset([lookup], id="t")], capabilities=[SpikeDurability()]
    ),
)
attempt(
    "leaf toolset without an id",
    lambda: Agent(
        FunctionModel(script), name="a", toolsets=[FunctionToolset([lookup])], capabilities=[SpikeDurability()]
    ),
)
named = Agent(
    FunctionModel(script), name="a2", toolsets=[FunctionToolset([lookup], id="t")], capabilities=[SpikeDurability()]
)
attempt(
    "run-time model override (unregistered)", lambda: named.run_sync("go", model=FunctionModel(script), usage_limits=L)
)
