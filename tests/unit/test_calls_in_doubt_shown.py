"""Issue 29, part 6: ``cache show`` and the view show an at-most-once call that started and never finished as
such (its try and time), and its resolution once answered; a finished call is no problem.

The cache comes from real attempts (``tests/helpers/calls_in_doubt.py``): ``reserve_seat`` finished,
``charge_card`` cut off and answered "it happened", ``send_invoice`` cut off and unanswered. ``cache show`` runs
in-process as its command function; the real ``airflow`` CLI and the view in a browser are in ``tests/system``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.calls_in_doubt import API_KEY, RECEIPT, write_three_calls
from tests.helpers.durable import RUN_ID, DurableHarness

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.cache_tools.access import CacheAccess, ShownCall
from airflow_pydantic_ai.cli import cache_command
from airflow_pydantic_ai.durable.read import CacheReader, marked_calls
from airflow_pydantic_ai.durable.side_effects import CallInDoubt, Resolution, StartedCall
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.ui.pages import TaskRef, ViewData, view_page

RESOLVE = " ".join([*_compat.cli_command_prefix(), "cache", "resolve", "dag", RUN_ID, "task", "--call"])
"""The command as this Airflow spells it (``airflow-pydantic-ai`` on 3.1)."""


@pytest.fixture
def three_calls(harness: DurableHarness, monkeypatch: pytest.MonkeyPatch) -> DurableHarness:
    """The harness's cache with a finished, a resolved and an unfinished call; the commands read its base."""
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{harness.base}")
    write_three_calls(harness)
    return harness


def _states(harness: DurableHarness) -> dict[str, str]:
    return {call.call.started.tool: call.state for call in marked_calls(CacheReader(harness.store()))}


def test_each_start_is_unfinished_resolved_or_finished_as_a_retry_sees_it(three_calls: DurableHarness) -> None:
    calls = marked_calls(CacheReader(three_calls.store()))

    assert [(call.call.started.tool, call.state, call.call.started.attempt) for call in calls] == [
        ("reserve_seat", "finished", 1),
        ("charge_card", "resolved", 1),
        ("send_invoice", "unfinished", 3),
    ]
    seat, card, invoice = calls
    assert not seat.in_doubt and card.in_doubt and invoice.in_doubt
    # Try 3 used the answer: the result given is charge_card's own step now; send_invoice has none.
    assert seat.recorded and card.recorded and not invoice.recorded
    assert invoice.describe() == (
        f"outcome unknown: asked for by step 5, started by try 3 at {invoice.call.started.when}, never finished"
    )
    assert card.describe() == (
        f"asked for by step 3, started by try 1 at {card.call.started.when}, cut off; ana answered 'it happened' "
        "(the Required Actions page)"
    )
    assert seat.describe().startswith(
        "at most once: asked for by step 1, started by try 1 at "
    ) and seat.describe().endswith(", finished")
    assert card.result() == RECEIPT and invoice.result() is None
    assert card.ref == card.call.key[:10] and seat.tool_entry_name == f"tool-{seat.call.key}.json"


def test_a_cache_without_at_most_once_calls_lists_none(harness: DurableHarness) -> None:
    from tests.helpers.durable import counting_agent

    harness.run(counting_agent({}), "go")
    assert CacheReader(harness.store()).steps() and marked_calls(CacheReader(harness.store())) == []


def test_an_answer_that_cannot_be_read_counts_as_none_and_says_so(three_calls: DurableHarness) -> None:
    [card] = [call for call in marked_calls(CacheReader(three_calls.store())) if call.state == "resolved"]
    broken = {**card.call.resolution.to_payload(), "answer": "maybe"}  # type: ignore[union-attr]
    three_calls.store().put(StepEntry("resolution", card.call.key, 1, 1, "charge_card", broken, role="resolution"))

    # Try 3 used the answer, so the result given is the call's tool entry: without a readable answer the call is
    # as a retry takes it, finished (that entry replays), and the problem is said.
    assert _states(three_calls)["charge_card"] == "finished"
    [card] = [
        call for call in marked_calls(CacheReader(three_calls.store())) if call.call.started.tool == "charge_card"
    ]
    assert "its answer cannot be read (unknown answer 'maybe'" in card.problem


def test_an_answer_about_an_earlier_start_does_not_resolve_a_later_one(three_calls: DurableHarness) -> None:
    [invoice] = [call for call in marked_calls(CacheReader(three_calls.store())) if call.state == "unfinished"]
    earlier = Resolution("rerun", 2, invoice.call.started.started_at - 60, answered_by="ana")
    three_calls.store().put(
        StepEntry("resolution", invoice.call.key, 1, 2, "send_invoice", earlier.to_payload(), role="resolution")
    )
    assert _states(three_calls)["send_invoice"] == "unfinished"


def _show(capsys: pytest.CaptureFixture[str], **overrides: object) -> tuple[str, str]:
    values: dict[str, object] = {
        "dag_id": "dag",
        "run_id": RUN_ID,
        "task_id": "task",
        "map_index": -1,
        "step": None,
        "full": False,
        "raw": False,
        "calls": False,
        "output": "plain",
    }
    values.update(overrides)
    cache_command.cache_show(argparse.Namespace(**values))
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.mark.usefixtures("three_calls")
def test_cache_show_lists_the_calls_in_doubt_after_the_steps_with_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = _show(capsys)

    steps, section = out.split("\nCalls in doubt (2):\n")
    assert "reserve_seat" in steps and "A retry replays 5 steps (3 model)" in steps
    lines = section.splitlines()
    card, invoice = lines[0], next(line for line in lines if "send_invoice" in line)
    assert "tool charge_card  call c2: asked for by step 3, started by try 1 at " in card
    assert card.endswith("cut off; ana answered 'it happened' (the Required Actions page)")
    assert f"result given: {RECEIPT}" in section
    assert "tool send_invoice  call c3: outcome unknown: asked for by step 5, started by try 3 at " in invoice
    assert invoice.endswith("never finished")
    ref = invoice.split()[0]
    resolve = [line.strip() for line in lines if line.strip().startswith("resolve:")]
    assert resolve == [
        f"resolve: {RESOLVE} {ref} --happened --result '<JSON or text for the model>' | --rerun"
    ]  # the unfinished call only
    assert '"api_key": "***"' in section and API_KEY not in out
    assert "reserve_seat" not in section  # finished: nothing in doubt


@pytest.mark.usefixtures("three_calls")
def test_json_stays_the_steps_and_calls_lists_every_call_as_rows(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _show(capsys, output="json")
    # charge_card is a step of its own: try 3 used the answer and recorded the result given as its entry.
    assert [(row["step"], row["name"]) for row in json.loads(out)][3:5] == [(4, "charge_card"), (5, "function:planner")]
    assert [row["step"] for row in json.loads(out)] == [1, 2, 3, 4, 5]
    assert "2 calls in doubt (started, cut off): add --calls to list them" in err

    out, _ = _show(capsys, output="json", calls=True)
    rows = json.loads(out)
    assert [(row["tool"], row["state"], row["attempt"]) for row in rows] == [
        ("reserve_seat", "finished", 1),
        ("charge_card", "resolved", 1),
        ("send_invoice", "unfinished", 3),
    ]
    card, invoice = rows[1], rows[2]
    assert (card["answer"], card["answered_by"], card["result"]) == ("happened", "ana", RECEIPT)
    assert card["arguments"] == '{"amount": 42, "api_key": "***"}' and card["resolve"] == ""
    assert invoice["resolve"].startswith(f"{RESOLVE} {invoice['ref']} --happened")
    assert invoice["started_at"].endswith("+00:00") and invoice["call_id"] == "c3"


@pytest.mark.usefixtures("three_calls")
@pytest.mark.usefixtures("three_calls")
def test_cache_show_calls_fits_a_terminal_with_each_command_on_a_line_of_its_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    out, _ = _show(capsys, output="table", calls=True)
    lines = [line for line in out.splitlines() if line.strip()]
    header = next(line for line in lines if "ref" in line and "state" in line)
    assert len([cell for cell in header.split("|") if cell.strip()]) <= 8, header
    [command] = [line for line in lines if line.startswith("resolve ")]
    assert f"{RESOLVE} " in command and command.endswith("--rerun")  # whole, on one line
    assert "send_invoice" in out and "arguments" not in header


@pytest.mark.usefixtures("three_calls")  # a cache to open first: the test does not lean on the one before it
def test_calls_and_step_together_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="error: --calls lists the at_most_once"):
        _show(capsys, calls=True, step=1)


def test_cache_show_says_nothing_of_calls_when_none_is_in_doubt(
    harness: DurableHarness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers.durable import counting_agent

    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{harness.base}")
    harness.run(counting_agent({}), "go")
    out, err = _show(capsys)
    assert "Calls in doubt" not in out + err


def _page(harness: DurableHarness, calls: list[ShownCall] | None = None) -> str:
    access = CacheAccess(harness.identity, harness.store(), CacheReader(harness.store()))
    task = TaskRef("dag", RUN_ID, "task", -1, "/pydantic-ai/cache")
    steps = access.reader.steps()
    data = ViewData(task, "failed", 3, "AgentOperator", access.location, True, steps)
    data.calls = access.calls() if calls is None else calls
    return view_page(data, "/static")


def test_the_view_warns_of_an_unfinished_call_and_shows_an_answered_one_plainly(three_calls: DurableHarness) -> None:
    page = _page(three_calls)

    section = page.split('<section class="calls">', 1)[1].split("</section>", 1)[0]
    assert "<h2>Calls in doubt (2)</h2>" in section
    warning, resolved = section.split('<div class="call resolved"')
    assert '<div class="call warning"' in warning and "tool send_invoice" in warning
    assert "Outcome unknown: asked for by step 5, started by try 3 at " in warning and "never finished." in warning
    assert f"{RESOLVE} " in warning and "--rerun" in warning
    assert "tool charge_card" in resolved and "ana answered &#x27;it happened&#x27;" in resolved
    assert f"Result given to the model: <code>{RECEIPT}</code>" in resolved and "cache resolve" not in resolved
    assert "&quot;api_key&quot;: &quot;***&quot;" in resolved and API_KEY not in page
    # Finished: no card, a small mark on its tool row.
    assert "reserve_seat" not in section
    [row] = [row for row in page.split("<tr") if "reserve_seat" in row]
    assert "at most once</span>" in row


def test_while_the_task_asks_the_view_offers_the_required_actions_page_too(three_calls: DurableHarness) -> None:
    access = CacheAccess(three_calls.identity, three_calls.store(), CacheReader(three_calls.store()))
    task = TaskRef("dag", RUN_ID, "task", -1, "/base/pydantic-ai/cache")
    data = ViewData(task, "awaiting_input", 4, "AgentOperator", access.location, True, access.reader.steps())
    data.calls = access.calls()
    page = view_page(data, "/static")

    warning = page.split('<div class="call warning"', 1)[1].split("</div>", 1)[0]
    assert '<a href="/base/dags/dag/runs/' in warning and '/tasks/task/required_actions" target="_top">' in warning
    assert "Required Actions page</a>, or with:" in warning and "--rerun" in warning
    assert "Waiting for a person&#x27;s approval" not in page


def test_the_view_shows_no_calls_section_without_calls_in_doubt(harness: DurableHarness) -> None:
    from tests.helpers.durable import counting_agent

    harness.run(counting_agent({}), "go")
    page = _page(harness)
    assert "Calls in doubt" not in page and "at most once" not in page


def test_the_calls_section_escapes_what_the_model_and_the_tool_wrote(tmp_path: Path) -> None:
    from airflow_pydantic_ai.durable.read import MarkedCall

    started = StartedCall("<b>tool</b>", "<script>x</script>", {"a": "<img>"}, 2, 1_800_000_000.0)
    call = MarkedCall(CallInDoubt("k" * 64, 1, "tool <b>tool</b>", started), "unfinished", ("<i>saved</i>",))
    shown = ShownCall(call, '{"a": "<img>"}', None, "airflow pydantic-ai cache resolve '<d>' r t --call kkkkkkkkkk")
    page = _page(DurableHarness(base=str(tmp_path)), calls=[shown])

    for raw in ("<b>tool</b>", "<script>x</script>", "<img>", "<i>saved</i>", "'<d>'"):
        assert raw not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "Checkpoints saved: &lt;i&gt;saved&lt;/i&gt;" in page


def test_an_answer_a_try_used_is_no_longer_open_to_cache_resolve(three_calls: DurableHarness) -> None:
    """charge_card's answer "it happened" was used by try 3 (its result is the call's step): a new answer would
    change nothing, so ``cache resolve`` is offered the unanswered call only."""
    from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt

    assert [doubt.started.tool for doubt in calls_in_doubt(CacheReader(three_calls.store()))] == ["send_invoice"]


@pytest.mark.usefixtures("three_calls")
def test_cache_show_reads_the_store_once_for_the_steps_and_the_calls(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 a survey is a listing and a batch of GETs: the steps and the calls in doubt come from one."""
    from airflow_pydantic_ai.durable.storage.store import StepStore

    surveys: list[str] = []
    survey = StepStore.survey

    def counted(store: StepStore, **options: Any) -> Any:
        surveys.append(store.location)
        return survey(store, **options)

    monkeypatch.setattr(StepStore, "survey", counted)
    out, _ = _show(capsys)
    assert "Calls in doubt (2)" in out and "charge_card" in out
    assert len(surveys) == 1, surveys
