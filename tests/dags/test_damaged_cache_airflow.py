"""A damaged cache between two tries of a real ``dag.test()`` retry: a different kind of damage on each of
several entries at once; each is ignored with a warning naming it and its step runs live (the same on a
local store without Airflow, one damage at a time: tests/unit/test_faults_damage.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.helpers.damage import DAMAGES, PROMPT, build_agent, entries_on_disk, expected_output
from tests.helpers.durable import unpack
from tests.helpers.task_logs import summaries

AIRFLOW_DAMAGES = (
    "truncated",
    "garbled",
    "empty",
    "wrong-schema-field",
    "future-schema-version",
    "foreign-json-object",
    "key-mismatch-copy-of-sibling",
)


def test_damaged_entries_between_two_airflow_tries(airflow_db, cache_base, capfd):
    from tests.helpers.airflow_run import current_try, make_dag, run_dag, task_states, xcom_value

    from airflow_pydantic_ai.operators.agent import AgentOperator

    fetches = len(AIRFLOW_DAMAGES) + 1
    calls: Counter[str] = Counter()
    agent = build_agent(calls, {"fail": False}, fetches=fetches)

    @agent.output_validator
    def fail_on_first_try(output: str) -> str:
        if current_try() == 1:
            raise RuntimeError("result store unavailable (first try only)")
        return output

    victims: dict[str, str] = {}

    def damage(context: Any) -> None:
        ti = context["ti"]
        root = cache_base / ti.dag_id / ti.run_id / ti.task_id / "-1"
        unpack(root)  # the failed try packed its entries; damage them one by one, as single entries
        entries = entries_on_disk(root)
        for step, name in enumerate(AIRFLOW_DAMAGES, start=1):
            victim = entries[("tool", step)]
            DAMAGES[name](victim, entries[("tool", fetches)])
            victims[name] = victim.name

    with make_dag("faults_damaged_cache") as dag:
        AgentOperator(task_id="triage", prompt=PROMPT, agent=agent, durable=True, on_retry_callback=damage)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success", out[-5000:]
    assert task_states(dr)[("triage", -1)] == ("success", 2)
    assert xcom_value(dr, "triage") == expected_output(fetches)
    assert set(victims) == set(AIRFLOW_DAMAGES)
    lines = out.splitlines()
    for damage_kind, name in victims.items():
        warned = [line for line in lines if name in line and "ignoring cache entry" in line]
        assert warned, f"{damage_kind}: no warning names {name}"
        assert all("[warning" in line and "will run live" in line for line in warned), warned
    # Try 1 recorded every step (its output failed validation); try 2: the damaged fetches ran live.
    model_steps = fetches + 2  # fetches, notify, final answer
    assert summaries(out) == [
        (0, 0, 0, model_steps + fetches + 1, model_steps, fetches + 1),
        (model_steps + 2, model_steps, 2, len(AIRFLOW_DAMAGES), 0, len(AIRFLOW_DAMAGES)),
    ]
    assert calls["notify"] == 1 and calls[f"fetch {fetches}"] == 1
    assert all(calls[f"fetch {step}"] == 2 for step in range(1, fetches))
