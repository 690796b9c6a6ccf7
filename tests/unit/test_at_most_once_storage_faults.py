"""At most once under storage faults (issue 35 item 1): it fails closed.

A start mark that exists but cannot be read or verified (a flipped byte, a pack that cannot be read, an entry
sealed with a key that was rotated away) makes its call **in doubt**, as if the mark were intact, whatever
``durable_storage_errors`` says; a marked call whose start mark cannot be written (a disk that cannot take one more
write) does not run. A try "cut off" is one whose tool raises a ``BaseException`` and that dies there
(``killed=True``), as in ``test_at_most_once.py``; the real SIGKILL trial is in ``tests/system``.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness, stored_entries

from airflow_pydantic_ai import at_most_once
from airflow_pydantic_ai.durable import run_agent
from airflow_pydantic_ai.durable.errors import DurableStorageError
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import AskAboutOutcome, OutcomeRules, OutcomeUnknown, Resolution
from airflow_pydantic_ai.durable.storage.local_files import LocalFiles

FAIL = OutcomeRules(on_unknown="fail", resolve_command="airflow pydantic-ai cache resolve d r t")


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"amount": 42}, tool_call_id="c1")])


def _agent(charges: list[int], *, cut_off_on: set[int]) -> Agent[Any, str]:
    agent: Agent[Any, str] = Agent(FunctionModel(_model))

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int) -> str:
        charges.append(amount)
        if len(charges) in cut_off_on:
            raise CutOff
        return f"charged {amount} (charge {len(charges)})"

    return agent


def _flip_a_byte(path: Path, inside: bytes | None = None) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(inside) if inside is not None else len(data) // 2
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _mark(harness: DurableHarness) -> Path:
    [name] = stored_entries(harness.root, "started-*")
    return harness.root / name


@pytest.mark.parametrize("storage_errors", ["warn", "fail"])
def test_a_start_mark_with_a_flipped_byte_still_puts_the_call_in_doubt(
    harness: DurableHarness, storage_errors: str
) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True)
    _flip_a_byte(_mark(harness), b'"amount"')

    with pytest.raises(OutcomeUnknown) as raised:
        harness.run(agent, "charge it", run_options={"unknown_outcome": FAIL, "storage_errors": storage_errors})

    assert charges == [42], "the card was charged once"
    message = str(raised.value)
    assert "tool charge_card (call c1) was started by an earlier try (its start mark cannot be verified:" in message
    assert "cache resolve d r t --call" in message
    assert any("cannot be verified" in line for line in harness.logs[-1].at("warning"))


def test_a_mark_in_a_pack_that_cannot_be_read_still_puts_the_call_in_doubt(harness: DurableHarness) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it")  # the try ends (a cancelled run past its grace): it packs what it wrote
    [pack] = harness.root.glob("pack-*.pack")
    assert not list(harness.root.glob("started-*")), "the mark is in the pack only"
    _flip_a_byte(pack, b'"entries"')  # the pack is no JSON any more: nothing in it can be read

    rules = OutcomeRules(on_unknown="ask", can_ask=True)
    with pytest.raises(AskAboutOutcome) as asked:
        harness.run(agent, "charge it", run_options={"unknown_outcome": rules})
    assert charges == [42]
    assert "its start mark cannot be verified" in asked.value.call.describe()
    assert pack.name in asked.value.call.started.unverified


def test_a_mark_sealed_with_a_key_rotated_away_still_puts_the_call_in_doubt(tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    harness = DurableHarness(str(tmp_path / "cache"), cipher=Fernet(Fernet.generate_key()))
    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True)
    harness.cipher = Fernet(Fernet.generate_key())  # the key was rotated without keeping the old one

    with pytest.raises(OutcomeUnknown, match="its start mark cannot be verified"):
        harness.run(agent, "charge it", run_options={"unknown_outcome": FAIL})
    assert charges == [42]


def test_an_unverifiable_mark_is_listed_and_an_answer_about_it_is_applied(harness: DurableHarness) -> None:
    from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt
    from airflow_pydantic_ai.durable.side_effects import resolution_entry

    charges: list[int] = []
    agent = _agent(charges, cut_off_on={1})
    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True)
    _flip_a_byte(_mark(harness), b'"amount"')

    [doubt] = calls_in_doubt(CacheReader(harness.store()))  # what cache show, cache resolve and the view find
    assert "its start mark cannot be verified" in doubt.describe()
    harness.store().put(resolution_entry(doubt, Resolution.happened(doubt.started, "receipt r-1", answered_by="ana")))

    result, _, _ = harness.run(agent, "charge it", run_options={"unknown_outcome": FAIL})
    assert result.output == "done: receipt r-1" and charges == [42]


class _AlmostFullDisk(LocalFiles):
    """A disk with room for ``room`` more files (then ``ENOSPC``)."""

    def __init__(self, room: int) -> None:
        self.room = room

    def create(self, path: str) -> BinaryIO:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        self.room -= 1
        return super().create(path)


@pytest.mark.parametrize("storage_errors", ["warn", "fail"])
def test_a_marked_call_whose_start_cannot_be_written_does_not_run(harness: DurableHarness, storage_errors: str) -> None:
    charges: list[int] = []
    agent = _agent(charges, cut_off_on=set())
    run, _ = harness.open(storage_errors=storage_errors)
    run.store.local_files = _AlmostFullDisk(room=1)  # the model's answer fits; the start mark does not

    with pytest.raises(DurableStorageError) as raised, run.ending():
        run_agent(run, agent, "charge it")

    assert charges == [], "the card is not charged unguarded"
    message = str(raised.value)
    assert "the start of " in message and "charge_card" in message and "No space left on device" in message
    if storage_errors == "warn":
        assert "so it does not run" in message


def test_a_marked_call_does_not_run_when_the_cache_could_not_be_read(
    harness: DurableHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_pydantic_ai.durable import StepStore

    def unreadable(store: StepStore) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(StepStore, "load", unreadable)
    charges: list[int] = []
    with pytest.raises(DurableStorageError, match="whether an earlier try started it is unknown"):
        harness.run(_agent(charges, cut_off_on=set()), "charge it")
    assert charges == []
