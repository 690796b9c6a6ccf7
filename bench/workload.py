"""The agent under test: a FunctionModel that makes N tool steps, and a tool that returns S bytes.

The model costs next to nothing, so what is measured is pydantic-ai's own work per step plus what
durability adds. The model function is async (a sync one would hop to a worker thread on every
step) and reports its usage itself, as a real provider does (otherwise FunctionModel estimates
tokens by re-reading the whole history on every step, a cost no real run pays). The tool is async
too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from airflow_pydantic_ai import at_most_once

__all__ = ["NO_LIMITS", "PROMPT", "Workload", "payload", "tool_results_digest"]

PROMPT = "Fetch every page of the report, then say you are done."
NO_LIMITS = UsageLimits(request_limit=None)
"""pydantic-ai stops a run at 50 requests by default; the benchmark makes up to 301."""


def payload(step: int, call: int, size: int) -> str:
    """The tool's result for one call: ``size`` bytes of ASCII, different for every call, always the same."""
    seed = hashlib.sha256(f"page {step}/{call}".encode()).hexdigest()
    return (seed * (size // len(seed) + 1))[:size]


def tool_results_digest(messages: list[ModelMessage]) -> str:
    """A digest of every tool result the model was given, in order: replays must hand back the same bytes."""
    hasher = hashlib.sha256()
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    hasher.update(part.tool_call_id.encode())
                    hasher.update(str(part.content).encode())
    return hasher.hexdigest()


@dataclass(frozen=True)
class Workload:
    """``steps`` model steps, each asking for ``parallel`` tool calls whose results are ``size`` bytes."""

    steps: int
    size: int
    parallel: int = 1
    at_most_once: bool = False
    """The tool is marked ``at_most_once()``: a start mark is written before each live call (``--at-most-once``)."""

    @property
    def tool_calls(self) -> int:
        return self.steps * self.parallel

    @property
    def model_requests(self) -> int:
        return self.steps + 1  # the last one answers with text

    def build_agent(self) -> Agent[None, str]:
        steps, parallel, size = self.steps, self.parallel, self.size

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            done = sum(1 for message in messages if isinstance(message, ModelResponse))
            if done >= steps:
                return ModelResponse(
                    parts=[TextPart(f"Done: fetched {steps * parallel} pages.")],
                    usage=RequestUsage(input_tokens=50, output_tokens=8),
                )
            calls = [
                ToolCallPart("fetch_page", {"step": done, "call": call}, tool_call_id=f"call-{done}-{call}")
                for call in range(parallel)
            ]
            return ModelResponse(parts=calls, usage=RequestUsage(input_tokens=50, output_tokens=12 * parallel))

        agent: Agent[None, str] = Agent(FunctionModel(respond, model_name="bench-function"), name="bench")

        @agent.tool_plain(metadata=at_most_once() if self.at_most_once else None)
        async def fetch_page(step: int, call: int) -> str:
            """Fetch one page of the report."""
            return payload(step, call, size)

        return agent
