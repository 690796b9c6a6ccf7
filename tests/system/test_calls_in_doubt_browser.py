"""Two calls in doubt of one try, answered on the Required Actions page alone, in a real browser.

A real Airflow (scheduler, dag-processor, api-server; SQLite, LocalExecutor, the simple auth manager) runs
``tests/system/dags/two_doubts_dag.py``: the model asks for two ``at_most_once()`` charges in one answer, and the
first try is SIGKILLed once both charges happened. The retry finds both calls started and never finished and asks.
In headless Chromium (Debian's ``chromium``, driven by playwright) a person opens the task's Required Actions page,
sees one question about both calls ("2 calls wait for an answer"), sets each call's outcome to ``happened`` with a
receipt, and chooses "Answer per call". The task then succeeds without charging either card again.

A second run checks what ``docs/cli.rst`` says about clearing a run triggered without a logical date:
``airflow tasks clear`` clears nothing of it, ``clearTaskInstances`` with its ``dag_run_id`` runs its next try.

Skipped, with the reason, when Chromium or playwright is missing (``.ci/run`` installs both); slow (about two
minutes): deselect with ``-m "not scheduler"``.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from tests.helpers.compat import airflow_version
from tests.helpers.standalone import AirflowCluster, ClusterError, durable_cluster, user_env
from tests.helpers.task_logs import log_events
from tests.system.test_cache_view import CHROMIUM, CHROMIUM_ARGS, _no_browser

pytestmark = [
    pytest.mark.scheduler,
    pytest.mark.browser,
    pytest.mark.skipif(bool(_no_browser()), reason=_no_browser() or "-"),
    pytest.mark.skipif(
        airflow_version() < Version("3.3"),
        reason=f"Airflow {airflow_version()} defers the question to HITLTrigger, and this cluster runs no triggerer",
    ),
]

DAG_FILE = Path(__file__).parent / "dags" / "two_doubts_dag.py"
DAG_ID = "two_calls_in_doubt"  # as in DAG_FILE
TASK_ID = "charge"
USERS = {"admin": ("admin", "admin-password"), "alice": ("op", "alice-password")}
RUN_TIMEOUT = 180
SCREENSHOTS = (
    Path(os.environ["AIRFLOW_PYDANTIC_AI_SCREENSHOTS"]) if os.environ.get("AIRFLOW_PYDANTIC_AI_SCREENSHOTS") else None
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("two_doubts")


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[AirflowCluster]:
    (root / "auth").mkdir()
    extra_env = {
        "DOUBT_E2E_MARKER": str(root / "marker.txt"),
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
        **user_env(root / "auth", USERS),
    }
    with durable_cluster(root, DAG_FILE, extra_env, login=("admin", USERS["admin"][1]), ready_timeout=240) as cluster:
        yield cluster


def _charges(root: Path) -> list[str]:
    path = root / "marker.txt"
    return sorted(path.read_text().splitlines()) if path.exists() else []


def _wait_for_state(cluster: AirflowCluster, run_id: str, states: set[str], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    ti: Any = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        ti = cluster.task_instance(DAG_ID, run_id, TASK_ID)
        if ti["state"] in states:
            return ti
        time.sleep(1)
    raise ClusterError(f"{TASK_ID} still {ti and ti['state']!r} after {timeout} s:\n{cluster.tails()}")


def _shoot(page: Any, name: str) -> None:
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def _log_in(browser: Any, cluster: AirflowCluster, user: str) -> Any:
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{cluster.base_url}/")
    page.get_by_label(re.compile("username", re.IGNORECASE)).fill(user)
    page.get_by_label(re.compile("password", re.IGNORECASE)).fill(USERS[user][1])
    page.get_by_role("button", name=re.compile("sign in|log in|login", re.IGNORECASE)).click()
    page.wait_for_url(re.compile(r".*/(dags|home)?$|.*/\?.*|.*/$"))
    page.wait_for_load_state("networkidle")
    return page


def _goto(page: Any, url: str) -> None:
    try:
        page.goto(url)
    except Exception as error:  # the UI's own late navigation after the login aborted ours: once more
        if "interrupted by another navigation" not in str(error) and "ERR_ABORTED" not in str(error):
            raise
        page.wait_for_load_state("networkidle")
        page.goto(url)


def test_two_calls_in_doubt_are_answered_on_the_required_actions_page_alone(
    cluster: AirflowCluster, root: Path
) -> None:
    from playwright.sync_api import sync_playwright

    cluster.wait_for_dag(DAG_ID, timeout=60)
    run_id = cluster.trigger(DAG_ID)
    ti = _wait_for_state(cluster, run_id, {"awaiting_input"}, timeout=RUN_TIMEOUT)
    assert ti["try_number"] == 2
    assert _charges(root) == ["charge_card acme try=1", "charge_card globex try=1"]
    cluster.wait_until_park_seen(DAG_ID, run_id, TASK_ID, try_number=2)  # the Airflow 3.3.2 race (docs/approval.rst)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = _log_in(browser, cluster, "alice")
            run = urllib.parse.quote(run_id, safe="")
            _goto(page, f"{cluster.base_url}/dags/{DAG_ID}/runs/{run}/tasks/{TASK_ID}/required_actions")
            page.get_by_text("did these 2 tool calls happen?").first.wait_for()
            page.get_by_text("2 calls wait for an answer.").first.wait_for()
            _shoot(page, "two-doubts-question.png")
            outcomes = page.locator("[id^='element_outcome_']")
            assert outcomes.count() == 2
            refs = [str(outcomes.nth(i).get_attribute("id")).removeprefix("element_outcome_") for i in range(2)]
            for ref in refs:
                page.locator(f"#element_outcome_{ref} input[role=combobox]").click()
                page.get_by_role("option", name="happened", exact=True).click()
                page.locator(f"#element_result_{ref}").fill(  # the label names no input (Airflow 3.3)
                    f'{{"receipt": "r-{ref}"}}'
                )
            _shoot(page, "two-doubts-answered.png")
            page.get_by_test_id("hitl-option-Answer per call").click()
            page.get_by_text(re.compile("alice", re.IGNORECASE)).first.wait_for()
            page.context.close()
        finally:
            browser.close()

    state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    log = cluster.task_log(DAG_ID, run_id, TASK_ID, 2)
    assert state == "success", f"{log}\n{cluster.tails()}"
    assert cluster.task_instance(DAG_ID, run_id, TASK_ID)["try_number"] == 2
    assert _charges(root) == ["charge_card acme try=1", "charge_card globex try=1"]  # one charge each, never again
    events = log_events(log)
    replayed = [e for e in events if "replayed as alice answered 'it happened' (the Required Actions page)" in e]
    assert ["charge-acme" in replayed[0], "charge-globex" in replayed[1]] == [True, True], events
    # The model was told each receipt the person gave, as what its call returned.
    settled = str(cluster.xcom_value(DAG_ID, run_id, TASK_ID))
    assert all(f"r-{ref}" in settled for ref in refs) and "charged again" not in settled, settled


def test_tasks_clear_leaves_a_run_without_a_logical_date_and_the_rest_clear_reruns_it(
    cluster: AirflowCluster, root: Path
) -> None:
    """What ``docs/cli.rst`` says about clearing: the runs the UI and the REST API trigger have no logical date, and
    ``airflow tasks clear`` (which selects by logical date) clears nothing of them; ``clearTaskInstances`` with the
    ``dag_run_id`` (what the UI's Clear sends) runs the task's next try."""
    cluster.wait_for_dag(DAG_ID, timeout=60)
    run_id = cluster.trigger(DAG_ID)  # logical_date None, as the UI's trigger
    ti = _wait_for_state(cluster, run_id, {"awaiting_input"}, timeout=RUN_TIMEOUT)
    body = {"chosen_options": ["Fail the task"], "params_input": {}}
    # the Airflow 3.3.2 race (docs/approval.rst)
    cluster.wait_until_park_seen(DAG_ID, run_id, TASK_ID, ti["try_number"])
    cluster.login_as("alice", USERS["alice"][1])
    cluster.hitl_respond(DAG_ID, run_id, TASK_ID, body)
    assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "failed", cluster.tails()
    answered = log_events(cluster.task_log(DAG_ID, run_id, TASK_ID, ti["try_number"]))
    assert any("alice answered 'fail the task'" in e for e in answered), answered  # the answer failed it, not a race
    cluster.login_as("admin", USERS["admin"][1])

    cleared = cluster.cli("tasks", "clear", DAG_ID, "--task-regex", f"^{TASK_ID}$", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    time.sleep(5)
    ti = cluster.task_instance(DAG_ID, run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("failed", 2), (ti, cleared.stdout)  # nothing cleared

    cluster.clear_task(DAG_ID, run_id, TASK_ID)  # POST /api/v2/dags/{dag_id}/clearTaskInstances, dag_run_id
    ti = _wait_for_state(cluster, run_id, {"running", "queued", "scheduled", "failed", "success"}, timeout=60)
    assert cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "failed"  # the answer 'fail' stays
    again = cluster.task_instance(DAG_ID, run_id, TASK_ID)["try_number"]
    assert again >= 3  # ran again (and its retry, if any)
    log = cluster.task_log(DAG_ID, run_id, TASK_ID, again)
    events = log_events(log)
    assert not any("a person is asked whether it happened" in e for e in events), events  # not asked again
    assert "alice answered 'fail the task'" in log.read_text(), events  # the task's error names the answer
