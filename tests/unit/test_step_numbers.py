"""One step numbering: the task log names each step by the number the view and ``cache show`` give it.

The log's ``step N: ...`` lines of every try are compared with the cache's listing (``CacheReader``, what the
view and the CLI number) after that try: same number, same kind, same name. Real agents (FunctionModel),
attempts as the operator makes them; a try that fails, a retry that replays, a changed prompt (the earlier
try's steps stay listed), a delegate, and steps that are never recorded.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, RecordingLog, tool_returns

from airflow_pydantic_ai.durable import CacheReader, DurableCapability, live_tool
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.numbering import StepNumbers

_STEP_LINE = re.compile(
    r"^Durable: step (\d+): (model|tool|output function) (\S+).*? (replayed from the cache|ran live|failed after)"
)
_KINDS = {"model": "model", "tool": "tool", "output function": "output"}

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh_counts():
    calls.clear()


def logged_steps(log: RecordingLog) -> dict[int, tuple[str, str, str]]:
    """``{number: (kind, name, what happened)}`` from the log's per-step lines."""
    steps: dict[int, tuple[str, str, str]] = {}
    for line in log.at("info"):
        match = _STEP_LINE.match(line)
        if match:
            number, kind, name, happened = match.groups()
            assert int(number) not in steps, f"two steps logged as step {number}: {line}"
            steps[int(number)] = (_KINDS[kind], name, happened)
    return steps


def listed_steps(harness: DurableHarness) -> dict[int, tuple[str, str]]:
    return {step.number: (step.kind, step.name) for step in CacheReader(harness.store()).steps()}


def assert_one_numbering(log: RecordingLog, harness: DurableHarness) -> dict[int, tuple[str, str, str]]:
    """Every step the try logged with a number that is in the cache now has that number in the listing."""
    logged, listed = logged_steps(log), listed_steps(harness)
    assert logged, log.texts()
    for number, (kind, name, happened) in logged.items():
        if happened == "failed after":
            assert number not in listed or listed[number][1] != name, (number, logged, listed)
            continue
        assert listed.get(number) == (kind, name), (number, logged, listed)
    return logged


def ticket_agent(*, flaky: dict[str, int]) -> Agent[None, str]:
    """Answer 1 asks for ``lookup`` and ``clock`` (a live tool) in parallel, answer 2 for ``file_ticket`` (fails
    while ``flaky`` says so), answer 3 is the text."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        answered = sum(isinstance(message, ModelResponse) for message in messages)
        prompt = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
        if answered == 0:
            return ModelResponse(
                parts=[ToolCallPart("lookup", {"q": prompt}, tool_call_id="a"), ToolCallPart("clock", {}, "b")]
            )
        if answered == 1:
            return ModelResponse(parts=[ToolCallPart("file_ticket", {"title": prompt}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart(f"done: {tool_returns(messages)[0].content}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="tickets")

    @agent.tool_plain
    def lookup(q: str) -> str:
        calls["lookup"] += 1
        return f"found {q}"

    @agent.tool_plain(metadata=live_tool())
    def clock() -> str:
        calls["clock"] += 1
        return "12:00"

    @agent.tool_plain
    def file_ticket(title: str) -> str:
        calls["file_ticket"] += 1
        if flaky["failures"] > 0:
            flaky["failures"] -= 1
            raise ConnectionError("ticket service down")
        return f"ticket {title}"

    return agent


def test_a_failed_try_and_its_retry_name_each_step_as_the_view_does(harness):
    agent = ticket_agent(flaky={"failures": 1})
    with pytest.raises(ConnectionError):
        harness.run(agent, "printer")
    first = assert_one_numbering(harness.logs[-1], harness)
    # model 1, lookup 2 (clock ran live and is never recorded: no number), model 3, file_ticket failed as step 4.
    assert first == {
        1: ("model", "function:function:model:", "ran live"),
        2: ("tool", "lookup", "ran live"),
        3: ("model", "function:function:model:", "ran live"),
        4: ("tool", "file_ticket", "failed after"),
    }
    assert any(line.startswith("Durable: tool clock (call b) ran live") for line in harness.logs[-1].at("info"))

    result, _run, log = harness.run(agent, "printer")
    assert result.output == "done: ticket printer"
    second = assert_one_numbering(log, harness)
    assert second == {
        1: ("model", "function:function:model:", "replayed from the cache"),
        2: ("tool", "lookup", "replayed from the cache"),
        3: ("model", "function:function:model:", "replayed from the cache"),
        4: ("tool", "file_ticket", "ran live"),  # the number its failure was logged under on try 1
        5: ("model", "function:function:model:", "ran live"),
    }
    assert calls["lookup"] == 1 and calls["clock"] == 2 and calls["file_ticket"] == 2


def test_a_changed_prompt_numbers_the_new_steps_after_the_earlier_tries_ones(harness):
    agent = ticket_agent(flaky={"failures": 1})
    with pytest.raises(ConnectionError):
        harness.run(agent, "printer")
    _result, _run, log = harness.run(agent, "laptop")  # another prompt: every step runs live
    logged = assert_one_numbering(log, harness)
    # Try 1's steps stay listed (and numbered): the new try's come after those of the same model step.
    assert logged[3] == ("model", "function:function:model:", "ran live")
    assert [number for number, (*_, happened) in sorted(logged.items())] == [3, 4, 6, 7, 8]
    assert len(listed_steps(harness)) == 3 + 5
    changed = [line for line in log.at("warning") if "differs from what attempt 1 recorded" in line]
    assert changed and changed[0].startswith("Durable: step 3: model function:function:model: differs")


def test_a_delegates_steps_are_numbered_as_the_view_lists_them(harness):
    flaky = {"failures": 1}

    def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["helper model"] += 1
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("check", {}, tool_call_id="h")])
        return ModelResponse(parts=[TextPart(f"helped: {tool_returns(messages)[0].content}")])

    helper: Agent[None, str] = Agent(FunctionModel(helper_model), name="helper", capabilities=[DurableCapability()])

    @helper.tool_plain
    def check() -> str:
        calls["check"] += 1
        return "ok"

    def outer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["outer model"] += 1
        answered = sum(isinstance(message, ModelResponse) for message in messages)
        if answered < 2:
            return ModelResponse(parts=[ToolCallPart("delegate", {"n": answered}, tool_call_id=f"d{answered}")])
        return ModelResponse(parts=[TextPart("done")])

    outer: Agent[None, str] = Agent(FunctionModel(outer_model), name="outer")

    @outer.tool
    async def delegate(ctx: RunContext[None], n: int) -> str:
        result = await helper.run(f"job {n}", usage=ctx.usage)
        if n == 1 and flaky["failures"]:
            flaky["failures"] -= 1
            raise ConnectionError("after the second delegation")
        return result.output

    with pytest.raises(ConnectionError):
        harness.run(outer, "go")
    first = assert_one_numbering(harness.logs[-1], harness)
    _result, _run, log = harness.run(outer, "go")
    second = assert_one_numbering(log, harness)
    # The first delegation's steps (2..4) come before the call that ran it (5), as the view lists them.
    kinds = [(number, kind, name) for number, (kind, name, _) in sorted(first.items())]
    assert kinds[:6] == [
        (1, "model", "function:function:outer_model:"),
        (2, "model", "function:function:helper_model:"),
        (3, "tool", "check"),
        (4, "model", "function:function:helper_model:"),
        (5, "tool", "delegate"),
        (6, "model", "function:function:outer_model:"),
    ]
    assert first[10] == ("tool", "delegate", "failed after")
    # The retry replays the first call (its delegate does not run again), and the second delegation's steps.
    assert [(number, happened) for number, (*_, happened) in sorted(second.items())][:6] == [
        (1, "replayed from the cache"),
        (5, "replayed from the cache"),
        (6, "replayed from the cache"),
        (7, "replayed from the cache"),
        (8, "replayed from the cache"),
        (9, "replayed from the cache"),
    ]
    assert second[10] == ("tool", "delegate", "ran live")
    assert calls["check"] == 2  # one per delegation: the retry replayed the first and the second's steps


def _entry(step: int, role: str, at: float, name: str, scope: dict[str, Any] | None = None) -> StepEntry:
    kind = "tool" if role in ("tool", "output") else role
    return StepEntry(
        kind=kind,  # type: ignore[arg-type]
        key=name,
        step=step,
        attempt=1,
        label=name,
        payload={},
        role=role,  # type: ignore[arg-type]
        recorded_at=at,
        scope=scope,
    )


def test_step_numbers_agree_with_the_listing_as_entries_come_and_go():
    model1, tool1, model2 = _entry(1, "model", 1.0, "m1"), _entry(1, "tool", 2.0, "t1"), _entry(2, "model", 3.0, "m2")
    numbers = StepNumbers([model2, model1])
    assert (numbers.number(model1), numbers.number(model2)) == (1, 2)
    assert numbers.number(tool1) == 2  # where it would be listed if written now
    numbers.add(tool1)
    assert [numbers.number(entry) for entry in (model1, tool1, model2)] == [1, 2, 3]
    later = _entry(1, "tool", 9.0, "t1")  # the same entry written again later sorts after the first's tools
    assert numbers.number(later) == 2
    numbers.discard("tool-t1.json")
    assert numbers.number(model2) == 2
    # A nested run's steps are listed before the call that started it (the full ordering is used).
    nested = _entry(1, "model", 4.0, "n1", scope={"parent": "t1", "index": 0, "at": 1, "agent": "helper"})
    numbers.add(tool1)
    assert numbers.number(nested) == 2
    numbers.add(nested)
    assert [numbers.number(entry) for entry in (model1, nested, tool1, model2)] == [1, 2, 3, 4]


def test_a_call_that_fails_while_a_sibling_still_runs_is_numbered_after_it(harness):
    """Parallel calls of one answer: ``broken`` fails while ``slow`` (a sync tool in its thread) still runs, and
    ``slow`` is recorded after. The failure is named by the number the retry names it by (after ``slow``), not by
    the number ``slow`` then takes: the CI run that found it logged "step 2" for both."""
    import threading

    broken_raised = threading.Event()
    flaky = {"failures": 1}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("slow", {}, "s"), ToolCallPart("broken", {}, "b")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="siblings")

    @agent.tool_plain
    def slow() -> str:
        calls["slow"] += 1
        broken_raised.wait(timeout=10)  # still running when its sibling fails
        return "slow result"

    @agent.tool_plain
    async def broken() -> str:
        calls["broken"] += 1
        if flaky["failures"]:
            flaky["failures"] -= 1
            broken_raised.set()
            raise ConnectionError("down")
        return "fixed"

    with pytest.raises(ConnectionError):
        harness.run(agent, "go")
    first = assert_one_numbering(harness.logs[-1], harness)
    assert first == {
        1: ("model", "function:function:model:", "ran live"),
        2: ("tool", "slow", "ran live"),
        3: ("tool", "broken", "failed after"),
    }
    _result, _run, log = harness.run(agent, "go")
    second = assert_one_numbering(log, harness)
    assert second[3] == ("tool", "broken", "ran live") and second[2][2] == "replayed from the cache"
    assert calls["slow"] == 1 and calls["broken"] == 2
