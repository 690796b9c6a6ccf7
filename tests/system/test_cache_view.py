"""The "Durable cache" view in a real browser, on a real api-server, scheduler and metadata DB.

One Airflow (api-server, scheduler, dag-processor; SQLite, LocalExecutor, the simple auth manager
with an admin and a viewer) serves the whole module. Two runs of a durable task fail on their first
try and leave a five-step cache. In headless Chromium (Debian's ``chromium``, driven by playwright,
never a downloaded browser) the admin logs in, opens the task instance, its "Durable cache" tab,
sees the steps, opens one, and clicks "Run live from this step" on step 2 (first run) or "Delete
cache" (second run) and confirms. Each task instance is then cleared: its real second try replays
exactly what the button left and runs the rest live.

The two browser tests are skipped, with the reason, when Chromium or playwright is missing (``.ci/run``
installs both); the endpoint tests (who may do what, cross-site requests, ids that try to leave the
prefix, refusal while running) still run against the real api-server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.compat import keep_task_state_to_resume
from tests.helpers.standalone import AirflowCluster
from tests.helpers.task_logs import log_events, summaries

CHROMIUM = Path(os.environ.get("AIRFLOW_PYDANTIC_AI_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _no_browser() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    if not shutil.which(str(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return ""


pytestmark = pytest.mark.scheduler  # skipped when AIRFLOW_PYDANTIC_AI_SKIP_SCHEDULER=1 (conftest.py)
DAG_FILE = Path(__file__).parent / "dags" / "cache_view_dag.py"
DAG_ID = "durable_cache_view"  # as in DAG_FILE
OTHER_DAG_ID = "another_dag"
TASK_ID = "triage"
USERS = {"admin": ("admin", "admin-pw-1"), "viewer": ("viewer", "viewer-pw-1")}
RUN_TIMEOUT = 240  # seconds from trigger (or clear) to a finished run; about 10 s on an idle machine
SCREENSHOTS = (
    Path(os.environ.get("AIRFLOW_PYDANTIC_AI_SCREENSHOTS", ""))
    if os.environ.get("AIRFLOW_PYDANTIC_AI_SCREENSHOTS")
    else None
)


class Site:
    """The running cluster, the two failed runs, and HTTP helpers."""

    def __init__(self, cluster: AirflowCluster, root: Path, runs: dict[str, str]) -> None:
        self.cluster = cluster
        self.root = root
        self.runs = runs

    @property
    def base(self) -> str:
        return self.cluster.base_url

    def view_query(self, run_id: str, dag_id: str = DAG_ID, task_id: str = TASK_ID, map_index: str = "-1") -> str:
        return urllib.parse.urlencode({"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index})

    def http(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        cookie: str | None = None,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=dict(headers or {}))
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        if cookie:
            request.add_header("Cookie", f"_token={cookie}")
        if data is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=20) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")

    def cache_folder(self, run_id: str) -> Path:
        return self.root / "cache" / DAG_ID / urllib.parse.quote(run_id, safe="-_.:+~@=,") / TASK_ID / "-1"

    def entries(self, run_id: str) -> int:
        """How many step entries the task instance's cache holds, single or packed (not the per-try records)."""
        from tests.helpers.durable import stored_entries

        folder = self.cache_folder(run_id)
        return len(stored_entries(folder)) if folder.exists() else 0

    def calls(self) -> list[tuple[str, int]]:
        path = self.root / "tool-calls.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(tool, int(number)) for tool, number in (line.split() for line in lines)]

    def summaries(self, run_id: str, try_number: int) -> list[tuple[int, ...]]:
        return summaries(log_events(self.cluster.task_log(DAG_ID, run_id, TASK_ID, try_number)))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("cache_view")
    fail_marker = root / "fail-notify"
    fail_marker.write_text("the chat API is down")
    cluster = AirflowCluster.create(
        root,
        dag_files=[DAG_FILE],
        extra_env={
            "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{root / 'cache'}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
            "AIRFLOW__API__SECRET_KEY": "cache-view-test-secret",
            # A busy machine makes the api-server's first answers slow; the default (5 s) kills the task.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
            "CACHE_VIEW_FAIL": str(fail_marker),
            "CACHE_VIEW_CALLS": str(root / "tool-calls.txt"),
            "CACHE_VIEW_HOLD": str(root / "hold-fetch"),
        },
    )
    cluster.login = USERS["admin"]
    # The simple auth manager keeps the passwords it has generated in this file; known ones are kept.
    (cluster.home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps(dict(USERS.values())))
    started = time.monotonic()
    with cluster.running(ready_timeout=240, migrate_timeout=240):
        cluster.wait_for_dag(DAG_ID, timeout=120)
        runs = {name: cluster.trigger(DAG_ID) for name in ("fork", "delete", "http")}
        for run_id in runs.values():
            state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
            assert state == "failed", f"try 1 should fail and keep its cache\n{cluster.tails()}"
        fail_marker.unlink()
        print(f"cluster up and both runs failed after {time.monotonic() - started:.1f} s")
        yield Site(cluster, root, runs)


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def log_in(browser: Any, site: Site, user: str) -> Any:
    """A page of a fresh browser context, logged in through the simple auth manager's form."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{site.base}/")
    username, password = USERS[user]
    page.get_by_label(re.compile("username", re.IGNORECASE)).fill(username)
    page.get_by_label(re.compile("password", re.IGNORECASE)).fill(password)
    page.get_by_role("button", name=re.compile("sign in|log in|login", re.IGNORECASE)).click()
    page.wait_for_url(re.compile(r".*/(dags|home)?$|.*/\?.*|.*/$"))
    # The UI may still navigate on its own after the login (Airflow 3.1 goes to "/" once more): a page.goto
    # started before that is aborted ("interrupted by another navigation", net::ERR_ABORTED).
    page.wait_for_load_state("networkidle")
    return page


def open_cache_tab(page: Any, site: Site, run_id: str) -> Any:
    """Open the task instance page, click its "Durable cache" tab; returns the view's frame."""
    url = f"{site.base}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}/tasks/{TASK_ID}"
    try:
        page.goto(url)
    except Exception as error:  # the UI's own late navigation aborted ours: once more, now that it is done
        if "interrupted by another navigation" not in str(error) and "ERR_ABORTED" not in str(error):
            raise
        page.wait_for_load_state("networkidle")
        page.goto(url)
    page.get_by_role("tab", name="Durable cache").or_(page.get_by_role("link", name="Durable cache")).first.click()
    frame = page.frame_locator("iframe[title='Durable cache']")
    frame.locator("h1", has_text="Durable cache").wait_for()
    return frame


def shoot(page: Any, name: str) -> None:
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / name))


def retry_and_wait(site: Site, run_id: str) -> None:
    # A clear that keeps the cache the buttons left: Airflow 3.4 discards it unless keep_task_state is set.
    site.cluster.clear_task(DAG_ID, run_id, TASK_ID, keep_task_state=keep_task_state_to_resume())
    state = site.cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    assert state == "success", site.cluster.tails()
    ti = site.cluster.task_instance(DAG_ID, run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("success", 2)


def step_rows(frame: Any) -> list[list[str]]:
    rows = frame.locator("table.steps tbody tr")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())]


@pytest.mark.browser
@pytest.mark.skipif(bool(_no_browser()), reason=_no_browser() or "-")
def test_run_live_from_step_2_then_a_real_retry_replays_only_step_1(site: Site, browser: Any) -> None:
    run_id = site.runs["fork"]
    page = log_in(browser, site, "admin")
    frame = open_cache_tab(page, site, run_id)

    rows = step_rows(frame)
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("1", "model", "function:triage-model"),
        ("2", "tool", "fetch_ticket"),
        ("3", "model", "function:triage-model"),
        ("4", "tool", "lookup_owner"),
        ("5", "model", "function:triage-model"),
    ], rows
    assert rows[1][3] == "call_fetch_ticket" and rows[1][4] == "1", rows
    # Tokens on the model steps only (FunctionModel has no price: no cost), and what a retry would replay.
    assert rows[0][7] and not rows[1][7] and not rows[0][8], rows
    assert frame.get_by_text(re.compile(r"A retry replays 5 steps \(3 model\): [\d,]+ tokens")).count() == 1
    first_try = "Durable: replayed 0 cached steps (0 model, 0 tool), executed 6 new steps (3 model, 3 tool)"
    assert frame.get_by_text(first_try).count() == 1
    assert frame.get_by_text(str(site.cache_folder(run_id))).count() == 1

    frame.locator("table.steps tbody tr").nth(1).get_by_role("link", name="Show").click()
    detail = frame.locator("section.detail pre")
    detail.wait_for()
    assert "Login page times out" in detail.inner_text()
    assert "ops@example.com" in detail.inner_text()
    shoot(page, "cache-view.png")

    # One action on the shown step (not a button on every row); the value shown plain, its stored form on request.
    assert frame.locator("table.steps").get_by_role("link", name="Run live from this step").count() == 0
    assert '"type": "json"' not in detail.inner_text()
    frame.locator("section.detail").get_by_role("link", name="Run live from this step").click()
    frame.get_by_text("Steps 2 to 5 (4 steps) are deleted").wait_for()
    shoot(page, "cache-view-confirm.png")
    frame.get_by_role("button", name="Run live from this step").click()
    frame.get_by_text("Deleted step 2 and every later step (4 steps)").wait_for()
    assert [row[:3] for row in step_rows(frame)] == [["1", "model", "function:triage-model"]]
    page.context.close()

    calls_before = len(site.calls())
    retry_and_wait(site, run_id)
    # Step 1 (the model's first answer) replays; every tool and the later model steps run live.
    assert site.summaries(run_id, 2) == [(1, 1, 0, 6, 3, 3)]
    assert site.calls()[calls_before:] == [("fetch_ticket", 2), ("lookup_owner", 2), ("notify_team", 2)]


@pytest.mark.browser
@pytest.mark.skipif(bool(_no_browser()), reason=_no_browser() or "-")
def test_delete_cache_then_a_real_retry_runs_every_step_live(site: Site, browser: Any) -> None:
    run_id = site.runs["delete"]
    page = log_in(browser, site, "admin")
    # The UI's colour mode (the view follows it), set before each document loads: an evaluate() right after the
    # log-in can land while the UI still navigates, and fail with "Execution context was destroyed".
    page.context.add_init_script("window.localStorage.setItem('theme', 'dark')")
    frame = open_cache_tab(page, site, run_id)
    assert len(step_rows(frame)) == 5
    assert frame.locator("html").get_attribute("data-theme") == "dark"
    shoot(page, "cache-view-dark.png")

    frame.get_by_role("link", name="Delete cache").click()
    frame.get_by_text("All 5 recorded steps of this task instance are deleted").wait_for()
    frame.get_by_role("button", name="Delete cache").click()
    frame.get_by_text("Nothing recorded for this task instance.").wait_for()
    assert not site.cache_folder(run_id).exists()
    page.context.close()

    calls_before = len(site.calls())
    retry_and_wait(site, run_id)
    assert site.summaries(run_id, 2) == [(0, 0, 0, 7, 4, 3)]
    assert site.calls()[calls_before:] == [("fetch_ticket", 2), ("lookup_owner", 2), ("notify_team", 2)]


@pytest.fixture(scope="module")
def doubt_run(site: Site) -> str:
    """A failed run whose cache also holds an at_most_once() call in each state (``tests/helpers/calls_in_doubt.py``),
    written by further attempts on the task instance's own cache after its try 1 failed."""
    from tests.helpers.calls_in_doubt import write_three_calls
    from tests.helpers.durable import DurableHarness

    from airflow_pydantic_ai.durable import TaskIdentity

    fail_marker = site.root / "fail-notify"
    fail_marker.write_text("the chat API is down")
    try:
        run_id = site.cluster.trigger(DAG_ID)
        assert site.cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "failed", site.cluster.tails()
    finally:
        fail_marker.unlink()
    harness = DurableHarness(base=str(site.root / "cache"), identity=TaskIdentity(DAG_ID, run_id, TASK_ID))
    harness.attempt = 1  # the task's own try 1 failed; these are tries 2 to 4
    # On a thread of its own: playwright's sync API (the browser fixture) keeps an event loop running on this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(write_three_calls, harness).result()
    return run_id


def test_the_view_lists_the_calls_in_doubt_above_the_steps(site: Site, doubt_run: str) -> None:
    from tests.helpers.calls_in_doubt import API_KEY

    admin = site.cluster.user_token(*USERS["admin"])
    status, page = site.http("GET", f"/pydantic-ai/cache/?{site.view_query(doubt_run)}", token=admin)

    assert status == 200, page[:500]
    calls, steps = page.split('<section class="calls">', 1)[1].split("<h2>Steps (", 1)
    assert "Calls in doubt (2)" in calls
    assert '<div class="call warning"' in calls and "tool send_invoice" in calls
    assert (
        re.search(r"Outcome unknown: asked for by step \d+, started by try 4 at ", calls) and "cache resolve" in calls
    )
    assert '<div class="call resolved"' in calls and "ana answered &#x27;it happened&#x27;" in calls
    assert API_KEY not in page and "reserve_seat" not in calls and "at most once</span>" in steps


@pytest.mark.browser
@pytest.mark.skipif(bool(_no_browser()), reason=_no_browser() or "-")
def test_the_calls_in_doubt_in_the_browser(site: Site, browser: Any, doubt_run: str) -> None:
    page = log_in(browser, site, "admin")
    frame = open_cache_tab(page, site, doubt_run)

    warning = frame.locator("div.call.warning")
    assert warning.count() == 1 and bool(
        re.search(r"Outcome unknown: asked for by step \d+, started by try 4", warning.inner_text())
    )
    assert "never finished" in warning.inner_text() and "--rerun" in warning.locator("pre.command").inner_text()
    resolved = frame.locator("div.call.resolved")
    assert resolved.count() == 1 and "ana answered 'it happened'" in resolved.inner_text()
    # Styled apart: the unanswered one as a warning, the answered one as a plain panel.
    colours = [card.evaluate("node => getComputedStyle(node).backgroundColor") for card in (warning, resolved)]
    assert colours[0] != colours[1], colours
    assert "at most once" in frame.locator("table.steps").inner_text()
    shoot(page, "cache-view-calls-in-doubt.png")
    page.context.close()


# --- the endpoints themselves, without a browser -------------------------------------------------


def form_token(page: str) -> str:
    match = re.search(r'name="form_token" value="([^"]+)"', page)
    assert match, page[:2000]
    return match.group(1)


def test_the_home_page_shows_no_plugin_import_error(site: Site) -> None:
    # The editable install of `make install` showed "Plugin 'pydantic_ai_durable_cache' already registered".
    errors = site.cluster.plugin_import_errors()
    assert errors["total_entries"] == 0, errors["import_errors"]


def test_a_viewer_sees_the_steps_but_gets_403_on_every_change(site: Site) -> None:
    viewer = site.cluster.user_token(*USERS["viewer"])
    query = site.view_query(site.runs["http"])

    status, page = site.http("GET", f"/pydantic-ai/cache/?{query}", token=viewer)
    assert status == 200 and "fetch_ticket" in page and "Steps (5)" in page
    for method, path in [
        ("GET", f"/pydantic-ai/cache/confirm?{query}&action=delete"),
        ("POST", f"/pydantic-ai/cache/delete?{query}"),
        ("POST", f"/pydantic-ai/cache/fork?{query}&step=2"),
    ]:
        assert site.http(method, path, token=viewer, form={} if method == "POST" else None)[0] == 403, path
        # With the UI's cookie and a token forged from an admin's page: still the auth manager's 403.
        assert (
            site.http(method, path, cookie=viewer, form={"form_token": "1.x"} if method == "POST" else None)[0] == 403
        ), path
    assert site.entries(site.runs["http"]) == 5
    assert site.http("GET", f"/pydantic-ai/cache/?{query}")[0] == 401  # nobody


def test_cookie_posts_need_this_origin_and_the_pages_form_token(site: Site) -> None:
    admin = site.cluster.user_token(*USERS["admin"])
    query = site.view_query(site.runs["http"])
    path = f"/pydantic-ai/cache/fork?{query}&step=5"
    status, page = site.http("GET", f"/pydantic-ai/cache/confirm?{query}&action=fork&step=5", cookie=admin)
    assert status == 200
    token = form_token(page)
    same_origin = {"Origin": site.base, "Sec-Fetch-Site": "same-origin"}

    refused = [
        site.http("POST", path, cookie=admin, form={}, headers=same_origin),  # no token
        site.http("POST", path, cookie=admin, form={"form_token": token}, headers={"Origin": "http://evil.example"}),
        site.http("POST", path, cookie=admin, form={"form_token": token}, headers={"Sec-Fetch-Site": "cross-site"}),
        # A token for step 5 does not delete from step 2.
        site.http("POST", path.replace("step=5", "step=2"), cookie=admin, form={"form_token": token}),
    ]
    assert [status for status, _ in refused] == [403, 403, 403, 403], refused
    assert site.entries(site.runs["http"]) == 5

    status, _ = site.http("POST", path, cookie=admin, form={"form_token": token}, headers=same_origin)
    assert status == 303
    assert site.entries(site.runs["http"]) == 4


@pytest.mark.parametrize(
    ("dag_id", "run_id", "task_id", "map_index"),
    [
        ("..", "..", "..", "-1"),
        (DAG_ID, "../../../", "..", "-1"),
        (DAG_ID, "..%2F..%2F..", TASK_ID, "-1"),
        ("../" + DAG_ID, "RUN", TASK_ID, "-1"),
        (OTHER_DAG_ID, "RUN", TASK_ID, "-1"),  # another DAG's ids with this run id
        (DAG_ID, "RUN", TASK_ID, "0"),  # a map index the task instance does not have
    ],
)
def test_no_endpoint_reaches_outside_the_task_instances_prefix(
    site: Site, dag_id: str, run_id: str, task_id: str, map_index: str
) -> None:
    admin = site.cluster.user_token(*USERS["admin"])
    run_id = run_id.replace("RUN", site.runs["http"])
    sentinel = site.root / "cache" / "sentinel.json"
    sentinel.write_text("{}")
    query = site.view_query(run_id, dag_id=dag_id, task_id=task_id, map_index=map_index)

    for method, path in [
        ("GET", f"/pydantic-ai/cache/?{query}&step=1"),
        ("POST", f"/pydantic-ai/cache/delete?{query}"),
        ("POST", f"/pydantic-ai/cache/fork?{query}&step=1"),
    ]:
        status, page = site.http(method, path, token=admin, form={} if method == "POST" else None)
        assert status == 404 and "There is no task instance with these ids" in page, (path, status, page[:500])
    assert sentinel.exists()
    assert site.entries(site.runs["http"]) >= 4


def test_both_buttons_are_refused_while_the_task_instance_runs(site: Site) -> None:
    admin = site.cluster.user_token(*USERS["admin"])
    hold = site.root / "hold-fetch"
    hold.write_text("keep fetch_ticket busy")
    run_id = site.cluster.trigger(DAG_ID)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while site.cluster.task_instance(DAG_ID, run_id, TASK_ID)["state"] != "running":
            assert time.monotonic() < deadline, site.cluster.tails()
            time.sleep(1)
        query = site.view_query(run_id)

        status, page = site.http("GET", f"/pydantic-ai/cache/?{query}", token=admin)
        assert status == 200 and "This task instance is running" in page
        assert "Run live from this step" not in page and "Delete cache" not in page
        for method, path in [
            ("GET", f"/pydantic-ai/cache/confirm?{query}&action=delete"),
            ("POST", f"/pydantic-ai/cache/delete?{query}"),
            ("POST", f"/pydantic-ai/cache/fork?{query}&step=1"),
        ]:
            status, page = site.http(method, path, token=admin, form={} if method == "POST" else None)
            assert status == 409 and "The task instance is running" in page, (path, status, page[:300])
    finally:
        hold.unlink()
    assert site.cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT) == "success"
