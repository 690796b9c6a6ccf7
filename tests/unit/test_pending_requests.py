"""Issue 38: a batched model request is a step. Its submission (the suspended response with the batch's ticket) is
recorded before the wait; a later try picks up the same batch instead of submitting again; checks are no steps;
the result is the step's response, replayed like any other. pydantic-ai's in-memory batch API (``FunctionModel``)
stands for the provider's."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.compat import requires_pydantic_ai
from tests.helpers.durable import DurableHarness, stored_entries, tool_returns

from airflow_pydantic_ai.durable import PendingTicket, RequestPending
from airflow_pydantic_ai.durable.steps.pending_step import check_pending

pytestmark = requires_pydantic_ai("2.78", "BatchModelRequests")


class CountingBatches(FunctionModel):
    """A FunctionModel whose in-memory batch API counts the batches created (``batches``); ``hold`` keeps a
    created batch ``in_progress`` for that many status checks (the provider still working)."""

    def __init__(self, function: Any, hold: int = 0) -> None:
        super().__init__(function)
        self.batches = 0
        self.hold = hold
        self.checks = Counter[str]()

    async def batch_create(self, requests: Any) -> Any:
        from dataclasses import replace

        self.batches += 1
        created = await super().batch_create(requests)
        return replace(created, status="in_progress") if self.hold else created

    async def batch_cancel(self, batch: Any) -> Any:
        self.checks["cancelled"] += 1
        return await super().batch_cancel(batch)

    async def batch_status(self, batch: Any) -> Any:
        from dataclasses import replace

        ended = await super().batch_status(batch)
        self.checks[batch.id] += 1
        if self.checks[batch.id] <= self.hold:
            return replace(ended, status="in_progress")
        return ended


def _answers(calls: Counter[str]) -> Any:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if not tool_returns(messages):
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, "a")])
        return ModelResponse(parts=[TextPart(f"done: {tool_returns(messages)[0].content}")])

    return answer


def _batching() -> Any:
    from pydantic_ai.capabilities import BatchModelRequests

    return BatchModelRequests(max_wait=timedelta(milliseconds=1), poll_interval=timedelta(milliseconds=1))


def _agent(model: CountingBatches, calls: Counter[str], *capabilities: Any) -> Agent[None, str]:
    agent = Agent(model, name="nightly", capabilities=[*capabilities, _batching()])

    @agent.tool_plain
    def lookup(q: str) -> str:
        calls["lookup"] += 1
        return f"found {q}"

    return agent


def _deferred(harness: DurableHarness, agent: Agent[None, str]) -> list[PendingTicket]:
    """One try with ``defer_pending``: it stops with ``RequestPending`` (a try that waits, not one that failed)."""
    from airflow_pydantic_ai.durable import run_agent

    run, log = harness.open(defer_pending=True)
    with pytest.raises(RequestPending) as stopped, run.ending(waits=lambda error: isinstance(error, RequestPending)):
        run_agent(run, agent, "go")
    assert run.end.outcome == "waiting"
    # The report line says whom the try waits for: the provider, not a person.
    assert any(f"try {run.try_number} stopped to wait for the provider;" in line for line in log.texts), log.texts
    return stopped.value.tickets


def test_a_batched_run_records_each_request_and_a_retry_replays_without_a_batch(tmp_path: Any) -> None:
    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=3)
    harness = DurableHarness(str(tmp_path))
    result, _, log = harness.run(_agent(model, calls), "go")
    assert result.output == "done: found x"
    assert model.batches == 2
    assert model.checks.total() == 8  # checks of each batch until it ended: none is a step
    names = sorted(stored_entries(harness.root))
    assert sum(name.startswith("model-") for name in names) == 2, names
    assert sum(name.startswith("pending-") for name in names) == 2, names
    assert "executed 3 new steps (2 model, 1 tool)" in log.summary(), log.summary()

    result, _, log = harness.run(_agent(model, calls), "go")
    assert result.output == "done: found x"
    assert model.batches == 2  # nothing submitted again
    assert calls["lookup"] == 1
    assert "replayed 3" in log.summary(), log.summary()


def test_with_defer_pending_the_run_stops_after_the_submission_and_the_next_try_collects_the_same_batch(
    tmp_path: Any,
) -> None:
    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=1)
    harness = DurableHarness(str(tmp_path))
    (ticket,) = _deferred(harness, _agent(model, calls))
    assert model.batches == 1
    assert model.checks["cancelled"] == 0  # pydantic-ai leaves the batch running for the next try
    assert ticket.kind == "batch" and ticket.job_id.startswith("batch_")
    again = PendingTicket.from_payload(ticket.to_payload())
    assert again == ticket
    assert asyncio.run(check_pending(model, again)).state == "pending"  # the provider still works on it
    assert asyncio.run(again.check(model)).state == "ready"

    (second,) = _deferred(harness, _agent(model, calls))
    assert any("picking up batch " + ticket.job_id in line for line in harness.logs[-1].texts)
    assert model.batches == 2  # the first batch collected, the second request submitted
    assert calls["lookup"] == 1
    assert second.job_id != ticket.job_id and second.step == 3
    assert model.checks["cancelled"] == 0  # deferred after a check too: still running
    assert asyncio.run(second.check(model)).state == "pending"

    result, _, _ = harness.run(_agent(model, calls), "go", run_options={"defer_pending": True})
    assert result.output == "done: found x"
    assert model.batches == 2
    assert calls["lookup"] == 1


class Killed(BaseException):
    """Stands for a SIGKILL at a kill point (the try ends there, with no ``ending``: its entries stay single)."""


POINTS = ["before-submission", "after-submission", "during-wait", "during-download", "after-result"]


class KilledAt(CountingBatches):
    """``CountingBatches`` that dies once at ``point`` of the first request (the in-process kill table; the real
    one, with the provider SDKs and SIGKILL, is ``tests/system/test_batch_kills.py``)."""

    def __init__(self, function: Any, point: str) -> None:
        super().__init__(function, hold=1)
        self.point = point

    def die(self, point: str) -> None:
        if self.point == point:
            self.point = ""
            raise Killed(point)

    async def batch_status(self, batch: Any) -> Any:
        self.die("during-wait")
        return await super().batch_status(batch)

    async def batch_results(self, batch: Any) -> Any:
        self.die("during-download")
        return await super().batch_results(batch)


@pytest.mark.parametrize("point", POINTS)
def test_a_try_killed_at_any_point_of_a_batched_request_submits_each_request_once_over_all_tries(
    tmp_path: Any, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.durable.steps import model_step, pending_step

    calls: Counter[str] = Counter()
    model = KilledAt(_answers(calls), point)
    submitted = pending_step.PendingRequest.submitted.__func__  # type: ignore[attr-defined]
    record = model_step.ModelStep.record
    before_live = model_step.ModelStep.before_live

    def killed_before_live(self: Any) -> None:
        model.die("before-submission")  # the request is about to be sent (a pool task submits it: die here)
        before_live(self)

    def submitted_then_killed(cls: Any, *args: Any, **kwargs: Any) -> Any:
        pending = submitted(cls, *args, **kwargs)
        model.die("after-submission")
        return pending

    def recorded_then_killed(self: Any, *args: Any, **kwargs: Any) -> None:
        record(self, *args, **kwargs)
        model.die("after-result")

    monkeypatch.setattr(pending_step.PendingRequest, "submitted", classmethod(submitted_then_killed))
    monkeypatch.setattr(model_step.ModelStep, "record", recorded_then_killed)
    monkeypatch.setattr(model_step.ModelStep, "before_live", killed_before_live)
    harness = DurableHarness(str(tmp_path))
    with pytest.raises(Killed):
        harness.run(_agent(model, calls), "go", killed=True)
    result, _, log = harness.run(_agent(model, calls), "go")
    assert result.output == "done: found x"
    assert model.batches == 2, log.texts  # one batch per model request, over both tries
    assert calls["lookup"] == 1
    picked_up = any("picking up batch" in line for line in log.texts)
    assert picked_up == (point in ("after-submission", "during-wait", "during-download")), log.texts


def test_a_streamed_batched_run_is_recorded_as_the_plain_one_is(tmp_path: Any) -> None:
    from airflow_pydantic_ai.durable import DurableCapability
    from airflow_pydantic_ai.durable.attempt.nesting import attempt_scope

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=2)
    harness = DurableHarness(str(tmp_path))
    agent = _agent(model, calls, DurableCapability())

    async def streamed() -> str:
        async with agent.run_stream("go") as stream:
            return await stream.get_output()

    for _ in range(2):
        run, log = harness.open()
        with run.ending(), attempt_scope(run, root_claims=True):
            assert asyncio.run(streamed()) == "done: found x"
    names = sorted(stored_entries(harness.root))
    assert [name.split("-")[0] for name in names].count("model") == 2, names
    assert model.batches == 2 and calls["lookup"] == 1
    assert "replayed 3 cached steps" in log.summary(), log.summary()


class Expiring(CountingBatches):
    """Every batch expires without running its requests; the second batch's first status check is a kill."""

    def __init__(self, function: Any) -> None:
        super().__init__(function)
        self.kill_on_check_of = 2

    async def batch_status(self, batch: Any) -> Any:
        if self.batches == self.kill_on_check_of:
            self.kill_on_check_of = 0
            raise Killed("during the wait for the resubmitted batch")
        return await super().batch_status(batch)

    async def batch_results(self, batch: Any) -> Any:
        from pydantic_ai.models.batch import BatchResult

        results = await super().batch_results(batch)
        return [BatchResult(custom_id=result.custom_id, status="expired") for result in results]


def test_pydantic_ais_resubmissions_count_across_tries(tmp_path: Any) -> None:
    from pydantic_ai.capabilities import BatchModelRequests
    from pydantic_ai.exceptions import ModelAPIError

    calls: Counter[str] = Counter()
    model = Expiring(_answers(calls))
    harness = DurableHarness(str(tmp_path))
    batching = BatchModelRequests(
        max_wait=timedelta(milliseconds=1), poll_interval=timedelta(milliseconds=1), max_resubmissions=1
    )
    agent = Agent(model, name="nightly", capabilities=[batching])
    with pytest.raises(Killed):
        harness.run(agent, "go", killed=True)
    assert model.batches == 2  # the first batch expired, pydantic-ai submitted the request again
    assert any("submitted again by pydantic-ai (1 of its resubmissions)" in line for line in harness.logs[-1].texts)
    with pytest.raises(ModelAPIError, match="expired"):
        harness.run(agent, "go")
    assert model.batches == 2  # the retry waited for the resubmitted batch, and max_resubmissions=1 was used up
    assert any("picking up batch" in line and "submitted again 1x" in line for line in harness.logs[-1].texts)


def test_the_summary_counts_a_batched_request_with_its_batch_price_and_what_it_saved(tmp_path: Any) -> None:
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    def priced(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart("ok")],
            usage=RequestUsage(input_tokens=1_000_000, output_tokens=0),
            model_name="claude-sonnet-4-5",
            provider_name="anthropic",
        )

    class Priced(CountingBatches):
        def batch_decode(self, result: Any, request: Any) -> ModelResponse:
            response = super().batch_decode(result, request)
            # As pydantic-ai's provider codecs mark a batch result (``_batch_codec``): genai-prices' batch rate.
            response.provider_details = {**(response.provider_details or {}), "processing": "batch"}
            response.model_name, response.provider_name = "claude-sonnet-4-5", "anthropic"  # a priced model
            return response

    model = Priced(priced)
    assert isinstance(model, FunctionModel)
    harness = DurableHarness(str(tmp_path))
    _, run, log = harness.run(Agent(model, capabilities=[_batching()]), "go")
    line = next(text for text in log.at("info") if text.startswith("Durable: try 1"))
    # genai-prices' data for claude-sonnet-4-5: $6.00 for a million input tokens, half of it in a batch.
    assert "live: 1 model request (1 batched, the batch price saved ~$3.00), 1,000,000 tokens" in line, line
    assert line.endswith("0 output), ~$3.00; the full report is the XCom durable_report"), line
    assert run.report().to_json()["batched"] == {"requests": 1, "saved_usd": 3.0, "without_batch_price": 0}


def test_cache_show_lists_a_pending_request_then_collected(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from tests.helpers.durable import task_identity

    from airflow_pydantic_ai.cli import cache_command

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=5)
    harness = DurableHarness(str(tmp_path))
    (ticket,) = _deferred(harness, _agent(model, calls))
    identity = task_identity()
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
    args = argparse.Namespace(
        dag_id=identity.dag_id, run_id=identity.run_id, task_id=identity.task_id, map_index=-1,
        step=None, full=False, raw=False, calls=False, output="plain",
    )  # fmt: skip
    cache_command.cache_show(args)
    shown = capsys.readouterr().out
    assert "Requests submitted to the provider (1):" in shown, shown
    assert f"step 1: batch {ticket.job_id} (function function:answer:), submitted " in shown, shown
    assert shown.rstrip().endswith("in_progress"), shown

    model.hold = 0
    harness.run(_agent(model, calls), "go")
    cache_command.cache_show(args)
    shown = capsys.readouterr().out
    assert f"batch {ticket.job_id} (function function:answer:)" in shown and "collected" in shown, shown


def test_a_batch_the_provider_no_longer_has_is_submitted_again_by_the_retry(tmp_path: Any) -> None:
    from pydantic_ai.exceptions import ModelHTTPError

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=5)
    harness = DurableHarness(str(tmp_path))
    (ticket,) = _deferred(harness, _agent(model, calls))

    class Forgetting(CountingBatches):
        async def batch_status(self, batch: Any) -> Any:
            if batch.id == ticket.job_id:  # past the provider's retention: a 404, as pydantic-ai reads it
                raise ModelHTTPError(status_code=404, model_name=self.model_name, body={"error": "not found"})
            return await super().batch_status(batch)

    later = Forgetting(_answers(calls))
    result, _, log = harness.run(_agent(later, calls), "go")
    assert result.output == "done: found x"
    assert later.batches == 2  # the forgotten request submitted again, then the second one
    assert any(f"the provider no longer has batch {ticket.job_id}" in line for line in log.at("warning")), log.texts


def test_the_view_lists_the_requests_submitted_to_the_provider(tmp_path: Any) -> None:
    from airflow_pydantic_ai.durable import CacheReader
    from airflow_pydantic_ai.ui.pages import TaskRef, ViewData, view_page

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=5)
    harness = DurableHarness(str(tmp_path))
    (ticket,) = _deferred(harness, _agent(model, calls))
    reader = CacheReader(harness.store())
    task = TaskRef("dag", "run", "task", -1, "/pydantic-ai/cache")
    data = ViewData(task, "deferred", 1, "AgentOperator", "file:///x", True, reader.steps())
    data.pending = [row.line() for row in reader.pending_requests()]
    page = view_page(data, "/static")
    assert "Requests submitted to the provider (1)" in page
    assert f"step 1: batch {ticket.job_id} (function function:answer:), submitted " in page


def test_deleting_from_a_model_step_forgets_its_submission_too(tmp_path: Any) -> None:
    from airflow_pydantic_ai.durable import CacheReader

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls))
    harness = DurableHarness(str(tmp_path))
    harness.run(_agent(model, calls), "go")
    reader = CacheReader(harness.store())
    assert len(reader.pending_requests()) == 2
    deleted = reader.delete_from(3)  # the second model request: run live from it
    assert [info.kind for info in deleted] == ["model"]
    assert [row.step for row in CacheReader(harness.store()).pending_requests()] == [1]
    harness.run(_agent(model, calls), "go")
    assert model.batches == 3  # asked anew, not picked up


@pytest.mark.parametrize("retry_coming", [True, False])
def test_a_stopped_try_leaves_its_batch_running_for_the_retry_and_the_last_try_cancels_it(
    tmp_path: Any, retry_coming: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai import _agent_graph

    def stopped(delay: float) -> Any:  # the task is cancelled while it waits between checks (a timeout, a SIGTERM)
        raise asyncio.CancelledError

    calls: Counter[str] = Counter()
    model = CountingBatches(_answers(calls), hold=1)
    harness = DurableHarness(str(tmp_path))
    with monkeypatch.context() as patched, pytest.raises(asyncio.CancelledError):
        patched.setattr(_agent_graph, "_agent_graph_sleep", stopped)
        harness.run(_agent(model, calls), "go", run_options={"retry_coming": retry_coming})
    assert model.checks["cancelled"] == (0 if retry_coming else 1)
    if retry_coming:
        assert any("left running for the next try" in line for line in harness.logs[0].texts)
        result, _, _ = harness.run(_agent(model, calls), "go")
        assert result.output == "done: found x" and model.batches == 2
