"""pydantic-ai's instrumentation under a durable retry: replayed steps are not reported twice; spans carry the
task's identity. Real OpenTelemetry SDK providers with in-memory exporters, a real agent, two real attempts.

What a user gets depends on the installed pydantic-ai (``docs/compatibility.rst``): from 2.68 the replayed
steps' spans are not exported at all; before it they are exported again, marked
``pydantic_ai.durable.replayed = true``. On both, the token metrics over both tries equal the live work.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from packaging.version import Version
from pydantic_ai.models.instrumented import InstrumentationSettings
from tests.helpers.durable import DurableHarness
from tests.helpers.weather import flaky_agent

from airflow_pydantic_ai.durable.reporting.telemetry import HOLDS_BACK_REPLAYS, REPLAYED_ATTRIBUTE

IDENTITY = {
    "airflow.dag_id": "weather",
    "airflow.task_id": "report",
    "airflow.dag_run.run_id": "manual__1",
    "airflow.task_instance.try_number": 1,
    "airflow.task_instance.map_index": -1,
}


class Telemetry:
    """An in-memory trace and metrics pipeline, as a user's OpenTelemetry setup would export them."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.settings = InstrumentationSettings(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def take_spans(self) -> list[ReadableSpan]:
        spans = list(self.spans.get_finished_spans())
        self.spans.clear()
        return spans

    def token_totals(self) -> dict[str, int]:
        """Cumulative sums of ``gen_ai.client.token.usage`` by token type."""
        totals: dict[str, int] = {}
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != "gen_ai.client.token.usage":
                        continue
                    for point in metric.data.data_points:
                        kind = str(point.attributes["gen_ai.token.type"])
                        totals[kind] = totals.get(kind, 0) + int(point.sum)  # type: ignore[union-attr]
        return totals


def _chat_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith("chat ")]


def _two_tries(harness: DurableHarness, telemetry: Telemetry) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """Try 1: model step 1 live, the tool fails. Try 2: model step 1 replayed, the tool and model step 2 live."""
    agent = flaky_agent([True], telemetry.settings)
    with pytest.raises(ConnectionError):
        harness.run(agent, "weather", run_options={"span_attributes": IDENTITY})
    first = telemetry.take_spans()
    harness.run(agent, "weather", run_options={"span_attributes": IDENTITY})
    return first, telemetry.take_spans()


def test_token_metrics_over_two_tries_equal_the_live_work(harness):
    telemetry = Telemetry()
    _two_tries(harness, telemetry)
    # Live: step 1 (100 in, 10 out) on try 1, step 2 (200 in, 20 out) on try 2. Step 1 replayed costs nothing.
    assert telemetry.token_totals() == {"input": 300, "output": 30}


def test_try_one_exports_spans_for_its_live_steps(harness):
    first, _second = _two_tries(harness, Telemetry())
    chat = _chat_spans(first)
    assert len(chat) == 1 and chat[0].attributes[REPLAYED_ATTRIBUTE] is False
    assert [span.name for span in first if span.name.startswith("execute_tool")] == ["execute_tool lookup"]


@pytest.mark.skipif(not HOLDS_BACK_REPLAYS, reason="pydantic-ai < 2.68 has no replay_scope")
def test_a_replayed_step_exports_no_span_again(harness):
    _first, second = _two_tries(harness, Telemetry())
    chat = _chat_spans(second)
    # Only model step 2 ran live: the replayed step 1 is not exported a second time.
    assert len(chat) == 1
    assert chat[0].attributes["gen_ai.usage.input_tokens"] == 200
    assert all(span.attributes.get(REPLAYED_ATTRIBUTE) is not True for span in second)


@pytest.mark.skipif(HOLDS_BACK_REPLAYS, reason="pins what pydantic-ai < 2.68 gives")
def test_before_2_68_a_replayed_step_is_exported_again_marked_replayed(harness):
    _first, second = _two_tries(harness, Telemetry())
    chat = _chat_spans(second)
    assert [span.attributes[REPLAYED_ATTRIBUTE] for span in chat] == [True, False]
    # The replayed request reports no tokens (its response carries zero usage): nothing is counted twice.
    assert "gen_ai.usage.input_tokens" not in chat[0].attributes


def test_the_version_gate_matches_the_installed_pydantic_ai():
    assert (Version(version("pydantic-ai-slim")) >= Version("2.68")) == HOLDS_BACK_REPLAYS


def test_every_agent_span_carries_the_task_identity_and_nests_under_the_task_span(harness):
    telemetry = Telemetry()
    tracer = telemetry.tracer_provider.get_tracer("airflow-task-runner-stand-in")
    agent = flaky_agent([], telemetry.settings)
    with tracer.start_as_current_span("worker.report") as task_span:
        harness.run(agent, "weather", run_options={"span_attributes": IDENTITY})
    spans = telemetry.take_spans()
    outer = next(span for span in spans if span.name == "worker.report")
    agent_spans = [span for span in spans if span is not outer]
    assert {span.name.split()[0] for span in agent_spans} == {"invoke_agent", "chat", "execute_tool"}
    for span in agent_spans:
        assert {key: span.attributes.get(key) for key in IDENTITY} == IDENTITY, span.name
    run_span = next(span for span in agent_spans if span.name.startswith("invoke_agent"))
    assert run_span.parent is not None and run_span.parent.span_id == task_span.get_span_context().span_id
    # The task's own span is Airflow's: it is not stamped by the durable package.
    assert REPLAYED_ATTRIBUTE not in (outer.attributes or {})
