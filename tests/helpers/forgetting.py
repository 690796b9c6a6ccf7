"""The agent of the forgetting tests (unit and S3 tiers): its answer fails validation until the model is asked
again, so a try that replays the forgotten answer fails the same way, and one that asks again succeeds.

``Script.answers`` are what the model says, one per live request; ``Script.asked`` counts those requests. The
output validator refuses an answer starting with "bad" (``ModelRetry``: with ``retries=0`` the run gives up at
once with ``UnexpectedModelBehavior``, and the answer is forgotten), and raises ``ConnectionError`` once for each
answer in ``Script.down`` (a transient failure: the try fails, the answer stays recorded and is packed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["PROMPT", "Killed", "Script", "answering_agent"]

PROMPT = "summarise the incident"


class Killed(BaseException):
    """The worker dies here (a SIGKILL): nothing after it runs, not even the try's ending (its pack)."""


@dataclass
class Script:
    answers: list[str]
    down: set[str] = field(default_factory=set)
    asked: int = 0


def answering_agent(script: Script) -> Agent[Any, str]:
    """A ``FunctionModel`` agent that says ``script.answers`` in turn, checked by the validator described above."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answer = script.answers[script.asked]
        script.asked += 1
        return ModelResponse(parts=[TextPart(answer)])

    agent: Agent[Any, str] = Agent(FunctionModel(model), retries=0)

    @agent.output_validator
    def check(output: str) -> str:
        if output in script.down:
            script.down.discard(output)
            raise ConnectionError("the checker is down")
        if output.startswith("bad"):
            raise ModelRetry("that summary leaves out the root cause")
        return output

    return agent
