"""Kill table for a batched model step (issue 38), like ``test_side_effect_kills.py`` for at-most-once tools.

Each trial runs a durable agent with pydantic-ai's ``BatchModelRequests`` on the real ``openai`` and ``anthropic``
SDKs against the local batch servers (``tests/helpers/batch_servers.py``, in this process), one try per child
process (``python -m tests.helpers.batch_try``). The agent makes two model requests (a tool call, then the answer),
so two batches when nothing is submitted twice. Try 1 is SIGKILLed at one point of the first request:

- ``before-submission``: the request is about to be submitted (nothing is at the provider);
- ``after-submission``: the batch exists and its ticket is recorded (a ``pending`` entry);
- ``during-wait``: pydantic-ai checks on the batch, which the provider still works on;
- ``during-download``: the batch ended and its result file is downloading (the server holds the download);
- ``after-result``: the model step's response is recorded.

Try 2 runs to the end in a new process. Over both tries the server counts the batches created: one per request
at every point (the retry picks up the same batch), and the tool's side effect happens once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai.capabilities.batch_model_requests", reason="pydantic-ai 2.78: BatchModelRequests")
from tests.helpers.batch_wire import Turn

REPO = Path(__file__).resolve().parents[2]
POINTS = ["before-submission", "after-submission", "during-wait", "during-download", "after-result"]
PICKS_UP = {"after-submission", "during-wait", "during-download"}
"""Where try 2 finds the first request's batch recorded and waits for it instead of submitting again."""


def _scripted(body: dict[str, Any]) -> Turn:
    """A tool call first; once the request carries the tool's result (either provider's spelling), the answer."""
    text = json.dumps(body)
    if "function_call_output" in text or "tool_result" in text:
        return Turn(text="found it")
    return Turn(tool_calls=[("lookup", {"q": "x"})])


def _try(job: dict[str, Any], *, kill_when: Any = None, server: Any = None) -> tuple[int, dict[str, Any] | None]:
    """One try in a process of its own: its exit code (-9 when killed) and its result (None when killed)."""
    result = Path(job["result"])
    result.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "tests.helpers.batch_try", json.dumps(job)], cwd=REPO, env=env)
    if kill_when is not None:
        server.wait_for(kill_when, timeout=60)
        child.send_signal(signal.SIGKILL)
    code = child.wait(timeout=120)
    return code, (json.loads(result.read_text()) if result.exists() else None)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("point", POINTS)
def test_a_try_killed_anywhere_in_a_batched_request_submits_each_request_once(
    tmp_path: Path, request: pytest.FixtureRequest, provider: str, point: str
) -> None:
    server = request.getfixturevalue(f"{provider}_batch_server")
    server.answer = _scripted
    server.knobs.polls_until_end = 2  # the first check finds the batch in progress: a wait
    base_url = server.base_url
    job = {
        "provider": provider,
        "base_url": base_url,
        "base": str(tmp_path / "cache"),
        "marker": str(tmp_path / "marker"),
        "result": str(tmp_path / "result.json"),
    }
    if point == "during-download":
        server.hold_results()
        code, _ = _try({**job, "attempt": 1}, kill_when=lambda counters: counters.downloads_started >= 1, server=server)
        server.release_results()
    else:
        code, _ = _try({**job, "attempt": 1, "kill_at": point})
    assert code == -signal.SIGKILL
    first = server.counters.batches_created
    assert first == (0 if point == "before-submission" else 1)

    code, result = _try({**job, "attempt": 2})
    assert code == 0 and result is not None, result
    assert result["error"] is None, result
    assert result["output"] == "found it"
    assert server.counters.batches_created == 2, server.counters.snapshot()  # one per request, over both tries
    assert Path(job["marker"]).read_text().splitlines() == ["tool 2"]  # the side effect once
    picked_up = [line for line in result["log"] if "picking up batch" in line]
    assert bool(picked_up) == (point in PICKS_UP), result["log"]
    if point == "after-result":
        assert any("step 1: model" in line and "replayed" in line for line in result["log"]), result["log"]


def test_a_background_response_is_one_step_and_a_killed_wait_picks_up_the_same_response(
    tmp_path: Path, openai_batch_server: Any
) -> None:
    """OpenAI's background mode: polls are no steps (each was a model step before issue 38), and a try killed while
    pydantic-ai polls leaves the response id recorded: the retry goes on polling it instead of creating another."""
    from tests.helpers.durable import stored_entries

    server = openai_batch_server
    server.answer = _scripted
    server.knobs.background_polls = 4  # the fourth retrieve finds it completed
    job = {
        "provider": "openai",
        "base_url": server.base_url,
        "base": str(tmp_path / "cache"),
        "marker": str(tmp_path / "marker"),
        "result": str(tmp_path / "result.json"),
        "background": True,
    }
    code, _ = _try({**job, "attempt": 1}, kill_when=lambda counters: counters.background_polls >= 2, server=server)
    assert code == -signal.SIGKILL
    assert server.counters.background_creates == 1

    code, result = _try({**job, "attempt": 2})
    assert code == 0 and result is not None and result["error"] is None, result
    assert result["output"] == "found it"
    assert server.counters.background_creates == 2, server.counters.snapshot()  # one per request, over both tries
    assert server.counters.background_cancels == 0
    assert any("picking up background resp_" in line for line in result["log"]), result["log"]
    names = sorted(stored_entries(tmp_path / "cache"))
    assert [name.split("-")[0] for name in names].count("model") == 2, names  # polls are no steps


@pytest.mark.parametrize("kind", ["openai batch", "anthropic batch", "openai background"])
def test_a_deferred_try_hands_over_a_ticket_the_provider_is_checked_with(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``defer_pending``: the try stops once the submission is recorded; ``check_pending`` (what the triggerer
    calls) asks the provider with the ticket alone, through the real SDK; the next try collects the same job."""
    import asyncio
    from datetime import timedelta

    from pydantic_ai import Agent
    from pydantic_ai.capabilities import BatchModelRequests
    from tests.helpers.batch_servers import anthropic_model, fast_background, openai_model
    from tests.helpers.durable import DurableHarness

    from airflow_pydantic_ai.durable import PendingTicket, RequestPending, run_agent
    from airflow_pydantic_ai.durable.steps.pending_step import check_pending

    provider, how = kind.split()
    server = request.getfixturevalue(f"{provider}_batch_server")
    server.answer = lambda body: Turn(text="done")
    server.knobs.polls_until_end = 2
    server.knobs.background_polls = 2
    model = openai_model(server) if provider == "openai" else anthropic_model(server)
    if how == "background":
        fast_background(monkeypatch)
        agent = Agent(model, model_settings={"openai_background": True})  # type: ignore[typeddict-unknown-key]
    else:
        batching = BatchModelRequests(max_wait=timedelta(seconds=0.05), poll_interval=timedelta(seconds=0.05))
        agent = Agent(model, capabilities=[batching])
    harness = DurableHarness(str(tmp_path))
    run, _ = harness.open(defer_pending=True)
    with pytest.raises(RequestPending) as stopped, run.ending(waits=lambda error: isinstance(error, RequestPending)):
        run_agent(run, agent, "go")
    (ticket,) = stopped.value.tickets
    assert ticket.kind == how and ticket.provider == provider and ticket.step == 1
    handed = PendingTicket.from_payload(json.loads(json.dumps(ticket.to_payload())))  # a trigger's kwargs

    async def checked_twice() -> tuple[Any, Any]:
        fresh = openai_model(server) if provider == "openai" else anthropic_model(server)  # the triggerer's model
        return await check_pending(fresh, handed), await check_pending(fresh, handed)

    first, second = asyncio.run(checked_twice())
    assert (first.state, second.state) == ("pending", "ready"), (first, second)

    result, _, log = harness.run(agent, "go", run_options={"defer_pending": True})
    assert result.output == "done"
    assert any(f"picking up {how} {ticket.job_id}" in line for line in log.texts), log.texts
    counters = server.counters
    assert (counters.background_creates if how == "background" else counters.batches_created) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_resubmissions_count_across_tries(tmp_path: Path, request: pytest.FixtureRequest, provider: str) -> None:
    """Both batches expire; ``max_resubmissions=1``. Try 1 is killed while it waits for the resubmitted batch: try 2
    waits for that same batch, and when it expires too, pydantic-ai's one resubmission is used up: 2 batches in all
    (3 or 4 if each try counted its own)."""
    server = request.getfixturevalue(f"{provider}_batch_server")
    server.answer = _scripted
    server.knobs.polls_until_end = 2
    server.knobs.outcomes = ["expired", "expired", "expired"]
    job = {
        "provider": provider,
        "base_url": server.base_url,
        "base": str(tmp_path / "cache"),
        "marker": str(tmp_path / "marker"),
        "result": str(tmp_path / "result.json"),
        "max_resubmissions": 1,
    }

    def waiting_for_the_second(counters: Any) -> bool:
        return len(counters.batches) >= 2 and counters.batches[1].polls >= 1

    code, _ = _try({**job, "attempt": 1}, kill_when=waiting_for_the_second, server=server)
    assert code == -signal.SIGKILL
    assert server.counters.batches_created == 2

    code, result = _try({**job, "attempt": 2})
    assert code == 0 and result is not None, result
    assert result["error"] is not None and "expired" in result["error"], result
    assert server.counters.batches_created == 2, server.counters.snapshot()
    assert any("picking up batch" in line and "submitted again 1x" in line for line in result["log"]), result["log"]
