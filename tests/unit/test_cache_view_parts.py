"""The parts of the "Durable cache" view that need no server: opening a cache from ids (never outside the
base), the per-attempt record, the cross-site checks and form tokens, the pages' escaping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import RecordingLog, local_store, task_identity

from airflow_pydantic_ai.cache_tools.access import OutsideCacheBase, _check_inside, open_cache
from airflow_pydantic_ai.durable import Attempt, CacheReader, DurableCapability, StepStore
from airflow_pydantic_ai.durable.storage.notes import AttemptRecord, latest_attempt
from airflow_pydantic_ai.ui.guard import FormTokens, cross_site_problem
from airflow_pydantic_ai.ui.pages import TaskRef, ViewData, view_page

TRICKY_IDS = [
    ("..", "..", "..", -1),
    ("../../etc", "run/../../x", "t/../..", 0),
    ("dag%2F..%2F..", "%2e%2e", "task%2Fx", -1),
    ("/abs", "//double", "back\\slash", 3),
    (".", "", "~", -1),
]


@pytest.mark.parametrize("ids", TRICKY_IDS)
def test_open_cache_stays_four_segments_below_the_base_whatever_the_ids(
    ids: tuple[str, str, str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{base}")

    access = open_cache(*ids)

    root = Path(access.store.root)
    assert root.resolve().parent.parent.parent.parent == base.resolve()
    assert os.path.commonpath([root.resolve(), base.resolve()]) == str(base.resolve())
    assert access.reader.steps() == []
    access.reader.delete_all()  # deleting an absent cache touches nothing
    assert base.exists() and list(base.iterdir()) == []


def test_check_inside_refuses_a_prefix_outside_the_base() -> None:
    _check_inside("/data/cache", "/data/cache/d/r/t/-1")
    for root in ("/data/cache/d/r/../../x/-1", "/data/other/d/r/t/-1", "/data/cache/d/r/t", "/data/cache/../d/r/t/-1"):
        with pytest.raises(OutsideCacheBase):
            _check_inside("/data/cache", root)


def _agent(fail: bool) -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = {p.tool_name for m in messages for p in m.parts if isinstance(p, ToolReturnPart)}
        if "lookup" not in done:
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(answer, model_name="m"))

    @agent.tool_plain
    def lookup(q: str) -> str:
        if fail:
            raise ConnectionError("down")
        return "secret-free answer"

    return agent


def _store(base: Path) -> StepStore:
    return local_store(base, task_identity("d", "t", run_id="r"))


def _attempt(base: Path, attempt: int, *, fail: bool, instructions: str = "") -> RecordingLog:
    log = RecordingLog()
    run = Attempt.open(_store(base), attempt=attempt, log=log)
    agent = _agent(fail)
    if instructions:
        agent = Agent(agent.model, instructions=instructions, toolsets=agent.toolsets[1:] or agent.toolsets)
    try:
        agent.run_sync("go", capabilities=[DurableCapability(run)])
        run.finish()
    except ConnectionError:
        pass
    finally:
        run.log_summary()
    return log


def test_each_failed_attempt_leaves_its_summary_beside_the_cache_and_no_step(tmp_path: Path) -> None:
    log = _attempt(tmp_path, 1, fail=True)

    record = latest_attempt(_store(tmp_path))
    assert record is not None and record.attempt == 1
    assert record.summary in log.texts
    assert record.summary.startswith("Durable: replayed 0 cached steps (0 model, 0 tool), executed 2 new steps")
    assert record.changed == ()
    # The record is not a step: the loader and the read side never see it.
    assert [step.kind for step in CacheReader(_store(tmp_path)).steps()] == ["model"]
    assert _store(tmp_path).load().skipped == {}


def test_the_record_of_the_latest_try_carries_its_changed_warning(tmp_path: Path) -> None:
    _attempt(tmp_path, 1, fail=True)
    log = _attempt(tmp_path, 2, fail=True, instructions="A new system prompt.")

    record = latest_attempt(_store(tmp_path))
    assert record is not None and record.attempt == 2
    assert len(record.changed) == 1 and "changed: " in record.changed[0]
    assert record.changed[0] in log.texts
    assert "A new system prompt" not in record.to_bytes().decode()


def test_a_successful_attempt_leaves_nothing_behind(tmp_path: Path) -> None:
    _attempt(tmp_path, 1, fail=True)
    _attempt(tmp_path, 2, fail=False)

    assert latest_attempt(_store(tmp_path)) is None
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []


def test_a_damaged_attempt_record_is_ignored(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write_note(".attempt-00003", b"{not json")
    store.write_note(
        AttemptRecord(2, "Durable: replayed ...").name(), AttemptRecord(2, "Durable: replayed ...").to_bytes()
    )

    record = latest_attempt(store)
    assert record is not None and record.attempt == 2
    with pytest.raises(ValueError):
        store.write_note("attempt.json", b"{}")


def test_form_tokens_bind_user_action_and_target() -> None:
    tokens = FormTokens(b"k")
    target = ("dag", "run", "task", "-1", "2")
    token = tokens.issue("admin", "fork", target, now=1000)

    assert tokens.check(token, "admin", "fork", target, now=1001)
    assert not tokens.check(token, "viewer", "fork", target, now=1001)
    assert not tokens.check(token, "admin", "delete", target, now=1001)
    assert not tokens.check(token, "admin", "fork", ("dag", "run", "task", "-1", "3"), now=1001)
    assert not tokens.check(token, "admin", "fork", target, now=1000 + 3601)
    assert not FormTokens(b"other").check(token, "admin", "fork", target, now=1001)
    assert not tokens.check("", "admin", "fork", target, now=1001)


def test_cross_site_problem_accepts_this_origin_only() -> None:
    here = "http://127.0.0.1:8080"
    assert cross_site_problem({}, here, set()) is None
    assert cross_site_problem({"origin": here, "sec-fetch-site": "same-origin"}, here, set()) is None
    assert cross_site_problem({"origin": "https://airflow.example.com"}, here, {"https://airflow.example.com"}) is None
    assert cross_site_problem({"origin": "http://evil.example"}, here, set())
    assert cross_site_problem({"origin": "null"}, here, set())
    assert cross_site_problem({"sec-fetch-site": "cross-site"}, here, set())
    assert cross_site_problem({"sec-fetch-site": "same-site"}, here, set())


def test_the_page_escapes_every_value() -> None:
    task = TaskRef("<dag>", 'run"<script>', "t&t", -1, "/pydantic-ai/cache")
    data = ViewData(task=task, state="failed", try_number=1, operator="<Op>", location="file:///x/<y>", exists=False)

    page = view_page(data, "/static")

    assert "<script>" not in page.replace('<script src="/static/theme.js"></script>', "")
    assert "&lt;dag&gt;" in page and "Nothing recorded for this task instance." in page


def test_a_shown_step_is_masked_by_airflows_secrets_masker_and_truncated(tmp_path: Path) -> None:
    from airflow.sdk.log import mask_secret

    from airflow_pydantic_ai.cache_tools.access import CacheAccess
    from airflow_pydantic_ai.durable.storage.entry import StepEntry

    store = _store(tmp_path)
    access = CacheAccess(identity=task_identity("d", "t", run_id="r"), store=store, reader=CacheReader(store))
    mask_secret("registered-secret-value-123")
    payload = {
        "outcome": "return",
        "value": {"api_key": "sk-live-abc", "note": "contains registered-secret-value-123", "big": "x" * 10_000},
    }
    store.put(StepEntry(kind="tool", key="k1", step=1, attempt=1, label="lookup", payload=payload, call_id="c1"))

    info, text = access.render_step(1)

    assert info.name == "lookup"
    assert "sk-live-abc" not in text and "registered-secret-value-123" not in text
    assert "***" in text
    assert len(text) < 4096 + 100 and text.endswith("more characters not shown)")
    with pytest.raises(KeyError):
        access.render_step(2)


def test_a_run_id_from_the_uis_link_keeps_its_plus_sign() -> None:
    """Airflow 3.1 puts the run id into the external view's link unencoded: its ``+`` arrives as a space."""
    from urllib.parse import parse_qs

    from packaging.version import Version
    from tests.helpers.compat import airflow_version

    from airflow_pydantic_ai._compat import run_id_from_view_link

    run_id = "manual__2026-11-23T10:00:00+00:00"
    raw = (
        "manual__2026-11-23T10:00:00+00:00"
        if airflow_version() < Version("3.2")
        else "manual__2026-11-23T10%3A00%3A00%2B00%3A00"
    )
    [received] = parse_qs(f"run_id={raw}")["run_id"]

    assert run_id_from_view_link(received) == run_id


def test_a_try_that_waits_for_a_person_is_told_apart_from_a_failure_by_type(tmp_path: Path) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1 keeps it in core
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef,attr-defined,unused-ignore]

    from airflow_pydantic_ai import _compat
    from airflow_pydantic_ai.durable.storage.notes import TryEnding, record_attempt, record_ending

    deferred = TaskDeferred(trigger=object(), method_name="resume_after_approval")  # type: ignore[arg-type]
    assert _compat.waits_for_a_person(deferred) == "deferred"
    assert _compat.waits_for_a_person(RuntimeError("TaskDeferred")) == ""
    if _compat.airflow_version_at_least(3, 3):
        from airflow.sdk.exceptions import TaskAwaitingInput

        waiting = TaskAwaitingInput(method_name="resume_after_approval", kwargs={}, timeout=None)
        assert _compat.waits_for_a_person(waiting) == "awaiting_input"

    store = _store(tmp_path)
    log = RecordingLog()
    record_attempt(store, AttemptRecord(1, "Durable: replayed ..."), warn=log.warning)
    record_ending(store, TryEnding(attempt=1, how="waiting", message="awaiting_input"), warn=log.warning)
    record_attempt(store, AttemptRecord(2, "Durable: replayed ..."), warn=log.warning)
    failure = TryEnding.failed(2, ValueError("x" * 1000), redact=lambda value: value)
    record_ending(store, failure, warn=log.warning)

    latest = latest_attempt(store)
    assert latest is not None and latest.ending == failure
    assert failure.describe().startswith("Failed: ValueError: xxx") and len(failure.message) == 300
    assert TryEnding(1, "waiting", message="awaiting_input").describe() == (
        "Waiting for a person's answer on the Required Actions page (awaiting_input)"
    )
    assert CacheReader(store).steps() == []  # the notes are no steps
