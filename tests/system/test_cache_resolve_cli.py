"""``airflow pydantic-ai cache resolve``: the real ``airflow`` CLI in a subprocess answers a call in doubt.

The call in doubt comes from a real ``dag.test()`` run in this session's metadata DB (the CLI subprocess shares
``AIRFLOW_HOME``): try 1 is cut off while an ``at_most_once()`` tool runs (``CutOff``, a ``BaseException``), and
``on_unknown_outcome="fail"`` fails try 2, naming the command. The cache is encrypted (``durable_encrypt``), so the
answer the command writes must carry the Fernet cipher to be read by the next try.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.airflow_cli import AIRFLOW_BIN
from tests.helpers.airflow_run import clear_and_rerun, current_try, make_dag, run_dag
from tests.helpers.compat import airflow_reads_provider_cli, clear_fernet_cache

from airflow_pydantic_ai import _compat, at_most_once

pytestmark = pytest.mark.usefixtures("airflow_db")
RESOLVE = " ".join([*_compat.cli_command_prefix(), "cache", "resolve"])
"""The command as this Airflow spells it (``airflow-pydantic-ai`` on 3.1)."""

CONSOLE_SCRIPT = AIRFLOW_BIN.parent / "airflow-pydantic-ai"
CHARGES: list[int] = []
MODEL_SAW: list[str] = []


class CutOff(BaseException):
    """The worker died while the tool ran (after its side effect)."""


@pytest.fixture
def encrypted_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """An encrypted cache in a fresh folder; the environment the CLI subprocess needs to read and write it."""
    env = {
        "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{tmp_path / 'cache'}",
        "AIRFLOW__PYDANTIC_AI__DURABLE_ENCRYPT": "True",
        "AIRFLOW__PYDANTIC_AI__DURABLE_ON_UNKNOWN_OUTCOME": "fail",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    clear_fernet_cache()
    CHARGES.clear()
    MODEL_SAW.clear()
    yield env
    clear_fernet_cache()


def _cashier(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    parts = [part for message in messages if isinstance(message, ModelRequest) for part in message.parts]
    results = [part.content for part in parts if isinstance(part, ToolReturnPart)]
    if results:
        MODEL_SAW.append(json.dumps(results[-1]))
        return ModelResponse(parts=[TextPart("settled")])
    return ModelResponse(parts=[ToolCallPart("charge_card", {"amount_cents": 4200}, tool_call_id="charge-1")])


def _cut_off_dag(dag_id: str) -> Any:
    from airflow_pydantic_ai.operators.agent import AgentOperator

    agent = Agent(FunctionModel(_cashier), name="cashier")

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount_cents: int) -> str:
        """Charge the card."""
        CHARGES.append(current_try())
        if current_try() == 1:
            raise CutOff
        return "receipt r-live"

    with make_dag(dag_id, retries=1) as dag:
        AgentOperator(task_id="charge", prompt="Settle invoice 118", agent=agent, durable=True)
    return dag


def _command() -> list[str]:
    """``airflow pydantic-ai``, or the console script on Airflow 3.1 (which does not read providers' cli entry)."""
    return [str(AIRFLOW_BIN), "pydantic-ai"] if airflow_reads_provider_cli() else [str(CONSOLE_SCRIPT)]


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_command(), "cache", "resolve", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def test_help_names_the_call_and_the_answers(encrypted_cache: dict[str, str]) -> None:
    result = _cli(encrypted_cache, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--call REF", "--happened", "--result JSON_OR_TEXT", "--rerun", "--fail", "--map-index"):
        assert option in result.stdout


def test_resolve_rerun_from_the_cli_then_clear_runs_the_call_again(
    encrypted_cache: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    dag = _cut_off_dag("resolve_cli_rerun")
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed" and CHARGES == [1], out[-5000:]
    [command] = set(re.findall(rf"({re.escape(RESOLVE)} .*? --call \w+) --rerun", out))
    ids = [dr.dag_id, dr.run_id, "charge"]
    assert command.startswith(f"{RESOLVE} resolve_cli_rerun {dr.run_id} charge --call ")

    unknown = _cli(encrypted_cache, *ids, "--call", "nope", "--rerun")
    assert unknown.returncode == 1
    assert "--call 'nope' matches no call in doubt" in unknown.stderr
    assert "tool charge_card (call charge-1), asked for by step 1, was started by try 1" in unknown.stderr
    no_answer = _cli(encrypted_cache, *ids, "--call", "charge-1")
    assert no_answer.returncode == 1 and "--happened --result JSON_OR_TEXT" in no_answer.stderr

    show = subprocess.run(
        [*_command(), "cache", "show", *ids],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **encrypted_cache},
    )
    assert show.returncode == 0, show.stderr
    ref = command.rsplit(" ", 1)[1]
    assert (
        f"  {ref}  tool charge_card  call charge-1: outcome unknown: asked for by step 1, started by try 1 at "
        in show.stdout
    )
    assert f"resolve: {command.split(' --call ')[0]} --call {ref} --happened" in show.stdout

    resolved = _cli(encrypted_cache, *ids, "--call", command.rsplit(" ", 1)[1], "--rerun")
    assert resolved.returncode == 0, resolved.stderr
    assert "Recorded for tool charge_card (call charge-1)" in resolved.stdout
    assert f"answered 'run it again' ({RESOLVE})" in resolved.stdout
    assert "The task instance is failed. The next try that reaches the call applies it" in resolved.stdout

    state, try_number = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert (state, try_number) == ("success", 3), out[-5000:]
    assert CHARGES == [1, 3]
    assert f"answered 'run it again' ({RESOLVE}): it runs again" in out


def test_resolve_happened_with_a_json_result_replays_it(
    encrypted_cache: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    dag = _cut_off_dag("resolve_cli_happened")
    dr = run_dag(dag)
    assert dr.state == "failed"
    ids = [dr.dag_id, dr.run_id, "charge"]
    resolved = _cli(encrypted_cache, *ids, "--call", "charge-1", "--happened", "--result", '{"receipt": "r-1042"}')
    assert resolved.returncode == 0, resolved.stderr
    assert "answered 'it happened'" in resolved.stdout

    state, _ = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert state == "success", out[-5000:]
    assert CHARGES == [1]
    assert MODEL_SAW == ['{"receipt": "r-1042"}']


def test_resolve_happened_needs_a_result_or_no_result_which_the_model_reads(
    encrypted_cache: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    dag = _cut_off_dag("resolve_cli_no_result")
    dr = run_dag(dag)
    assert dr.state == "failed"
    ids = [dr.dag_id, dr.run_id, "charge"]
    bare = _cli(encrypted_cache, *ids, "--call", "charge-1", "--happened")
    assert bare.returncode == 1 and "--happened needs the result the model is given" in bare.stderr
    assert "--no-result" in _cli(encrypted_cache, "--help").stdout

    resolved = _cli(encrypted_cache, *ids, "--call", "charge-1", "--happened", "--no-result")
    assert resolved.returncode == 0, resolved.stderr
    assert "answered 'it happened, result unknown'" in resolved.stdout

    state, _ = clear_and_rerun(dag, dr, "charge")
    out = capfd.readouterr().out
    assert state == "success", out[-5000:]
    assert CHARGES == [1]
    assert [json.dumps("The call happened; its result is unknown. Do not call it again.")] == MODEL_SAW
