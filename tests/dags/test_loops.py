"""Airflow 3.4 task-group loops: every iteration of a durable agent task has a cache of its own.

Inside a loop one task id runs several times in one DAG run (``region_id`` / ``region_index`` tell
the task instances apart). Each iteration records, replays and deletes only its own steps, and the
``cache`` commands name the iteration.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from typing import Any

import pytest
from packaging.version import Version
from pydantic_ai.toolsets import FunctionToolset
from tests.helpers.airflow_run import make_dag, run_dag
from tests.helpers.compat import airflow_version
from tests.helpers.operator_runs import durable_operator
from tests.helpers.task_logs import SUMMARY, summaries

pytestmark = [
    pytest.mark.usefixtures("airflow_db", "cache_base"),
    pytest.mark.skipif(
        airflow_version() < Version("3.4"),
        reason=f"task-group loops are new in Airflow 3.4 (installed: {airflow_version()})",
    ),
]

CALLS: Counter[tuple[str, int]] = Counter()
"""(tool, loop iteration) -> calls."""
FAILS: dict[str, set[int]] = {"once": set(), "always": set()}
"""Iterations whose notify_team fails on try 1 only, and on every try."""


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    """This module's counts start empty (the cache folder is the dags tier's ``cache_base``)."""
    CALLS.clear()
    FAILS["once"], FAILS["always"] = set(), set()


def _iteration_and_try() -> tuple[int, int]:
    from airflow.sdk import get_current_context

    context = get_current_context()
    return context["loop"].index, context["ti"].try_number


def fetch_ticket(ticket_id: int) -> dict[str, Any]:
    """Fetch a ticket."""
    iteration, _ = _iteration_and_try()
    CALLS["fetch_ticket", iteration] += 1
    return {"id": ticket_id, "title": "Login page times out"}


def notify_team(ticket_id: int) -> str:
    """Notify the team."""
    iteration, try_number = _iteration_and_try()
    CALLS["notify_team", iteration] += 1
    if iteration in FAILS["always"] or (iteration in FAILS["once"] and try_number == 1):
        raise ConnectionError(f"chat API down (iteration {iteration}, try {try_number})")
    return "posted"


def looped_dag(dag_id: str, *, terminal_after_failure: bool = False):
    """Three iterations of a group holding one durable agent task (and, optionally, a terminal task that
    runs whatever the agent task's state, so that an iteration that failed for good does not end the loop)."""
    from airflow.sdk import task, task_group

    with make_dag(dag_id) as dag:

        @task_group
        def triage_round() -> Any:
            agent = durable_operator(fetch_ticket, notify_team)
            if not terminal_after_failure:
                return agent

            @task(trigger_rule="all_done")
            def done() -> str:
                return "round done"

            return agent >> done()

        triage_round.loop(max_iterations=3)
    return dag


def _summaries_by_iteration(out: str) -> dict[int, list[tuple[int, ...]]]:
    """The summary lines of each iteration, in order (an iteration's lines follow its cache line)."""
    found: dict[int, list[tuple[int, ...]]] = {}
    iteration = None
    for line in out.splitlines():
        cache_line = re.search(r"the cache of this task instance \(loop iteration (\d+)\)", line)
        if cache_line:
            iteration = int(cache_line.group(1))
        summary = SUMMARY.search(line)
        if summary and iteration is not None:
            found.setdefault(iteration, []).append(tuple(int(group) for group in summary.groups()))
    return found


def test_each_iteration_replays_only_its_own_steps(capfd, cache_base):
    FAILS["once"] = {1}
    dr = run_dag(looped_dag("e2e_looped_agent"))
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert "left by an earlier run" not in out
    clean = [(0, 0, 0, 4, 2, 2)]
    assert _summaries_by_iteration(out) == {
        0: clean,
        # Try 1: the model step and fetch_ticket recorded, notify_team failed. Try 2 replays those two only.
        1: [(0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)],
        2: clean,
    }
    assert CALLS == {
        ("fetch_ticket", 0): 1,
        ("notify_team", 0): 1,
        ("fetch_ticket", 1): 1,
        ("notify_team", 1): 2,
        ("fetch_ticket", 2): 1,
        ("notify_team", 2): 1,
    }
    # Each iteration printed a location of its own, naming the iteration in its delete command.
    locations = set(re.findall(r"the cache of this task instance \(loop iteration \d+\) is (\S+)", out))
    assert len(locations) == 3
    assert all(re.search(r"/triage_round\.triage/-1\.loop\d\.[0-9a-f-]{36}/$", location) for location in locations)
    assert "cache rm e2e_looped_agent" in out and "--iteration 1" in out
    assert not any(path.is_file() for path in cache_base.rglob("*")), "every iteration deleted its cache on success"


def test_iterations_that_failed_for_good_keep_caches_the_commands_tell_apart(capfd, cache_base, tmp_path_factory):
    from airflow_pydantic_ai.cli import cache_command

    FAILS["always"] = {0, 2}
    dr = run_dag(looped_dag("e2e_looped_kept", terminal_after_failure=True))
    out = capfd.readouterr().out

    assert "left by an earlier run" not in out
    by_iteration = _summaries_by_iteration(out)
    # Iteration 2's first try finds nothing of iteration 0's cache (both failed for good, both kept).
    assert by_iteration[0] == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 1, 0, 1)]
    assert by_iteration[2] == [(0, 0, 0, 3, 1, 2), (2, 1, 1, 1, 0, 1)]
    assert by_iteration[1] == [(0, 0, 0, 4, 2, 2)]

    listed = _cli(cache_command.cache_list, capfd, dag_id="e2e_looped_kept", run_id=None, task_id=None)
    assert [(row["task_id"], row["iteration"], row["map_index"], row["task_state"]) for row in listed] == [
        ("triage_round.triage", 0, -1, "failed"),
        ("triage_round.triage", 2, -1, "failed"),
    ]
    assert len({row["location"] for row in listed}) == 2

    shown = _cli(cache_command.cache_show, capfd, iteration=2, step=None, full=False)
    assert [step["kind"] for step in shown] == ["model", "tool"]

    _the_view_offers_each_iteration(tmp_path_factory)

    with pytest.raises(SystemExit, match=r"loop iterations 0, 2.*--iteration"):
        _cli(cache_command.cache_show, capfd, iteration=None, step=None, full=False)

    doomed = _cli(cache_command.cache_gc, capfd, dry_run=True, yes=False)
    assert [(row["iteration"], row["task_state"]) for row in doomed] == [(0, "failed"), (2, "failed")]

    _cli(cache_command.cache_rm, capfd, iteration=0, from_step=None, dry_run=False, yes=True, force=False, json=False)
    remaining = _cli(cache_command.cache_list, capfd, dag_id="e2e_looped_kept", run_id=None, task_id=None)
    assert [row["iteration"] for row in remaining] == [2]
    del dr


def _the_view_offers_each_iteration(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The "Durable cache" view (in this process, with Airflow's auth manager): the UI's link names no
    iteration, so the view lists the task's iterations; each link shows that iteration's steps."""
    from fastapi.testclient import TestClient
    from tests.helpers.hitl_api import HitlApi

    from airflow_pydantic_ai.ui.app import MOUNT_PATH, create_app

    api = HitlApi.start(tmp_path_factory.mktemp("api"))
    view = TestClient(create_app())
    headers = {"Authorization": f"Bearer {api.token('alice')}"}
    ids = {"dag_id": "e2e_looped_kept", "run_id": _only_run_id("e2e_looped_kept"), "task_id": "triage_round.triage"}

    listing = view.get("/", params={**ids, "map_index": "{MAP_INDEX}"}, headers=headers)
    assert listing.status_code == 200, listing.text
    assert "One cache per loop iteration" in listing.text
    assert re.findall(r"Loop iteration (\d)", listing.text) == ["0", "2"]
    assert f"{MOUNT_PATH}/?" in listing.text and "iteration=2" in listing.text

    shown = view.get("/", params={**ids, "iteration": 2}, headers=headers)
    assert shown.status_code == 200, shown.text
    assert "(loop iteration 2)" in shown.text and "fetch_ticket" in shown.text
    assert view.get("/", params={**ids, "iteration": 1}, headers=headers).status_code == 404


def _cli(command: Any, capfd: pytest.CaptureFixture[str], **given: Any) -> Any:
    values: dict[str, Any] = {
        "dag_id": "e2e_looped_kept",
        "run_id": None,
        "task_id": "triage_round.triage",
        "map_index": -1,
        "iteration": None,
        "older_than": None,
        "output": "json",
    }
    values.update(given)
    if command.__name__ in ("cache_show", "cache_rm") and values["run_id"] is None:
        values["run_id"] = _only_run_id("e2e_looped_kept")
    capfd.readouterr()
    command(argparse.Namespace(**values))
    out = capfd.readouterr().out
    return json.loads(out) if values["output"] == "json" and out.strip().startswith("[") else out


def _only_run_id(dag_id: str) -> str:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id)).one()


def test_each_map_index_of_each_iteration_has_its_own_cache(capfd, cache_base):
    """A mapped agent task inside a loop: Airflow gives each iteration's expansion a region of its own."""
    from airflow.sdk import task_group

    from airflow_pydantic_ai.operators.agent import AgentOperator

    FAILS["once"] = {1}
    with make_dag("e2e_looped_mapped") as dag:

        @task_group
        def triage_round() -> Any:
            return AgentOperator.partial(
                task_id="triage", model_id="test", toolsets=[FunctionToolset([fetch_ticket, notify_team])], durable=True
            ).expand(prompt=["Triage ticket 1.", "Triage ticket 2."])

        triage_round.loop(max_iterations=2)
    dr = run_dag(dag)
    out = capfd.readouterr().out

    assert dr.state == "success"
    assert "left by an earlier run" not in out
    places = re.findall(
        r"the cache of this task instance \(loop iteration (\d)\) is \S+/(\d)\.loop\d\.([0-9a-f-]{36})/", out
    )
    # Iteration 0: two map indexes, one try each; iteration 1: two map indexes, two tries each.
    assert sorted({(iteration, index) for iteration, index, _ in places}) == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]
    assert len({region for iteration, _, region in places if iteration == "0"}) == 1
    assert len({region for _, _, region in places}) == 2, "a region per iteration, shared by its map indexes"
    found = summaries(out)
    clean, failed, replayed = (0, 0, 0, 4, 2, 2), (0, 0, 0, 3, 1, 2), (2, 1, 1, 2, 1, 1)
    assert sorted(found) == sorted([clean, clean, failed, failed, replayed, replayed])
    assert CALLS[("fetch_ticket", 1)] == 2, "each map index of iteration 1 replayed its own fetch_ticket"
