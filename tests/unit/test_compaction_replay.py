"""History compaction under durable (pydantic-ai 2.78, issue 34 item 5): a retry replays the compaction's own model
request (a summary through the conversation's model, or the provider's native compaction) instead of asking the
model again, and the steps after it replay too.

Try 1 compacts the history and then fails in a tool; try 2 replays every step up to that tool: the model is not
called again, neither for the summary nor for the compacted request.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import DurableHarness

pytestmark = requires_pydantic_ai("2.78", "history compaction (compact_history, NativeCompaction)")

CALLS: Counter[str] = Counter()
FAIL_ONCE: set[str] = set()


def _compacted(messages: list[ModelMessage]) -> bool:
    from pydantic_ai.messages import CompactionPart

    return any(isinstance(part, CompactionPart) for message in messages for part in message.parts)


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The conversation: ``work``, then (once the history is compacted) ``boom``, then a text answer."""
    last = messages[-1]
    asked = " ".join(str(part.content) for part in last.parts if isinstance(part, UserPromptPart))
    if asked.startswith("Summarize"):
        CALLS["summary"] += 1
        return ModelResponse(parts=[TextPart("the user asked to go; work was done")])
    CALLS["model"] += 1
    called = {
        part.tool_name for message in messages if isinstance(message, ModelResponse) for part in message.tool_calls
    }
    if not _compacted(messages) and "work" not in called:
        return ModelResponse(parts=[ToolCallPart("work", {}, "c1")])
    if "boom" not in called:
        return ModelResponse(parts=[ToolCallPart("boom", {}, "c2")])
    return ModelResponse(parts=[TextPart(f"done after compaction ({len(messages)} messages)")])


class _CompactingModel(FunctionModel):
    """A FunctionModel with a provider's on-demand compaction (as OpenAI Responses and Anthropic have)."""

    async def compact_messages(self, request_context: Any, *, instructions: str | None = None) -> ModelResponse:
        from pydantic_ai.messages import CompactionPart

        CALLS["compaction"] += 1
        return ModelResponse(
            parts=[CompactionPart(content=f"compacted {len(request_context.messages)} messages")],
            model_name=self.model_name,
        )


def _summarizing() -> Any:
    from pydantic_ai.capabilities import AbstractCapability, CompactionRequest, CompactionResult
    from pydantic_ai.messages import CompactionPart

    @dataclass
    class Summarize(AbstractCapability[Any]):
        """Compacts once the history has three messages, with a summary the conversation's own model writes."""

        async def compact_history(self, ctx: RunContext[Any], request: CompactionRequest) -> CompactionResult | None:
            conversation = request.conversation_request
            summary = await conversation.model.request(
                [ModelRequest(parts=[UserPromptPart(f"Summarize {len(request.messages)} messages")])],
                conversation.settings,
                ModelRequestParameters(),
            )
            part = CompactionPart(content=summary.text or "")
            return CompactionResult(
                messages=[ModelRequest(parts=[part]), request.messages[-1]],
                part=part,
                handler="summarizing",
                usage=summary.usage,
            )

    return Summarize()


def _asking_for_compaction() -> Any:
    from pydantic_ai.capabilities import AbstractCapability

    @dataclass
    class CompactLongHistories(AbstractCapability[Any]):
        """Asks for compaction before a request whose history has three messages or more (a size trigger)."""

        async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
            if len(request_context.messages) >= 3 and not _compacted(request_context.messages):
                ctx.request_compaction()
            return request_context

    return CompactLongHistories()


def _agent(how: str) -> Agent[None, str]:
    from pydantic_ai.capabilities import NativeCompaction
    from pydantic_ai.profiles import ModelProfile

    if how == "summary":
        model: FunctionModel = FunctionModel(_answer)
        capabilities = [_asking_for_compaction(), _summarizing()]
    else:
        model = _CompactingModel(_answer, profile=ModelProfile(supports_compaction_on_demand=True))
        capabilities = [_asking_for_compaction(), NativeCompaction()]
    agent: Agent[None, str] = Agent(model, name="compacting", capabilities=capabilities)

    @agent.tool_plain
    def work() -> str:
        CALLS["work"] += 1
        return "worked"

    @agent.tool_plain
    def boom() -> str:
        CALLS["boom"] += 1
        if "boom" in FAIL_ONCE:
            FAIL_ONCE.discard("boom")
            raise RuntimeError("try 1 fails after the compaction")
        return "ok"

    return agent


@pytest.mark.parametrize(("how", "compaction"), [("summary", "summary"), ("native", "compaction")])
def test_a_retry_replays_the_compaction_and_the_steps_after_it(
    harness: DurableHarness, how: str, compaction: str
) -> None:
    CALLS.clear()
    FAIL_ONCE.add("boom")
    with pytest.raises(RuntimeError, match="fails after the compaction"):
        harness.run(_agent(how), "go")
    assert Counter({"model": 2, compaction: 1, "work": 1, "boom": 1}) == CALLS

    CALLS.clear()
    result, _, log = harness.run(_agent(how), "go")

    # Replayed: the first request, work, the compaction's request and the compacted request; live: boom, the answer.
    assert Counter({"boom": 1, "model": 1}) == CALLS
    assert result.output.startswith("done after compaction")
    assert [record.handler for record in result.compactions] == ["summarizing" if how == "summary" else "native"]
    assert any("replayed 4 cached steps (3 model, 1 tool)" in line for line in log.at("info")), log.at("info")
    assert not any("compacted" in line for line in log.at("warning")), log.at("warning")
