"""Run Airflow's real components (scheduler, dag-processor, api-server) as subprocesses.

Used by the ``scheduler``-marked end-to-end test. Everything here talks to the child
processes through their environment, their log files and the REST API; nothing imports
``airflow`` in the test process, so the session's ``AIRFLOW_HOME`` (set by conftest.py)
never leaks into the cluster and the cluster's never leaks into the session.

Each component is started in its own session (``start_new_session=True``, i.e. ``setsid``)
so that :meth:`AirflowCluster.stop` can signal its whole process group: the scheduler's
LocalExecutor workers, the task supervisors and the task processes, the dag-processor's
parsing processes and the api-server's uvicorn workers all die with it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Components started by :meth:`AirflowCluster.start`. ``airflow standalone`` would also start
#: a triggerer, which most tests do not need and which costs CPU on a small machine: a test of a
#: deferring task asks for it (``AirflowCluster.create(..., triggerer=True)``).
COMPONENTS = ("api-server", "scheduler", "dag-processor")
TRIGGERER = "triggerer"

#: Variables of the parent environment the cluster must not inherit: the test session's
#: Airflow settings (conftest.py) and anything that would point the children elsewhere.
_DROPPED_PREFIXES = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")
_DROPPED_NAMES = ("AIRFLOW_HOME", "AIRFLOW_CONFIG")

TERMINAL_RUN_STATES = frozenset({"success", "failed"})


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_env(
    home: Path, dags_folder: Path, port: int, log_server_port: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The full environment of every Airflow child process, built explicitly.

    Starts from the parent environment minus every Airflow setting (the test session's
    ``AIRFLOW_HOME`` and ``AIRFLOW__CORE__UNIT_TEST_MODE`` included), puts the virtualenv's
    ``bin`` first on ``PATH`` and adds ``extra`` last.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(_DROPPED_PREFIXES) and name not in _DROPPED_NAMES
    }
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    base_url = f"http://127.0.0.1:{port}"
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # The default would start 32 LocalExecutor workers.
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # One secret for every component: the scheduler signs the task tokens, the
            # api-server checks them.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
            # SimpleAuthManager without users: GET /auth/token hands out an admin token.
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": base_url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
            # The scheduler serves task logs on this port (default 8793, fixed).
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_server_port),
            # Pick the DAG file up at once and keep looking at the folder often.
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "300",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def user_env(folder: Path, users: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Environment for SimpleAuthManager users ``{name: (role, password)}`` who log in with their password."""
    password_file = folder / "simple_auth_manager_passwords.json"
    password_file.write_text(json.dumps({name: password for name, (_, password) in users.items()}))
    return {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{name}:{role}" for name, (role, _) in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
    }


class ClusterError(RuntimeError):
    """A component died, or something did not happen within its time limit."""


@dataclass
class AirflowCluster:
    """Airflow's real components on SQLite, LocalExecutor and a local api-server port."""

    home: Path
    env: dict[str, str]
    port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    login: tuple[str, str] | None = None
    """(username, password) for POST /auth/token; None: the all-admins GET /auth/token."""
    request_timeout: float = 30
    """Seconds one REST call may take (raise it on a loaded machine)."""
    components: tuple[str, ...] = COMPONENTS
    """What :meth:`start` runs (``COMPONENTS``, plus ``triggerer`` for deferring tasks)."""
    _token: str | None = None

    @classmethod
    def create(
        cls, root: Path, dag_files: list[Path], extra_env: dict[str, str] | None = None, triggerer: bool = False
    ) -> AirflowCluster:
        """A cluster whose home is ``root/airflow_home`` and whose dags folder holds copies of ``dag_files``;
        ``triggerer``: also run a triggerer (deferred tasks resume only through one)."""
        home = root / "airflow_home"
        dags_folder = root / "dags"
        home.mkdir(parents=True)
        dags_folder.mkdir(parents=True)
        for dag_file in dag_files:
            shutil.copy(dag_file, dags_folder / dag_file.name)
        port = free_port()
        env = cluster_env(home, dags_folder, port, log_server_port=free_port(), extra=extra_env)
        components = (*COMPONENTS, TRIGGERER) if triggerer else COMPONENTS
        return cls(home=home, env=env, port=port, components=components)

    @contextmanager
    def running(self, ready_timeout: float = 60, migrate_timeout: float = 60) -> Iterator[AirflowCluster]:
        """Migrate the DB, start the components, wait until ready; always stop them on exit."""
        self.migrate(migrate_timeout)
        try:
            self.start()
            self.wait_ready(ready_timeout)
            yield self
        finally:
            self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def component_logs(self) -> Path:
        return self.home / "component-logs"

    def log_file(self, name: str) -> Path:
        return self.component_logs / f"{name}.log"

    def wait_until_park_seen(
        self, dag_id: str, run_id: str, task_id: str, try_number: int, timeout: float = 180
    ) -> None:
        """Wait until the scheduler has handled the executor's event for the process that parked the task.

        Airflow 3.3.2 race, not this provider's (docs/approval.rst): when a person answers within a few seconds of
        the park, the task can be queued or running again before the scheduler reads the parked process's
        "success" event (same try number); it then marks the task failed ("finished with state success, but the
        task instance's state attribute is queued"), and the resumed try is killed before it reads the answer.
        People answer minutes later; a test answers as soon as the scheduler has caught up.
        """
        # 3.3: "... for task instance TaskInstanceKey(dag_id=...)"; 3.4: "... for task instance <ti id>
        # (coordinates=TaskInstanceKey(dag_id=...))".
        event = "Received executor event with state success for task instance "
        key = f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}'"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            log = self.log_file("scheduler").read_text(errors="replace")
            if any(event in line and key in line and f"try_number={try_number}," in line for line in log.splitlines()):
                return
            time.sleep(0.5)
        raise ClusterError(f"the scheduler never handled the exit of try {try_number} that parked:\n{self.tails()}")

    # -- lifecycle ---------------------------------------------------------------------

    def migrate(self, timeout: float = 60) -> None:
        """Create the metadata DB (``airflow db migrate``) in this cluster's home."""
        self.component_logs.mkdir(parents=True, exist_ok=True)
        with self.log_file("db-migrate").open("wb") as log:
            result = subprocess.run(
                ["airflow", "db", "migrate"],
                env=self.env,
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        if result.returncode != 0:
            raise ClusterError(f"airflow db migrate failed ({result.returncode}):\n{self.tail('db-migrate')}")

    def start(self) -> None:
        """Start every component in its own session, its output going to its own log file."""
        self.component_logs.mkdir(parents=True, exist_ok=True)
        for name in self.components:
            with self.log_file(name).open("wb") as log:
                self.processes[name] = subprocess.Popen(
                    ["airflow", name],
                    env=self.env,
                    cwd=self.home,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def stop(self, grace: float = 15) -> None:
        """SIGTERM every component's process group, then SIGKILL what is left after ``grace`` s."""
        groups = [process.pid for process in self.processes.values()]  # session leader: pgid == pid
        for pgid in groups:
            _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while groups and time.monotonic() < deadline:
            for process in self.processes.values():
                process.poll()  # reap an exited leader, or its zombie keeps the group "alive"
            groups = [pgid for pgid in groups if _group_alive(pgid)]
            if groups:
                time.sleep(0.2)
        for pgid in groups:  # only groups still alive: a vanished group's id may be reused
            _signal_group(pgid, signal.SIGKILL)
        for process in self.processes.values():
            with suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored: hardly ever times out
                process.wait(timeout=5)

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise ClusterError(f"{name} exited with {process.returncode}:\n{self.tail(name)}")

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until the api-server answers and reports a healthy scheduler and dag-processor."""
        deadline = time.monotonic() + timeout
        health: Any = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                health = self._request("GET", "/api/v2/monitor/health", auth=False)
            except (OSError, ClusterError):
                health = None
            if health and all(
                (health.get(component) or {}).get("status") == "healthy"
                for component in ("metadatabase", "scheduler", "dag_processor", *self._health_of_triggerer())
            ):
                return
            time.sleep(0.5)
        raise ClusterError(f"Airflow not ready after {timeout} s (last health: {health}):\n{self.tails()}")

    def _health_of_triggerer(self) -> tuple[str, ...]:
        return ("triggerer",) if TRIGGERER in self.components else ()

    # -- REST API ----------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise ClusterError(f"{method} {path}: HTTP {error.code}: {error.read()[:2000]!r}") from error
        return json.loads(payload) if payload else None

    def plugin_import_errors(self) -> Any:
        """What the Home page's "Plugin Import Errors" banner lists (``GET /api/v2/plugins/importErrors``)."""
        return self._request("GET", "/api/v2/plugins/importErrors")

    def token(self) -> str:
        if self._token is None:
            if self.login is None:
                self._token = self._request("GET", "/auth/token", auth=False)["access_token"]
            else:
                self._token = self.user_token(*self.login)
        return self._token

    def user_token(self, username: str, password: str) -> str:
        """A JWT for a user of the simple auth manager (``[core] simple_auth_manager_users``)."""
        body = {"username": username, "password": password}
        return self._request("POST", "/auth/token", body, auth=False)["access_token"]

    def login_as(self, username: str, password: str) -> None:
        """Use SimpleAuthManager user ``username`` for every further request."""
        self.login = (username, password)
        self._token = None

    def hitl_detail(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails"
        return self._request("GET", path)

    def hitl_respond(self, dag_id: str, run_id: str, task_id: str, body: Any, map_index: int = -1) -> Any:
        """Answer a human-in-the-loop request as the Required Actions page does."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails"
        return self._request("PATCH", path, body)

    def wait_for_dag(self, dag_id: str, timeout: float = 60) -> None:
        """Wait until the dag-processor has parsed and stored ``dag_id``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                self._request("GET", f"/api/v2/dags/{dag_id}")
                return
            except ClusterError as error:
                if "HTTP 404" not in str(error):
                    raise
            time.sleep(0.5)
        errors = self._request("GET", "/api/v2/importErrors")
        raise ClusterError(f"DAG {dag_id} not parsed after {timeout} s; import errors: {errors}\n{self.tails()}")

    def trigger(self, dag_id: str) -> str:
        """Unpause ``dag_id`` and create a manual run of it; return the run id."""
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        return run["dag_run_id"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Poll the run until it succeeds or fails; return its final state."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                state = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            except OSError:  # an api-server too busy to answer in time (a loaded machine): ask again
                time.sleep(1)
                continue
            if state in TERMINAL_RUN_STATES:
                return state
            time.sleep(1)
        raise ClusterError(f"run {run_id} still {state!r} after {timeout} s:\n{self.tails()}")

    def clear_task(self, dag_id: str, run_id: str, task_id: str, keep_task_state: bool | None = None) -> None:
        """Clear a finished task instance of ``run_id`` (as the UI's Clear does): the scheduler runs its next try.

        ``keep_task_state`` (Airflow 3.4): whether the task's task-state entries survive the clear; None sends
        no such field (older releases refuse it).
        """
        body: dict[str, Any] = {"dry_run": False, "dag_run_id": run_id, "task_ids": [task_id], "reset_dag_runs": True}
        if keep_task_state is not None:
            body["keep_task_state"] = keep_task_state
        self._request("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)

    def cli(self, *args: str, timeout: float = 300, program: str = "airflow") -> subprocess.CompletedProcess[str]:
        """Run ``airflow *args`` (or ``program *args``) against this cluster's home and metadata DB."""
        return subprocess.run(
            [program, *args],
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def provider_cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run this provider's command ``args``: ``airflow pydantic-ai *args`` where Airflow reads providers'
        ``cli`` entry (3.2+), else the console script ``airflow-pydantic-ai *args`` (Airflow 3.1)."""
        from tests.helpers.compat import airflow_reads_provider_cli

        if airflow_reads_provider_cli():
            return self.cli("pydantic-ai", *args, timeout=timeout)
        return self.cli(*args, timeout=timeout, program="airflow-pydantic-ai")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def xcom_value(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """The (deserialized) XCom ``key`` of ``task_id`` in the run."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self._request("GET", f"{path}?deserialize=true")["value"]

    # -- logs --------------------------------------------------------------------------

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> Path:
        """Where the task supervisor writes a try's log (the default ``log_filename_template``)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            folder /= f"map_index={map_index}"
        return folder / f"attempt={try_number}.log"

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.log_file(name)
        if not path.exists():
            return f"--- {name}: no log ---"
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {name} (last {len(text)} lines of {path}) ---\n" + "\n".join(text)

    def tails(self) -> str:
        return "\n".join(self.tail(name) for name in COMPONENTS)


@contextmanager
def durable_cluster(
    root: Path,
    dag_file: Path,
    extra_env: dict[str, str] | None = None,
    *,
    login: tuple[str, str] | None = None,
    request_timeout: float = 60,
    ready_timeout: float = 180,
    triggerer: bool = False,
) -> Iterator[AirflowCluster]:
    """A running Airflow (scheduler, dag-processor, api-server) with ``dag_file`` in its dags folder and
    its durable cache under ``root/cache`` (``file://``); stopped, children and all, on exit.

    The one start-up of the scheduler tests: the timeouts allow a loaded 2-core machine (migrating, or
    starting the api-server, can take over a minute there). ``login``: the (username, password) REST
    calls use, for a cluster with users of its own. ``triggerer``: also run a triggerer (deferred tasks).
    """
    cluster = AirflowCluster.create(
        root,
        dag_files=[dag_file],
        extra_env={"AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"file://{root / 'cache'}", **(extra_env or {})},
        triggerer=triggerer,
    )
    if login is not None:
        cluster.login_as(*login)
    cluster.request_timeout = request_timeout
    with cluster.running(ready_timeout=ready_timeout, migrate_timeout=max(ready_timeout, 300)):
        yield cluster


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a group of another user's processes
        return True
    return True
