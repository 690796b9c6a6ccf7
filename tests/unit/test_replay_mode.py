"""durable_mode = replay on the engine: a fixture replays with no live call; a miss fails before any live call
and names what changed; tools replay their recorded results unless named live. Fixtures: run-id free, masked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.durable import DurableHarness, task_identity

from airflow_pydantic_ai.durable import CacheReader, DurableConfigError
from airflow_pydantic_ai.durable.attempt.opening import Recording
from airflow_pydantic_ai.durable.attempt.replay_policy import ReplayMiss, ReplayPolicy, check_mode
from airflow_pydantic_ai.durable.storage.fixtures import FixtureError, fixture_path, read_fixture, write_fixture

SECRET = "hunter2-very-secret"


def _mask(text: str) -> str:
    return text.replace(SECRET, "***")


@dataclass
class Counts:
    model: int = 0
    tools: list[str] = field(default_factory=list)


def _agent(counts: Counts, *, instructions: str = "You triage tickets.", tool_doc: str = "", output: Any = str):
    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        counts.model += 1
        if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[ToolCallPart("fetch_ticket", {"ticket_id": 42}, tool_call_id="c1")])
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"title": "done"}, tool_call_id="o")])
        return ModelResponse(parts=[TextPart("Ticket 42: login page times out")])

    def fetch_ticket(ticket_id: int) -> dict[str, Any]:
        counts.tools.append("fetch_ticket")
        return {"id": ticket_id, "title": "Login page times out"}

    fetch_ticket.__doc__ = tool_doc or "Fetch a support ticket."
    return Agent(
        FunctionModel(scripted, model_name="scripted"),
        instructions=instructions,
        toolsets=[FunctionToolset([fetch_ticket])],
        output_type=output,
        name="triage_agent",
    )


def _record_fixture(tmp_path, prompt: str = "Triage ticket 42.") -> Any:
    """Record one run (auto mode) and write it as a fixture; returns the fixture folder."""
    harness = DurableHarness(str(tmp_path / "cache"), identity=task_identity(run_id="manual__recorded"))
    result, run, _ = harness.run(_agent(Counts()), prompt)
    assert result.output == "Ticket 42: login page times out"
    folder = tmp_path / "fixtures"
    write_fixture(folder, harness.identity, CacheReader(run.store).entries(), mask=_mask)
    return folder


def _replay(tmp_path, folder, agent: Agent[Any, Any], prompt: str = "Triage ticket 42.", **policy: Any):
    """One attempt of another DAG run in replay mode, from the fixture in ``folder``."""
    harness = DurableHarness(str(tmp_path / "other"), identity=task_identity(run_id="scheduled__other"))
    fixture = read_fixture(folder, "dag", "task")
    source = f"the fixture {fixture.path}"
    run, log = harness.open(
        policy=ReplayPolicy(mode="replay", mask=_mask, source=source, **policy),
        recording=Recording(fixture.entries, source),
    )
    from airflow_pydantic_ai.durable import run_agent

    with run.ending():
        result = run_agent(run, agent, prompt)
    return result, run, log


def test_replay_from_a_fixture_of_another_run_calls_nothing_live(tmp_path):
    folder = _record_fixture(tmp_path)
    counts = Counts()
    result, _, log = _replay(tmp_path, folder, _agent(counts))
    assert result.output == "Ticket 42: login page times out"
    assert counts == Counts(model=0, tools=[])
    assert log.summary() == "Durable: replayed 3 cached steps (2 model, 1 tool), executed 0 new steps (0 model, 0 tool)"


def _miss(tmp_path, folder, agent: Agent[Any, Any], prompt: str = "Triage ticket 42.", changed: bool = True) -> str:
    with pytest.raises(ReplayMiss) as caught:
        _replay(tmp_path, folder, agent, prompt)
    assert caught.value.changed is changed
    return str(caught.value)


def test_a_changed_prompt_fails_before_the_model_is_called_and_shows_the_diff_masked(tmp_path):
    folder = _record_fixture(tmp_path, prompt=f"Triage ticket 42. Token {SECRET}.")
    counts = Counts()
    message = _miss(tmp_path, folder, _agent(counts), prompt=f"Triage ticket 42 urgently. Token {SECRET}.")
    assert counts == Counts(model=0, tools=[])
    assert message.startswith("model step 1 (function:scripted) of agent 'triage_agent' does not match the fixture ")
    assert "changed: user prompt." in message
    assert "--- recorded user prompt\n+++ current user prompt" in message
    assert "-Triage ticket 42. Token ***." in message
    assert "+Triage ticket 42 urgently. Token ***." in message
    assert SECRET not in message
    assert SECRET not in fixture_path(folder, "task").read_text()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"instructions": "You triage tickets politely."}, "instructions/system prompt"),
        ({"tool_doc": "Fetch a ticket from the new API."}, "tool definitions (~fetch_ticket)"),
        ({"output": BaseModel}, "output schema"),
    ],
)
def test_each_changed_component_is_named(tmp_path, change, named):
    folder = _record_fixture(tmp_path)

    class Summary(BaseModel):
        title: str

    if change.get("output") is BaseModel:
        change = {"output": Summary}
    counts = Counts()
    message = _miss(tmp_path, folder, _agent(counts, **change))
    assert counts == Counts(model=0, tools=[])
    assert f"changed: {named}." in message
    if "instructions" in change:
        assert "-You triage tickets.\n+You triage tickets politely." in message


def test_a_changed_model_is_named(tmp_path):
    folder = _record_fixture(tmp_path)
    counts = Counts()
    agent = _agent(counts)
    agent.model = FunctionModel(agent.model.function, model_name="scripted-v2")  # type: ignore[union-attr]
    message = _miss(tmp_path, folder, agent)
    assert counts.model == 0
    assert "model step 1 (function:scripted-v2)" in message
    assert "changed: model." in message


def test_a_tool_call_missing_from_the_fixture_fails_before_the_tool_runs(tmp_path):
    folder = _record_fixture(tmp_path)
    path = fixture_path(folder, "task")
    body = json.loads(path.read_text())
    body["steps"] = [step for step in body["steps"] if step["kind"] != "tool"]
    path.write_text(json.dumps(body))
    counts = Counts()
    message = _miss(tmp_path, folder, _agent(counts))
    assert counts.tools == []
    assert message.startswith("tool fetch_ticket (call c1) (after model step 1) has no recorded result in the fixture ")
    assert "durable_live_tools" in message


def test_a_recording_that_ends_early_is_a_miss_but_not_a_change(tmp_path):
    """A failed run's cache: what it holds replays; the step after its end is where a retry would go live."""
    folder = _record_fixture(tmp_path)
    path = fixture_path(folder, "task")
    body = json.loads(path.read_text())
    body["steps"] = [step for step in body["steps"] if step["step"] == 1]
    path.write_text(json.dumps(body))
    counts = Counts()
    message = _miss(tmp_path, folder, _agent(counts), changed=False)
    assert counts == Counts(model=0, tools=[])
    assert "model step 2 (function:scripted) of agent 'triage_agent' is not in the fixture " in message
    assert "the recording ends before this step" in message


def test_a_tool_named_live_runs_in_replay_mode(tmp_path):
    folder = _record_fixture(tmp_path)
    counts = Counts()
    result, _, log = _replay(tmp_path, folder, _agent(counts), live_tools=frozenset({"fetch_ticket"}))
    assert result.output == "Ticket 42: login page times out"
    assert counts == Counts(model=0, tools=["fetch_ticket"])
    assert log.summary() == "Durable: replayed 2 cached steps (2 model, 0 tool), executed 1 new steps (0 model, 1 tool)"


def test_auto_mode_runs_a_changed_step_live(tmp_path):
    folder = _record_fixture(tmp_path)
    counts = Counts()
    harness = DurableHarness(str(tmp_path / "other"), identity=task_identity(run_id="scheduled__other"))
    run, log = harness.open(
        policy=ReplayPolicy(source="the fixture"),
        recording=Recording(read_fixture(folder, "dag", "task").entries, "the fixture"),
    )
    from airflow_pydantic_ai.durable import run_agent

    with run.ending():
        result = run_agent(run, _agent(counts), "Triage ticket 42 now.")
    assert result.output == "Ticket 42: login page times out"
    assert counts.model == 2
    assert any("changed: user prompt" in line for line in log.at("warning"))


def test_a_fixture_holds_no_run_id_and_is_rewritten_byte_for_byte(tmp_path):
    folder = _record_fixture(tmp_path)
    first = fixture_path(folder, "task").read_bytes()
    assert b"manual__recorded" not in first
    body = json.loads(first)
    assert (body["dag_id"], body["task_id"], body["map_index"]) == ("dag", "task", -1)
    assert [step["kind"] for step in body["steps"]] == ["model", "tool", "model"]
    assert all("recorded_at" not in step and "owner" not in step for step in body["steps"])
    fixture = read_fixture(folder, "dag", "task")
    write_fixture(folder, task_identity(run_id="another"), fixture.entries.values(), mask=_mask)
    assert fixture_path(folder, "task").read_bytes() == first


def test_a_fixture_of_another_task_or_none_at_all_is_refused(tmp_path):
    folder = _record_fixture(tmp_path)
    with pytest.raises(FixtureError, match="was recorded for"):
        read_fixture(folder, "other_dag", "task")
    with pytest.raises(FixtureError, match="no fixture for task 'missing'"):
        read_fixture(folder, "dag", "missing")


@pytest.mark.parametrize("value", ["auto", "replay", "record", "off", " Replay "])
def test_known_modes_are_accepted(value):
    assert check_mode(value, "[pydantic_ai] durable_mode") == value.strip().lower()


def test_an_unknown_mode_names_the_option_and_the_allowed_values():
    with pytest.raises(DurableConfigError) as caught:
        check_mode("replays", "[pydantic_ai] durable_mode")
    assert str(caught.value) == "[pydantic_ai] durable_mode 'replays' is not one of auto, replay, record, off"


def test_a_decision_nobody_recorded_fails_the_replay_instead_of_asking_a_person(tmp_path):
    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 10}, tool_call_id="r1")])
        return ModelResponse(parts=[TextPart("refunded")])

    refunds: list[int] = []
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        refunds.append(amount)
        return "ok"

    agent = Agent(FunctionModel(scripted, model_name="scripted"), toolsets=[toolset])
    harness = DurableHarness(str(tmp_path / "cache"))
    waiting, _, _ = harness.run(agent, "Refund the customer.")
    assert type(waiting).__name__ == "WaitingForDecisions"

    replay, _ = harness.open(policy=ReplayPolicy(mode="replay"))
    from airflow_pydantic_ai.durable import run_agent

    with pytest.raises(ReplayMiss) as caught:
        run_agent(replay, agent, "Refund the customer.")
    assert str(caught.value).startswith(
        "the call refund (call r1) needs approval and the durable cache holds no decision"
    )
    assert refunds == []


def _delegating_agent(counts: Counts, helper_instructions: str) -> Agent[Any, Any]:
    """A main agent whose tool delegates to a helper agent (durable through its own DurableCapability)."""
    from airflow_pydantic_ai.durable import DurableCapability

    def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        counts.model += 1
        return ModelResponse(parts=[TextPart("the customer is on the enterprise plan")])

    helper = Agent(
        FunctionModel(helper_model, model_name="helper-model"),
        instructions=helper_instructions,
        name="helper",
        capabilities=[DurableCapability()],
    )

    async def ask_helper(question: str) -> str:
        counts.tools.append("ask_helper")
        return (await helper.run(question)).output

    def main_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        counts.model += 1
        if not any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[ToolCallPart("ask_helper", {"question": "Which plan?"}, tool_call_id="h1")])
        return ModelResponse(parts=[TextPart("Enterprise ticket")])

    return Agent(FunctionModel(main_model, model_name="main"), toolsets=[FunctionToolset([ask_helper])], name="main")


def test_a_delegate_replays_from_the_fixture_and_a_change_in_it_names_that_agent(tmp_path):
    recorder = DurableHarness(str(tmp_path / "cache"), identity=task_identity(run_id="manual__recorded"))
    result, run, _ = recorder.run(_delegating_agent(Counts(), "Answer briefly."), "Triage ticket 42.")
    assert result.output == "Enterprise ticket"
    folder = tmp_path / "fixtures"
    write_fixture(folder, recorder.identity, CacheReader(run.store).entries(), mask=_mask)
    assert '"scope"' in fixture_path(folder, "task").read_text()

    counts = Counts()
    replayed, _, log = _replay(tmp_path, folder, _delegating_agent(counts, "Answer briefly."))
    assert replayed.output == "Enterprise ticket"
    assert counts == Counts(model=0, tools=[])  # the delegating tool replays: the helper does not even run
    assert log.summary() == "Durable: replayed 3 cached steps (2 model, 1 tool), executed 0 new steps (0 model, 0 tool)"

    # With the delegating tool live, the helper runs, and its own steps replay from the fixture.
    counts = Counts()
    live = frozenset({"ask_helper"})
    replayed, _, log = _replay(tmp_path, folder, _delegating_agent(counts, "Answer briefly."), live_tools=live)
    assert replayed.output == "Enterprise ticket"
    assert counts == Counts(model=0, tools=["ask_helper"])
    assert log.summary() == "Durable: replayed 3 cached steps (3 model, 0 tool), executed 1 new steps (0 model, 1 tool)"

    counts = Counts()
    with pytest.raises(ReplayMiss) as caught:
        _replay(tmp_path, folder, _delegating_agent(counts, "Answer in one word."), live_tools=live)
    assert str(caught.value).startswith("model step 1 (function:helper-model) of agent 'helper' does not match")
    assert "changed: instructions/system prompt." in str(caught.value)
    assert "-Answer briefly.\n+Answer in one word." in str(caught.value)
    assert counts.model == 0
