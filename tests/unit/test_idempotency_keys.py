"""``idempotency_key()`` (issue 29): inside a tool, the same key on every try for the same call, another for any
other call.

A try "cut off" is one whose tool raises a ``BaseException`` that is not an ``Exception`` after its side effect,
and that dies there (``killed=True``: no ``ending``), as in ``test_at_most_once.py``. The SIGKILL trials are in
``tests/system``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, task_identity, tool_returns

from airflow_pydantic_ai import DurableCapability, idempotency_key, live_tool
from airflow_pydantic_ai.durable.side_effects import idempotency_key as idempotency_key_on_the_face

KEY = re.compile(r"apai-[0-9a-f]{32}")


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


def _asking(*calls: tuple[str, dict[str, Any], str]) -> FunctionModel:
    """A model that asks for ``calls`` (tool, arguments, call id) at once, then reports what they returned."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if returns:
            return ModelResponse(parts=[TextPart(", ".join(str(part.content) for part in returns))])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id) for name, args, call_id in calls])

    return FunctionModel(model)


def _sender(keys: list[str], *, kind: str, cut_off_first: bool = True, **tool_options: Any) -> Agent[None, str]:
    """An agent whose ``send`` tool sends ``idempotency_key()`` (kept in ``keys``) and is cut off the first time."""
    agent: Agent[None, str] = Agent(_asking(("send", {"to": "ops"}, "c1")))

    def send_once() -> str:
        key = idempotency_key()
        keys.append(key)
        if cut_off_first and len(keys) == 1:
            raise CutOff
        return f"sent with {key}"

    if kind == "sync":

        @agent.tool_plain(**tool_options)
        def send(to: str) -> str:
            return send_once()

    elif kind == "async":

        @agent.tool_plain(**tool_options)
        async def send(to: str) -> str:
            return send_once()

    else:

        @agent.tool(**tool_options)
        async def send(ctx: RunContext[None], to: str) -> str:
            return send_once()

    return agent


@pytest.mark.parametrize("kind", ["sync", "async", "with a context"])
def test_a_call_cut_off_after_its_side_effect_sends_the_same_key_on_the_retry(
    harness: DurableHarness, kind: str
) -> None:
    keys: list[str] = []
    agent = _sender(keys, kind=kind)
    with pytest.raises(CutOff):
        harness.run(agent, "tell ops", killed=True)

    result, _, _ = harness.run(agent, "tell ops")

    assert len(keys) == 2, "the default tool runs again on the retry"
    assert keys[0] == keys[1]
    assert KEY.fullmatch(keys[0])
    assert result.output == f"sent with {keys[0]}"


def test_the_face_and_the_top_level_package_give_the_same_function() -> None:
    assert idempotency_key is idempotency_key_on_the_face


def test_a_call_asking_again_gets_the_same_key_and_each_scope_a_stable_key_of_its_own(
    harness: DurableHarness,
) -> None:
    asked: list[list[str]] = []
    agent: Agent[None, str] = Agent(_asking(("send", {"to": "ops"}, "c1")))

    @agent.tool_plain
    def send(to: str) -> str:
        asked.append([idempotency_key(), idempotency_key(), idempotency_key("create"), idempotency_key("update")])
        if len(asked) == 1:
            raise ConnectionError("the server hung up")  # the tool failed on its own: the try fails, a retry runs it
        return "sent"

    with pytest.raises(ConnectionError):
        harness.run(agent, "tell ops")
    harness.run(agent, "tell ops")

    first, again = asked
    plain, repeated, create, update = first
    assert plain == repeated
    assert len({plain, create, update}) == 3
    assert again == first


def test_calls_with_other_arguments_or_ids_get_other_keys(harness: DurableHarness) -> None:
    keys: dict[str, str] = {}
    agent: Agent[None, str] = Agent(
        _asking(("send", {"to": "a"}, "c1"), ("send", {"to": "b"}, "c2"), ("send", {"to": "a"}, "c3"))
    )

    @agent.tool
    async def send(ctx: RunContext[None], to: str) -> str:
        assert ctx.tool_call_id is not None
        keys[ctx.tool_call_id] = idempotency_key()
        return "sent"

    harness.run(agent, "send them")

    assert sorted(keys) == ["c1", "c2", "c3"]
    assert len(set(keys.values())) == 3


def test_other_task_instances_get_other_keys(tmp_path: Any) -> None:
    identities = [
        task_identity(),
        task_identity(task_id="other_task"),
        task_identity(dag_id="other_dag"),
        task_identity(run_id="scheduled__2026-11-23T04:00:00+00:00"),
        task_identity(map_index=3),
    ]
    keys: list[str] = []
    for number, identity in enumerate(identities):
        sent: list[str] = []
        harness = DurableHarness(base=str(tmp_path / f"cache{number}"), identity=identity)
        harness.run(_sender(sent, kind="sync", cut_off_first=False), "tell ops")
        keys += sent
    assert len(set(keys)) == len(identities)


def test_a_delegate_agents_tool_sends_the_same_key_on_the_retry(harness: DurableHarness) -> None:
    keys: list[str] = []
    outer_keys: list[str] = []
    helper: Agent[None, str] = Agent(
        _asking(("send", {"to": "ops"}, "c1")), name="helper", capabilities=[DurableCapability()]
    )

    @helper.tool_plain
    def send(to: str) -> str:
        keys.append(idempotency_key())
        if len(keys) == 1:
            raise CutOff
        return "sent"

    outer: Agent[None, str] = Agent(_asking(("delegate", {"to": "ops"}, "c1")))  # the same arguments and id

    @outer.tool_plain
    async def delegate(to: str) -> str:
        outer_keys.append(idempotency_key())
        return (await helper.run(f"tell {to}")).output

    with pytest.raises(CutOff):
        harness.run(outer, "go", killed=True)
    result, _, _ = harness.run(outer, "go")

    assert result.output == "sent"
    assert len(keys) == 2 and keys[0] == keys[1] and KEY.fullmatch(keys[0])
    assert outer_keys[0] == outer_keys[1], "the outer call ran again too (it was cut off with its delegate)"
    assert outer_keys[0] != keys[0], "the delegate's call is another call"


def test_outside_an_attempt_a_key_is_unique_to_the_call_and_stable_within_it_with_the_capability() -> None:
    keys: list[tuple[str, str]] = []

    def agent(*capabilities: Any) -> Agent[None, str]:
        made: Agent[None, str] = Agent(_asking(("send", {"to": "ops"}, "c1")), capabilities=list(capabilities))

        @made.tool_plain
        def send(to: str) -> str:
            keys.append((idempotency_key(), idempotency_key()))
            return "sent"

        return made

    durable = agent(DurableCapability())  # the capability, outside a durable attempt
    durable.run_sync("tell ops")
    durable.run_sync("tell ops")

    assert all(first == second and KEY.fullmatch(first) for first, second in keys), "stable within the call"
    assert len({first for first, _ in keys}) == 2, "every run's call has a key of its own"

    keys.clear()
    agent().run_sync("tell ops")  # no capability: no call is known, every key is new
    [(first, second)] = keys
    assert KEY.fullmatch(first) and KEY.fullmatch(second) and first != second


def test_outside_any_tool_call_every_key_is_new() -> None:
    first, second = idempotency_key(), idempotency_key()
    assert KEY.fullmatch(first) and KEY.fullmatch(second) and first != second


def test_a_live_tool_gets_a_key_per_try_without_a_warning(harness: DurableHarness) -> None:
    keys: list[str] = []
    agent = _sender(keys, kind="sync", cut_off_first=False, metadata=live_tool())

    _, _, first_log = harness.run(agent, "tell ops")
    _, _, second_log = harness.run(agent, "tell ops")  # the answer replays, with its run id and call id

    assert len(keys) == 2 and keys[0] != keys[1] and all(KEY.fullmatch(key) for key in keys)
    logs = first_log.at("warning") + second_log.at("warning")
    assert not [line for line in logs if "idempotency" in line], "a live tool has no step key by design: no warning"
