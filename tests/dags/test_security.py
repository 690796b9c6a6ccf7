"""Secrets never reach the cache in clear text; encrypted entries are authenticated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from tests.helpers.airflow_run import current_try, make_dag, run_dag
from tests.helpers.compat import clear_fernet_cache
from tests.helpers.durable import stored_entries, unpack
from tests.helpers.operator_runs import durable_operator

pytestmark = pytest.mark.usefixtures("airflow_db")

SECRET = "sk-live-7f3a9c1e5b2d4f60"
LEAKY_RESULT = "customer record: plan=gold, mood=happy, favourite_colour=teal"


def _dag(dag_id: str, tool_calls: dict[str, int], on_retry: Any, leak_secret: bool = True):
    def fetch_customer(customer_id: int) -> str:
        """Fetch a customer record (and, carelessly, an API key)."""
        tool_calls["fetch_customer"] += 1
        return f"{LEAKY_RESULT} api_key={SECRET}" if leak_secret else f"{LEAKY_RESULT} api_key=none"

    def lookup_plan(customer_id: int) -> str:
        """Look up the plan."""
        tool_calls["lookup_plan"] += 1
        return LEAKY_RESULT

    return _agent_dag(dag_id, [fetch_customer, lookup_plan, _flaky_notify(tool_calls)], on_retry)


def _two_tool_dag(dag_id: str, calls: dict[str, int], result: Any, on_retry: Any):
    """``fetch`` returns ``result()``; ``notify`` fails on the first try only."""

    def fetch(customer_id: int) -> Any:
        """Fetch a record."""
        calls["fetch"] += 1
        return result()

    return _agent_dag(dag_id, [fetch, _flaky_notify(calls)], on_retry)


def _flaky_notify(calls: dict[str, int]) -> Any:
    def notify(customer_id: int) -> str:
        """Notify; down on the first try."""

        calls["notify"] += 1
        if current_try() == 1:
            raise ConnectionError("down")
        return "ok"

    return notify


def _agent_dag(dag_id: str, tools: list[Any], on_retry: Any):
    """One durable TestModel agent with ``tools``, one retry."""

    with make_dag(dag_id) as dag:
        durable_operator(*tools, task_id="agent", prompt="Check customer 7.", on_retry_callback=on_retry)
    return dag


@pytest.fixture(autouse=True)
def fresh_fernet():
    """Airflow caches the Fernet object per process; each test sets its own key."""
    clear_fernet_cache()
    yield
    clear_fernet_cache()


def _snapshot(base: Path, into: dict[str, bytes]):
    def callback(context: Any) -> None:
        into.update(stored_entries(base))  # single entries, and packed ones byte for byte

    return callback


def test_masked_secrets_never_reach_the_cache(cache_base, capfd):
    from airflow.sdk.log import mask_secret

    mask_secret(SECRET)
    stored: dict[str, bytes] = {}
    calls = {"fetch_customer": 0, "lookup_plan": 0, "notify": 0}
    dr = run_dag(_dag("security_masking", calls, _snapshot(cache_base, stored)))
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert stored, "something was cached"
    assert not any(SECRET.encode() in data for data in stored.values())
    assert any(LEAKY_RESULT.encode() in data for data in stored.values()), "unencrypted entries are plain JSON"
    assert "contains a value registered as secret; it is not cached" in out
    # The step holding the secret was not cached, so it ran again; the harmless one replayed.
    assert calls == {"fetch_customer": 2, "lookup_plan": 1, "notify": 2}


def test_encrypted_cache_is_unreadable_and_tampering_is_rejected(cache_base, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ENCRYPT", "True")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
    stored: dict[str, bytes] = {}
    tampered: list[str] = []

    def snapshot_and_tamper(context: Any) -> None:
        _snapshot(cache_base, stored)(context)
        unpack(cache_base)  # the failed try packed its entries: tamper with them one by one
        entries = sorted(cache_base.rglob("tool-*.json"))
        # An attacker with write access: swaps one encrypted tool entry for a forged plain one...
        victim = entries[0]
        forged = {"format": "airflow-pydantic-ai/step", "version": 1, "kind": "tool"}
        victim.write_text(json.dumps(forged))
        # ...and re-encrypts another one under a key of their own.
        other = entries[1]
        other.write_text(
            json.dumps(
                {
                    "format": "airflow-pydantic-ai/step",
                    "version": 1,
                    "encrypted": Fernet(Fernet.generate_key()).encrypt(b"{}").decode(),
                }
            )
        )
        tampered.extend([victim.name, other.name])

    calls = {"fetch_customer": 0, "lookup_plan": 0, "notify": 0}
    dr = run_dag(_dag("security_encryption", calls, snapshot_and_tamper, leak_secret=False))
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert len(stored) == 3  # model step and two tools (notify failed), encrypted
    for data in stored.values():
        assert LEAKY_RESULT.encode() not in data and b"fetch_customer" not in data
        assert "encrypted" in json.loads(data)
    for name in tampered:
        assert f"{name}: it " in out and "will run live" in out
    assert "failed authentication" in out and "not encrypted, but [pydantic_ai] durable_encrypt is on" in out
    # The model step replayed; both tampered tools ran live again.
    assert calls == {"fetch_customer": 2, "lookup_plan": 2, "notify": 2}
    assert "Durable: replayed 1 cached steps (1 model, 0 tool)" in out


def test_encryption_without_a_fernet_key_fails_at_start(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", f"file://{tmp_path}")
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_ENCRYPT", "True")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "")
    calls = {"fetch_customer": 0, "lookup_plan": 0, "notify": 0}
    dag = _dag("security_no_key", calls, None)
    dag.default_args["retries"] = 0
    for task in dag.tasks:
        task.retries = 0
    dr = run_dag(dag)
    out = capfd.readouterr().out
    assert dr.state == "failed"
    assert "durable_encrypt is on but [core] fernet_key is empty" in out
    assert calls == {"fetch_customer": 0, "lookup_plan": 0, "notify": 0}


def test_keys_that_only_sound_sensitive_do_not_stop_caching(cache_base, capfd):
    """Only registered secret *values* keep a step out of the cache, not key names like ``tokens``."""
    record = {"tokens": ["hello", "world"], "password_hint": "the usual", "api_key_set": True}
    calls = {"fetch": 0, "notify": 0}
    dr = run_dag(_two_tool_dag("security_innocent_keys", calls, lambda: record, None))
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert "registered as secret" not in out
    assert calls == {"fetch": 1, "notify": 2}, "the record was cached and replayed"


@pytest.mark.parametrize(
    "shape",
    ["json-escaped-characters", "inside-bytes", "inside-a-nested-key"],
)
def test_a_secret_never_reaches_the_stored_bytes_in_any_form(cache_base, capfd, shape):
    from airflow.sdk.log import mask_secret
    from pydantic_ai.messages import BinaryContent

    secret = 'pa"ss\\word-\u00e9-91c2f0' if shape == "json-escaped-characters" else "sk-live-0b7e1d93aa41"
    results = {
        "json-escaped-characters": lambda: f"connected with {secret}",
        "inside-bytes": lambda: BinaryContent(data=f"token={secret}".encode(), media_type="text/plain"),
        "inside-a-nested-key": lambda: {"customers": [{secret: "gold"}]},
    }
    mask_secret(secret)
    stored: dict[str, bytes] = {}
    calls = {"fetch": 0, "notify": 0}
    dr = run_dag(
        _two_tool_dag(f"security_forms_{shape.replace('-', '_')}", calls, results[shape], _snapshot(cache_base, stored))
    )
    out = capfd.readouterr().out
    assert dr.state == "success"
    assert stored, "the other steps were cached"
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    for data in stored.values():
        text = data.decode()
        assert not any(form in text for form in forms)
        assert secret.encode() not in data
    assert "registered as secret" in out
    assert calls["fetch"] == 2, "the step holding the secret was not cached, so it ran again"
