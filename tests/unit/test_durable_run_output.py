"""The output step: output functions and output validators replay and never repeat a side effect, and the
function is blamed only when it failed itself; the recorded output holds no secret and only a retry
takes it.

The durable package on its own: real pydantic-ai agents, a real local filesystem, no Airflow run.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.durable import Attempt, AttemptOptions


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
def test_output_function_side_effects_are_replayed_not_repeated(harness, form):
    from pydantic_ai import TextOutput, ToolOutput

    tickets: list[str] = []

    def file_ticket(title: str) -> str:
        """File a ticket: a side effect that must not happen twice."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    output_type: Any = {
        "function": file_ticket,
        "tool-output": ToolOutput(file_ticket, name="file_ticket"),
        "text-output": TextOutput(file_ticket),
    }[form]
    model = TestModel(custom_output_text="login broken") if form == "text-output" else TestModel()
    agent: Agent[Any, str] = Agent(model, output_type=output_type)
    first, _, _ = harness.run(agent, "file it")
    second, run, log = harness.run(agent, "file it")
    assert second.output == first.output == "TICKET-1"
    assert len(tickets) == 1, "the output function ran again"
    assert run.stats.executed.total == 0 and run.stats.replayed.tool == 1
    assert any("output function file_ticket" in line and "replayed" in line for line in log.at("info"))


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
def test_output_function_asking_for_a_retry_replays_the_same_path(harness, form):
    from pydantic_ai import TextOutput, ToolOutput

    calls: list[str] = []

    def finish(text: str) -> str:
        calls.append(text)
        if text == "draft":
            raise ModelRetry("not a draft")
        return f"published {text}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = "draft" if len(messages) == 1 else "final"
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"text": text}, tool_call_id=text)])
        return ModelResponse(parts=[TextPart(text)])

    output_type: Any = {"function": finish, "tool-output": ToolOutput(finish), "text-output": TextOutput(finish)}[form]
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)
    first, _, _ = harness.run(agent, "publish")
    second, run, _ = harness.run(agent, "publish")
    assert second.output == first.output == "published final"
    assert calls == ["draft", "final"], "both calls replayed: the retry and the accepted one"
    assert run.stats.executed.total == 0


@pytest.mark.parametrize("form", ["function", "tool-output", "text-output"])
@pytest.mark.parametrize("validators", [1, 2])
def test_an_output_validator_failing_after_the_function_returned_does_not_run_the_function_again(
    harness, form, validators
):
    """pydantic-ai runs output validators inside the output step, after the output function: a validator
    that fails (I/O, as in pydantic-ai's SQL example) must not make a retry file the ticket again, and it
    runs again on the retry on what the function returned."""
    from pydantic_ai import RunContext, TextOutput, ToolOutput

    tickets: list[str] = []
    checked: list[tuple[str, str]] = []
    outage = {"left": 1}

    def file_ticket(title: str) -> str:
        """File a ticket: a side effect that must not happen twice."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"title": "login broken"}, "c1")])
        return ModelResponse(parts=[TextPart("login broken")])

    output_type: Any = {
        "function": file_ticket,
        "tool-output": ToolOutput(file_ticket, name="file_ticket"),
        "text-output": TextOutput(file_ticket),
    }[form]
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)

    if validators == 2:

        @agent.output_validator
        def tag(output: str) -> str:
            checked.append(("tag", output))
            return f"{output} [triaged]"

    @agent.output_validator
    async def link_ticket(ctx: RunContext[Any], output: str) -> str:
        checked.append(("link", output))
        if outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent, "file it")
    first = harness.logs[-1]
    result, run, log = harness.run(agent, "file it")

    assert tickets == ["login broken"], "the output function ran again on the retry"
    expected = "TICKET-1 [triaged]" if validators == 2 else "TICKET-1"
    assert result.output == expected
    assert [call for call in checked if call[0] == "link"] == [("link", expected)] * 2, checked
    assert (run.stats.replayed.model, run.stats.replayed.tool, run.stats.executed.total) == (1, 1, 0)
    blamed = [line for line in first.at("info") if "file_ticket" in line and "failed" in line]
    assert blamed and all("output validator link_ticket failed" in line for line in blamed), first.at("info")
    assert not any("it is not cached" in line for line in first.at("info"))
    assert any("replayed from the cache; output validator link_ticket" in line for line in log.at("info"))
    assert not first.at("warning") and not log.at("warning")


@pytest.mark.parametrize("form", ["tool-output", "text-output"])
@pytest.mark.parametrize("raiser", ["function", "validator-of-an-agent-the-function-runs"])
def test_an_output_function_that_raised_itself_is_blamed_and_runs_again(harness, form, raiser):
    """Only a validator of this run failing after the function returned keeps its result: the function's own
    exception, even one out of a validator of another agent it runs, leaves nothing recorded."""
    from pydantic_ai import TextOutput, ToolOutput

    tickets: list[str] = []
    outage = {"left": 1}
    tracker: Agent[Any, str] = Agent(TestModel(custom_output_text="ok"))

    @tracker.output_validator
    def tracker_reachable(output: str) -> str:
        if outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        return output

    async def file_ticket(title: str) -> str:
        """File a ticket."""
        tickets.append(title)
        if raiser == "function" and outage["left"]:
            outage["left"] -= 1
            raise ConnectionError("tracker API down")
        if raiser != "function":
            await tracker.run("file it")
        return f"TICKET-{len(tickets)}"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"title": "login broken"}, "c1")])
        return ModelResponse(parts=[TextPart("login broken")])

    output_type: Any = ToolOutput(file_ticket, name="file_ticket") if form == "tool-output" else TextOutput(file_ticket)
    agent: Agent[Any, str] = Agent(FunctionModel(model), output_type=output_type)

    @agent.output_validator
    def passes(output: str) -> str:
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent, "file it")
    first = harness.logs[-1]
    result, _run, _log = harness.run(agent, "file it")
    assert result.output == "TICKET-2" and len(tickets) == 2
    assert any("output function file_ticket" in line and "failed after" in line for line in first.at("info"))
    assert not any("output validator" in line for line in first.at("info"))


def test_a_result_recorded_before_a_validator_that_is_gone_is_not_handed_back_unvalidated(harness):
    """The entry says which validator failed on the recorded result: when the next try's agent has other
    validators, the recorded result could skip one, so the output function runs live again (with a warning)."""
    from pydantic_ai import ToolOutput

    tickets: list[str] = []

    def file_ticket(title: str) -> str:
        """File a ticket."""
        tickets.append(title)
        return f"TICKET-{len(tickets)}"

    def agent_checking_with(check: Any) -> Agent[Any, str]:
        agent: Agent[Any, str] = Agent(TestModel(), output_type=ToolOutput(file_ticket, name="file_ticket"))
        agent.output_validator(check)
        return agent

    def link_ticket(output: str) -> str:
        raise ConnectionError("tracker API down")

    def check_ticket(output: str) -> str:
        return output

    with pytest.raises(ConnectionError):
        harness.run(agent_checking_with(link_ticket), "file it")
    result, _run, log = harness.run(agent_checking_with(check_ticket), "file it")
    assert result.output == "TICKET-2" and len(tickets) == 2
    assert any("output validator link_ticket failed on its result" in line for line in log.at("warning"))


def test_an_output_holding_a_secret_is_not_recorded(tmp_path):
    """The result entry follows the rule of every step: a registered secret is never stored; a retry
    then replays the steps instead of returning the output."""
    from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY

    log = RecordingLog()
    store = local_store(tmp_path / "cache", task_identity("d", "t", run_id="r"))
    secret = "hunter2-s3cr3t"
    run = Attempt.open(
        store, attempt=1, log=log, options=AttemptOptions(redact=lambda text: text.replace(secret, "***"))
    )
    run.record_output(f"the password is {secret}")
    assert RESULT_ENTRY not in store.load().entries
    warnings = log.at("warning")
    assert any("registered as secret" in text and "replays the steps" in text for text in warnings), warnings
    run.record_output("nothing to hide")
    retry = Attempt.open(store, attempt=2, log=log)
    recorded = retry.recorded_output()
    assert recorded is not None and (recorded.value, recorded.attempt) == ("nothing to hide", 1)
    # The first try after a clear (or of a DAG run) never takes it: a clear asks for a new run.
    cleared = Attempt.open(store, attempt=2, log=log, options=AttemptOptions(takes_recorded_output=False))
    assert cleared.recorded_output() is None
    assert any("first try since the DAG run started or the task was cleared" in text for text in log.at("warning"))


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "is_retry"),
    [
        (1, 2, 2, False),  # the first try of a DAG run
        (2, 2, 2, True),  # Airflow's retry
        (3, 2, 2, True),
        (3, 4, 2, False),  # the first try after a clear of try 2 (max_tries = 2 + retries)
        (4, 4, 2, True),  # a retry after that clear
        (2, 1, 0, False),  # retries=0: a second try can only come from a clear
    ],
)
def test_only_a_retry_takes_a_recorded_output(try_number, max_tries, retries, is_retry):
    from types import SimpleNamespace

    from airflow_pydantic_ai.tries.which_try import retries_an_earlier_try

    ti = SimpleNamespace(try_number=try_number, max_tries=max_tries, task=SimpleNamespace(retries=retries))
    assert retries_an_earlier_try(ti) is is_retry
