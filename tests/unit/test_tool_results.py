"""Tool results that are not plain JSON: replayed exactly, or not cached (with a warning), never a crash.

Each test runs two attempts of an agent whose tool returns the value under test. The first attempt's
second model request fails (after the tool ran and was recorded); the retry replays the first model
answer and the tool, and the second model request runs live again. We compare, between the two
attempts:

- what the tool call produced, as seen by an outer capability (``after_tool_execute``): the same type
  and an equal value;
- what the model received (its request messages as JSON, per-attempt fields aside);
- how many times the tool really ran (once when the result was cached, twice when it was not).
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import importlib
import ipaddress
import json
import math
import os
import sys
import time
import uuid
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.sdk import timezone as airflow_timezone
from pydantic import BaseModel, HttpUrl
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, task_identity

from airflow_pydantic_ai.durable import Attempt, DurableCapability

IDENTITY = task_identity("results_dag", "agent")


@dataclass
class ToolResults(AbstractCapability[Any]):
    """Sees every tool result as the rest of the run does (outside the durable wrapper)."""

    seen: list[Any] = field(default_factory=list)

    async def after_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, result: Any) -> Any:
        self.seen.append(result)
        return result


class ModelFailedOnce(RuntimeError):
    pass


def _visible(message: ModelMessage) -> Any:
    """A request as JSON, without the fields that differ on every attempt."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("timestamp", "run_id", "conversation_id")}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return strip(ModelMessagesTypeAdapter.dump_python([message], mode="json"))


@dataclass
class Outcome:
    executions: int
    live: Any
    replayed: Any
    seen_by_model: list[Any]
    warnings: list[list[str]]
    errors: list[list[str]]
    runs: list[Attempt]
    seconds: list[float]
    root: Path


def twice(tmp_path: Path, factory: Any) -> Outcome:
    """Run the agent twice on one cache; the first attempt fails after the tool step was recorded."""
    calls = {"n": 0}
    fail = {"left": 1}
    seen_by_model: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("make", {"what": "it"}, tool_call_id="call-make")])
        seen_by_model.append(_visible(messages[-1]))
        if fail["left"]:
            fail["left"] -= 1
            raise ModelFailedOnce("provider down (first attempt only)")
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def make(what: str) -> Any:
        """Make the thing."""
        calls["n"] += 1
        return factory()

    harness = DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)
    seen: list[Any] = []
    warnings: list[list[str]] = []
    errors: list[list[str]] = []
    runs: list[Attempt] = []
    seconds: list[float] = []
    for attempt in (1, 2):
        started = time.perf_counter()
        run, log = harness.open()
        observer = ToolResults()
        try:
            agent.run_sync("make it", capabilities=[DurableCapability(run), observer])
        except ModelFailedOnce:
            assert attempt == 1
        seconds.append(time.perf_counter() - started)
        [result] = observer.seen
        seen.append(result)
        warnings.append(log.at("warning"))
        errors.append(log.at("error"))
        runs.append(run)
    return Outcome(
        executions=calls["n"],
        live=seen[0],
        replayed=seen[1],
        seen_by_model=seen_by_model,
        warnings=warnings,
        errors=errors,
        runs=runs,
        seconds=seconds,
        root=harness.root,
    )


# --- values that must replay exactly ---------------------------------------------------------------


class Inner(BaseModel):
    when: datetime
    tags: list[str]


class Report(BaseModel):
    title: str
    inner: Inner
    blob: bytes
    scores: dict[str, float]
    attachment: BinaryContent | None = None


@dataclass
class Batch:
    number: int
    items: list[Inner]
    note: str | None = None


class Shape(BaseModel):
    sides: int


class Square(Shape):
    length: float


@dataclass
class Drawing:
    shape: Shape


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclass
class Derived:
    """A dataclass whose ``__post_init__`` sets state outside its fields."""

    text: str

    def __post_init__(self) -> None:
        self.words = self.text.split()


@dataclass(frozen=True, slots=True)
class Frozen:
    when: datetime
    levels: tuple[Level, ...]


class Tracked:
    """A plain base class keeping state in a slot."""

    __slots__ = ("row_count",)


@dataclass
class Page(Tracked):
    rows: list[int]

    def __post_init__(self) -> None:
        self.row_count = len(self.rows)


class Summary(BaseModel):
    words: list[str]

    def model_post_init(self, context: Any) -> None:
        object.__setattr__(self, "word_count", len(self.words))


class Endpoint(BaseModel):
    url: HttpUrl
    address: ipaddress.IPv4Address
    spool: Path


class Flexible(BaseModel, extra="allow"):
    name: str
    note: str = "default"


WHEN = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)

EXACT = {
    "bytes": lambda: b"plain bytes \x00\x01\x02 and more",
    "bytearray": lambda: bytearray(b"mutable bytes"),
    "binary-content-image": lambda: BinaryContent(data=b"\x89PNG\r\n\x1a\n-fake-", media_type="image/png"),
    "binary-content-pdf": lambda: BinaryContent(data=b"%PDF-1.7 fake", media_type="application/pdf"),
    "pydantic-model-nested": lambda: Report(
        title="weekly",
        inner=Inner(when=WHEN, tags=["a", "b"]),
        blob=b"raw bytes",
        scores={"x": 0.5, "y": -1e-9},
        attachment=BinaryContent(data=b"att", media_type="application/pdf"),
    ),
    "pydantic-extra-and-fields-set": lambda: Flexible(name="n", colour="red", size=Level.HIGH),
    "subclass-as-itself": lambda: Square(sides=4, length=2.5),
    # The model sees {"shape": {"sides": 4, "length": 2.5}}: the retry must not send it {"shape": {"sides": 4}}.
    "subclass-in-a-typed-field": lambda: Drawing(shape=Square(sides=4, length=2.5)),
    "dataclass-nested": lambda: Batch(number=7, items=[Inner(when=WHEN, tags=[]), Inner(when=WHEN, tags=["z"])]),
    "dataclass-post-init-state": lambda: Derived("three little words"),
    "dataclass-frozen-slots": lambda: Frozen(when=WHEN, levels=(Level.HIGH,)),
    "dataclass-with-a-slot-of-its-base": lambda: Page(rows=[1, 2, 3]),
    "model-with-post-init-state": lambda: Summary(words=["a", "b"]),
    "tool-return": lambda: ToolReturn(
        return_value="3 pages summarised",
        content=["see the attached file", BinaryContent(data=b"%PDF-1.7", media_type="application/pdf")],
        metadata={"pages": 3, "source": "s3://bucket/doc.pdf"},
    ),
    "tool-return-nested-models": lambda: ToolReturn(
        return_value=Inner(when=WHEN, tags=["t"]), metadata={"inner": Inner(when=WHEN, tags=[])}
    ),
    "tool-return-image-content": lambda: ToolReturn(
        return_value="ok", content=[BinaryContent(data=b"img", media_type="image/png")]
    ),
    "str-enum": lambda: Colour.RED,
    "int-enum": lambda: Level.HIGH,
    "tuple": lambda: (1, "two", 3.0),
    "set": lambda: {"b", "a", "c"},
    "frozenset-of-mixed-numbers": lambda: frozenset({1, 2.5, "x"}),
    "datetime": lambda: WHEN,
    "datetime-in-a-named-zone": lambda: datetime(2026, 3, 29, 1, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
    "date-time-timedelta": lambda: [WHEN.date(), WHEN.timetz(), timedelta(days=1, microseconds=5)],
    "uuid": lambda: uuid.UUID(int=42),
    "decimal": lambda: decimal.Decimal("1.10"),
    "dict-holding-a-model": lambda: {"inner": Inner(when=WHEN, tags=["x"])},
    "dict-with-int-keys": lambda: {1: "one", 2: "two"},
    "dict-with-tuple-keys": lambda: {(1, "a"): [b"x"]},
    "list-of-binary-content": lambda: ["caption", BinaryContent(data=b"img", media_type="image/png")],
    "infinity": lambda: [float("inf"), float("-inf"), 1.5],
    # What Airflow hands tasks: pendulum types and its own UTC zone.
    "pendulum-datetime": lambda: pendulum.datetime(2026, 11, 22, 4, 30, tz="Europe/Paris"),
    "pendulum-datetime-fixed-offset": lambda: pendulum.parse("2026-11-22T04:30:00+01:00"),
    "airflow-utcnow": lambda: airflow_timezone.utcnow(),
    "pendulum-date-and-duration": lambda: [pendulum.date(2026, 11, 22), pendulum.duration(days=2, hours=3)],
    "named-fixed-offset": lambda: datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=1), "CET")),
    "model-with-url-address-path": lambda: Endpoint(
        url="https://api.example.com/v1", address=ipaddress.IPv4Address("10.0.0.7"), spool=Path("/var/spool")
    ),
    "path": lambda: Path("/data/report.csv"),
    "path-inside-a-list": lambda: ["ok", Path("/data")],
    "path-inside-a-dataclass": lambda: Batch(number=1, items=[], note=Path("/data")),  # type: ignore[arg-type]
    # What os.listdir() gives for a file name that is not UTF-8: a lone surrogate.
    "lone-surrogate": lambda: os.fsdecode(b"report-\xff.csv"),
}


@pytest.mark.parametrize("make", [pytest.param(make, id=name) for name, make in EXACT.items()])
def test_result_is_replayed_with_its_type_and_value(tmp_path, make):
    outcome = twice(tmp_path, make)
    assert outcome.executions == 1, f"the tool ran again; warnings: {outcome.warnings}"
    assert outcome.runs[1].stats.replayed.tool == 1
    assert type(outcome.replayed) is type(outcome.live)
    assert outcome.replayed == outcome.live
    if isinstance(outcome.live, (set, frozenset)):
        # A set's iteration order is not part of its value (it may differ even within one process),
        # and pydantic-ai sends the model its members in that order.
        assert sorted(map(repr, outcome.replayed)) == sorted(map(repr, outcome.live))
    else:
        assert repr(outcome.replayed) == repr(outcome.live), "a nested value changed type"
        assert outcome.seen_by_model[1] == outcome.seen_by_model[0], "the model received something else on the retry"
    assert outcome.warnings == [[], []] and outcome.errors == [[], []]


def test_nan_is_replayed_as_nan(tmp_path):
    outcome = twice(tmp_path, lambda: float("nan"))
    assert outcome.executions == 1
    assert type(outcome.replayed) is float and math.isnan(outcome.replayed)


def test_the_model_receives_the_same_result_on_the_retry_for_a_subclass_in_a_typed_field(tmp_path):
    outcome = twice(tmp_path, EXACT["subclass-in-a-typed-field"])
    assert outcome.seen_by_model[0][0]["parts"][0]["content"] == {"shape": {"sides": 4, "length": 2.5}}
    assert outcome.seen_by_model[1] == outcome.seen_by_model[0]


@pytest.mark.parametrize(
    ("case", "attribute", "expected"),
    [
        ("dataclass-post-init-state", "words", ["three", "little", "words"]),
        ("dataclass-with-a-slot-of-its-base", "row_count", 3),
        ("model-with-post-init-state", "word_count", 2),
    ],
)
def test_state_outside_the_declared_fields_comes_back(tmp_path, case, attribute, expected):
    outcome = twice(tmp_path, EXACT[case])
    assert getattr(outcome.replayed, attribute) == expected


# --- values that cannot be rebuilt: not cached, with a warning naming the tool ---------------------


def _local_dataclass() -> Any:
    @dataclass
    class Local:
        value: int

    return Local(5)


def _local_model() -> Any:
    class LocalModel(BaseModel):
        value: int

    return LocalModel(value=5)


class FixedOffset(tzinfo):
    """A home-made time zone: nothing says how to rebuild it."""

    def utcoffset(self, dt: Any) -> timedelta:
        return timedelta(hours=2)

    def dst(self, dt: Any) -> timedelta:
        return timedelta(0)


NOT_CACHED = {
    "class-defined-in-a-function": _local_dataclass,
    "model-defined-in-a-function": _local_model,
    "datetime-with-a-custom-tzinfo": lambda: datetime(2026, 1, 1, tzinfo=FixedOffset()),
    "int-of-5000-digits": lambda: 10**5000,
}


@pytest.mark.parametrize("make", [pytest.param(make, id=name) for name, make in NOT_CACHED.items()])
def test_result_that_cannot_be_rebuilt_is_not_cached_and_the_tool_runs_again(tmp_path, make):
    outcome = twice(tmp_path, make)
    assert outcome.executions == 2
    for warnings in outcome.warnings:
        assert any("result of step 2: tool make" in w and "is not cached" in w for w in warnings), warnings
    assert outcome.errors == [[], []]
    assert outcome.runs[1].stats.replayed.tool == 0 and outcome.runs[1].stats.replayed.model == 1
    assert not list(outcome.root.glob("tool-*.json")), "nothing was stored for the tool"
    assert outcome.seen_by_model[0] == outcome.seen_by_model[1]


def test_an_arbitrary_object_is_not_cached_and_the_durable_layer_does_not_crash(tmp_path):
    class Opaque:
        pass

    run, log = DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY).open()
    agent: Agent[Any, str] = Agent(
        FunctionModel(
            lambda messages, info: (
                ModelResponse(parts=[ToolCallPart("make", {}, tool_call_id="c")])
                if len(messages) == 1
                else ModelResponse(parts=[TextPart("done")])
            )
        )
    )

    @agent.tool_plain
    def make() -> Any:
        return Opaque()

    with pytest.raises(Exception) as raised:  # pydantic-ai itself cannot send an Opaque to a model
        agent.run_sync("go", capabilities=[DurableCapability(run)])
    assert not type(raised.value).__module__.startswith("airflow_pydantic_ai")
    assert any("result of step 2: tool make" in w and "Opaque" in w and "not cached" in w for w in log.at("warning"))
    assert not log.at("error")


@pytest.mark.parametrize("deploy", ["field-renamed", "module-removed"])
def test_a_class_that_changed_or_vanished_between_tries_runs_live(tmp_path, monkeypatch, deploy):
    """A deploy between two tries: the stored class no longer accepts the stored data, or is gone."""
    package = tmp_path / "deployed"
    package.mkdir()
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    module_name = f"tool_types_{uuid.uuid4().hex[:8]}"
    source = package / f"{module_name}.py"
    source.write_text("from pydantic import BaseModel\n\nclass Ticket(BaseModel):\n    id: int\n    title: str\n")
    module = importlib.import_module(module_name)
    factory: dict[str, Any] = {"make": lambda: module.Ticket(id=1, title="login broken")}
    made = {"n": 0}
    fail = {"left": 1}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("make", {}, tool_call_id="c")])
        if fail["left"]:
            fail["left"] -= 1
            raise ModelFailedOnce("first attempt only")
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    def make() -> Any:
        made["n"] += 1
        return factory["make"]()

    make.__annotations__["return"] = module.Ticket  # the tool declares the deployed class: it may be stored
    agent.tool_plain(make)

    harness = DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)
    warnings: list[list[str]] = []
    for number in (1, 2):
        if number == 2 and deploy == "field-renamed":
            source.write_text(source.read_text().replace("title: str", "subject: str"))
            importlib.invalidate_caches()
            importlib.reload(module)
            factory["make"] = lambda: module.Ticket(id=1, subject="login broken")
        elif number == 2:
            source.unlink()
            del sys.modules[module_name]
            factory["make"] = lambda: {"id": 1, "title": "login broken"}
        run, log = harness.open()
        try:
            result = agent.run_sync("go", capabilities=[DurableCapability(run)])
        except ModelFailedOnce:
            assert number == 1
        warnings.append(log.at("warning"))
        assert not log.at("error")
    assert result.output == "done"
    assert made["n"] == 2, "the stale entry was not replayed: the tool ran again"
    assert any("cannot be rebuilt" in w and "make" in w and "runs live" in w for w in warnings[1]), warnings


# --- a 50 MB result ------------------------------------------------------------------------------------


def test_a_50_mb_string_result_round_trips(tmp_path):
    big = "".join(f"line {n:08d} of a very large tool result\n" for n in range(1_250_000))[: 50 * 1024 * 1024]
    assert len(big) == 50 * 1024 * 1024
    outcome = twice(tmp_path, lambda: big)
    assert outcome.executions == 1
    assert outcome.replayed == big and type(outcome.replayed) is str
    assert outcome.seen_by_model[0] == outcome.seen_by_model[1]
    [entry] = list(outcome.root.glob("tool-*.json"))
    size = entry.stat().st_size
    record, replay = outcome.seconds
    print(
        f"\n50 MB tool result: attempt 1 (live + record) {record:.2f} s, attempt 2 (load + replay) {replay:.2f} s, "
        f"entry {size / 1e6:.1f} MB, written {outcome.runs[0].store.bytes_written / 1e6:.1f} MB"
    )
    assert size < 1.1 * len(big) + 10_000, "stored once, without bloat"
    assert record < 60 and replay < 60


def test_every_supported_type_is_tagged_in_the_entry(tmp_path):
    """The stored form names its type: bytes, pydantic, dataclass (ToolReturn, BinaryContent) or json."""
    tags = {}
    for name in ("bytes", "binary-content-pdf", "pydantic-model-nested", "dataclass-nested", "tool-return"):
        root = twice(tmp_path / name, EXACT[name]).root
        [entry] = list(root.glob("tool-*.json"))
        value = json.loads(entry.read_bytes())["payload"]["value"]
        tags[name] = value["type"]
    assert tags == {
        "bytes": "bytes",
        "binary-content-pdf": "dataclass",
        "pydantic-model-nested": "pydantic",
        "dataclass-nested": "dataclass",
        "tool-return": "dataclass",
    }
    assert dataclasses.is_dataclass(ToolReturn) and dataclasses.is_dataclass(BinaryContent)


def test_a_result_over_durable_max_entry_bytes_is_not_cached_and_runs_again_on_a_retry(tmp_path):
    """Issue 35 (9): a 50 MB result is over the 16 MiB default: a WARNING names the tool; a retry runs it again."""
    from airflow_pydantic_ai.tries.settings import DEFAULT_MAX_ENTRY_BYTES

    big = "x" * (50 * 1024 * 1024)
    calls = {"n": 0}
    fail = {"left": 1}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("export", {}, tool_call_id="c1")])
        if fail["left"]:
            fail["left"] -= 1
            raise ModelFailedOnce("provider down (first attempt only)")
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def export() -> str:
        calls["n"] += 1
        return big

    harness = DurableHarness(base=str(tmp_path / "cache"), identity=IDENTITY)
    options = {"max_entry_bytes": DEFAULT_MAX_ENTRY_BYTES}
    with pytest.raises(ModelFailedOnce):
        harness.run(agent, "export it", run_options=options)
    [warning] = [line for line in harness.logs[0].at("warning") if "durable_max_entry_bytes" in line]
    assert "tool export" in warning and "50.0 MiB" in warning and "16.0 MiB" in warning, warning
    assert sum(path.stat().st_size for path in Path(harness.root).rglob("*")) < 1024 * 1024, "nothing big stored"
    result, _, _ = harness.run(agent, "export it", run_options=options)
    assert result.output == "done" and calls["n"] == 2, "the result was not cached: the tool ran again"
