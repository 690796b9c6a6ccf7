"""Stable ids (issue 29): every agent run of a durable attempt gets the same ``run_id`` and ``conversation_id`` on
every try of the task instance, so a tool or capability keyed by them sees the same values on the retry.

Real pydantic-ai agents (FunctionModel) whose tools and capability note the ids they see; attempts as the operator
makes them (``run_agent`` through :class:`DurableHarness`), or a plain task's block (``attempt_block``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import conversation_id_from_run_id
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import task_identity, tool_returns

from airflow_pydantic_ai.durable import DurableCapability, WaitingForDecisions, attempt_block
from airflow_pydantic_ai.durable.keys.run_ids import stable_run_id
from airflow_pydantic_ai.durable.steps.decision import Decision

Ids = tuple[str, str]
"""(run_id, conversation_id) as a tool or capability saw them."""


@dataclass
class SeenIds(AbstractCapability[Any]):
    """Notes the ids of every run it is on, as another capability keyed by them would read them."""

    runs: list[Ids] = field(default_factory=list)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        self.runs.append((ctx.run_id, ctx.conversation_id))
        return await handler()


def two_step_agent(seen: dict[str, list[Ids]], *, fail_first: bool = False, **agent_kwargs: Any) -> Agent[None, str]:
    """Calls ``lookup`` then ``notify`` (which fails on its first call with ``fail_first``); both note the ids.
    ``agent_kwargs`` go to ``Agent``."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if not returns:
            return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Oslo"})])
        if returns[0].tool_name == "lookup":
            return ModelResponse(parts=[ToolCallPart("notify", {"message": str(returns[0].content)})])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), **agent_kwargs)

    @agent.tool
    def lookup(ctx: RunContext[None], city: str) -> str:
        seen.setdefault("lookup", []).append((ctx.run_id, ctx.conversation_id))
        return f"sunny in {city}"

    @agent.tool
    def notify(ctx: RunContext[None], message: str) -> str:
        seen.setdefault("notify", []).append((ctx.run_id, ctx.conversation_id))
        if fail_first and len(seen["notify"]) == 1:
            raise ConnectionError("chat API down")
        return "sent"

    return agent


def run_ids_of(messages: list[ModelMessage]) -> list[str | None]:
    """The ``run_id`` each message is stamped with, in order."""
    return [message.run_id for message in messages]


def test_a_retry_sees_the_ids_of_the_try_before(harness):
    seen: dict[str, list[Ids]] = {}
    capability = SeenIds()
    agent = two_step_agent(seen, fail_first=True)
    with pytest.raises(ConnectionError):
        harness.run(agent, "go", capabilities=[capability])
    result, _run, _log = harness.run(agent, "go", capabilities=[capability])

    assert result.output == "done"
    assert len(seen["lookup"]) == 1  # replayed on try 2: it never ran again
    first_try, second_try = seen["notify"]
    assert first_try == second_try == seen["lookup"][0]
    assert capability.runs == [first_try, second_try]
    # The messages of the run are stamped with the same id, and it is a UUID (version 8: ours, not a random UUID7).
    assert set(run_ids_of(result.all_messages())) == {first_try[0]}
    assert uuid.UUID(first_try[0]).version == 8 and uuid.UUID(first_try[1]).version == 5
    assert first_try[0] != first_try[1]


def test_the_ids_are_the_task_instances_own(tmp_path):
    from tests.helpers.durable import DurableHarness

    ids: list[Ids] = []
    for task in ("task", "task", "other_task"):
        seen: dict[str, list[Ids]] = {}
        DurableHarness(base=str(tmp_path / f"cache-{len(ids)}"), identity=task_identity(task_id=task)).run(
            two_step_agent(seen), "go"
        )
        ids.append(seen["lookup"][0])
    assert ids[0] == ids[1] != ids[2]
    assert ids[0][0] != ids[2][0] and ids[0][1] != ids[2][1]


def helper(seen: dict[str, list[Ids]], *, fail_first: bool = False) -> Agent[None, str]:
    """A durable delegate: its tools note the ids it runs under."""
    return two_step_agent(seen, fail_first=fail_first, name="helper", capabilities=[DurableCapability()])


def delegating_agent(helper_agent: Agent[None, str], seen: dict[str, list[Ids]], *, times: int) -> Agent[None, str]:
    """Calls ``delegate`` once; the tool runs ``helper_agent`` ``times`` times, one after another."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("delegate", {"topic": "printer"})])
        return ModelResponse(parts=[TextPart(str(tool_returns(messages)[0].content))])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="outer")

    @agent.tool
    async def delegate(ctx: RunContext[None], topic: str) -> str:
        seen.setdefault("outer", []).append((ctx.run_id, ctx.conversation_id))
        outputs = [(await helper_agent.run(topic, usage=ctx.usage)).output for _ in range(times)]
        return ", ".join(outputs)

    return agent


def test_a_delegate_gets_ids_of_its_own_and_keeps_them_on_the_retry(harness):
    seen: dict[str, list[Ids]] = {}
    outer = delegating_agent(helper(seen, fail_first=True), seen, times=2)
    with pytest.raises(ConnectionError):
        harness.run(outer, "go")
    result, _run, _log = harness.run(outer, "go")
    assert result.output == "done, done"

    outer_ids = seen["outer"]
    assert len(outer_ids) == 2 and outer_ids[0] == outer_ids[1]
    # Try 1: the first delegation failed at notify. Try 2: it ran again (lookup replayed), then the second one.
    first_delegation, second_delegation = seen["lookup"]
    assert seen["notify"] == [first_delegation, first_delegation, second_delegation]
    assert len({outer_ids[0][0], first_delegation[0], second_delegation[0]}) == 3
    assert len({outer_ids[0][1], first_delegation[1], second_delegation[1]}) == 3
    # The delegations keep the scopes runs had before stable ids (indexes 0 and 1 under the call, drawn once),
    # so a cache recorded then still replays.
    loaded, _log = harness.open()
    scopes = {(entry.scope["parent"], entry.scope["index"]) for entry in loaded.entries.values() if entry.scope}
    assert sorted(index for _parent, index in scopes) == [0, 1] and len({parent for parent, _ in scopes}) == 1


def test_two_runs_of_a_plain_tasks_attempt_get_ids_of_their_own(harness):
    def attempt() -> list[Ids]:
        capability = SeenIds()
        run, _log = harness.open()
        agent = two_step_agent({}, capabilities=[capability])
        with attempt_block(run):
            agent.run_sync("first", capabilities=[DurableCapability()])
            agent.run_sync("second", capabilities=[DurableCapability()])
        return capability.runs

    first_attempt = attempt()
    assert first_attempt[0][0] != first_attempt[1][0]
    assert first_attempt[0][1] != first_attempt[1][1]
    assert attempt() == first_attempt  # replayed: the runs' ids are those they were recorded under


def mail_agent(seen: dict[str, list[Ids]], capability: SeenIds) -> Agent[None, str]:
    """Asks to send a mail (which needs approval), then answers with what the tool returned."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if not returns:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": "bob"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[capability])

    @agent.tool(requires_approval=True)
    def send_email(ctx: RunContext[None], to: str) -> str:
        seen.setdefault("send_email", []).append((ctx.run_id, ctx.conversation_id))
        return f"sent to {to}"

    return agent


def test_the_continuation_after_an_approval_gets_a_run_id_of_its_own_in_the_same_conversation(harness):
    seen: dict[str, list[Ids]] = {}
    capability = SeenIds()
    waiting, _run, _log = harness.run(mail_agent(seen, capability), "mail")
    assert isinstance(waiting, WaitingForDecisions)
    waiting.pending[0].record(Decision(approved=True, answered_by="alice"))
    (stopped,) = capability.runs

    result, _run, _log = harness.run(mail_agent(seen, capability), "mail")
    assert result.output == "done: sent to bob"
    replayed, continued = capability.runs[1:]
    assert replayed == stopped  # the run up to the stop: the same ids as when it stopped
    assert seen["send_email"] == [continued]
    assert continued[0] != stopped[0] and continued[1] == stopped[1]
    ids = run_ids_of(result.all_messages())
    assert set(ids) == {stopped[0], continued[0]} and ids[0] == stopped[0] and ids[-1] == continued[0]
    assert {message.conversation_id for message in result.all_messages()} == {stopped[1]}


def test_ids_passed_to_the_run_win(harness):
    seen: dict[str, list[Ids]] = {}
    harness.run(two_step_agent(seen), "go", run_id="mine", conversation_id="our-thread")
    assert seen["lookup"] == [("mine", "our-thread")]
    # A run_id of yours alone: the conversation id is derived from it, as pydantic-ai's durable engines do.
    harness.run(two_step_agent(seen), "go again", run_id="mine too")
    assert seen["lookup"][1] == ("mine too", conversation_id_from_run_id("mine too"))


def test_outside_a_durable_attempt_the_ids_are_pydantic_ais(harness):
    seen: dict[str, list[Ids]] = {}
    agent = two_step_agent(seen)
    agent.run_sync("go", capabilities=[DurableCapability()])
    agent.run_sync("go", capabilities=[DurableCapability()])
    first, second = seen["lookup"]
    assert first != second
    assert uuid.UUID(first[0]).version == 7


def test_the_id_is_a_uuid_of_its_inputs():
    owner = ["dag", "run", "task", -1]
    top = stable_run_id(owner, "top", 0)
    assert top == stable_run_id(list(owner), "top", 0)
    assert uuid.UUID(top).version == 8 and uuid.UUID(top).variant == uuid.RFC_4122
    others = {
        stable_run_id(owner, "top", 1),
        stable_run_id(owner, "top", 0, 1),
        stable_run_id(owner, "tool-key", 0),
        stable_run_id([*owner[:3], 0], "top", 0),
        stable_run_id([*owner, "region", 2], "top", 0),
    }
    assert top not in others and len(others) == 5


def test_step_keys_do_not_depend_on_the_ids(harness):
    """The same conversation under other ids keys its steps the same (the cache of a try before stable ids
    replays): a run given other ids explicitly replays every step the first attempt recorded."""
    seen: dict[str, list[Ids]] = {}
    harness.run(two_step_agent(seen), "go")
    _result, _run, log = harness.run(two_step_agent(seen), "go", run_id="other", conversation_id="thread")
    assert len(seen["lookup"]) == 1 and len(seen["notify"]) == 1
    assert log.summary().startswith("Durable: replayed 5 cached steps (3 model, 2 tool), executed 0 new steps")
