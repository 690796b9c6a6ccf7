"""A CeleryExecutor deployment on 127.0.0.1: a private PostgreSQL cluster, a Redis server, Airflow's scheduler,
dag-processor and api-server (:mod:`tests.helpers.standalone`), and Celery workers, each with its own
``AIRFLOW_HOME`` (its own logs and its own local durable cache) but the same dags folder and metadata DB.

For ``make celery-trial`` (tests/system/test_celery_workers.py). PostgreSQL and Redis are Debian's packages
(``postgresql``, ``redis-server``); the Celery provider and the PostgreSQL driver come from the trial's own
venv. Every server runs in a session of its own, so stopping it stops its children; each session's id is
also appended to ``$CELERY_TRIAL_GROUPS`` (when set), so the make target's trap can stop what a killed test
process left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.standalone import AirflowCluster, ClusterError, _group_alive, _signal_group, free_port

#: Task slots per worker: one task at a time, so which worker ran which try is never in doubt.
WORKER_CONCURRENCY = 1


def register_group(pgid: int) -> None:
    """Note a started session for the make target's trap (``$CELERY_TRIAL_GROUPS``)."""
    if groups := os.environ.get("CELERY_TRIAL_GROUPS"):
        with open(groups, "a") as handle:
            handle.write(f"{pgid}\n")


def stop_sessions(processes: list[subprocess.Popen[bytes]], grace: float = 30) -> None:
    """SIGTERM the process group each of ``processes`` leads, then SIGKILL whatever is left of their sessions
    after ``grace`` s: Airflow's task supervisor puts each task process in a group of its own (same session),
    which a signal to the worker's group alone would leave running."""
    sessions = [process.pid for process in processes]  # each started with start_new_session: sid == pid
    for sid in sessions:
        _signal_group(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_session_members(sid) for sid in sessions):
        for process in processes:
            process.poll()  # reap the leader, or its zombie keeps the session alive
        time.sleep(0.2)
    for sid in sessions:
        for pid in _session_members(sid):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for process in processes:
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def _session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies excluded)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with suppress(OSError):
            if os.getsid(int(entry)) == sid and not _is_zombie(int(entry)):
                members.append(int(entry))
    return members


def _is_zombie(pid: int) -> bool:
    with suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return True  # gone


@dataclass
class Postgres:
    """A PostgreSQL cluster of its own (``initdb`` in a temporary folder) on a 127.0.0.1 port, trust auth."""

    root: Path
    port: int
    bin_dir: Path
    run_as: list[str]

    USER = "airflow"
    DATABASE = "airflow"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    def url(self, scheme: str = "postgresql+psycopg2") -> str:
        return f"{scheme}://{self.USER}@127.0.0.1:{self.port}/{self.DATABASE}"

    @classmethod
    def start(cls, timeout: float = 180) -> Postgres:
        """initdb, start and create the ``airflow`` database; as the ``postgres`` user when run as root.

        The folder is a fresh one in the system temp dir (not pytest's, which only root may enter).
        """
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
        if not versions:
            raise ClusterError(
                "no /usr/lib/postgresql/*/bin/initdb: apt-get install postgresql (make celery-trial does)"
            )
        root = Path(tempfile.mkdtemp(prefix="celery-trial-pg-"))
        run_as: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            shutil.chown(root, "postgres", "postgres")
            run_as = ["runuser", "-u", "postgres", "--"]
        server = cls(root=root, port=free_port(), bin_dir=versions[-1].parent, run_as=run_as)
        server._run("initdb", "-D", str(server.data_dir), "-U", cls.USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (
            f"-p {server.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root}"
            " -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        server._run("pg_ctl", "-D", str(server.data_dir), "-l", str(server.log_file), "-o", options, "-w",
                    "-t", str(int(timeout)), "start", timeout=timeout + 10)  # fmt: skip
        if pid := server._postmaster_pid():
            register_group(pid)  # pg_ctl starts the postmaster in a session of its own
        server._run("createdb", "-h", "127.0.0.1", "-p", str(server.port), "-U", cls.USER, cls.DATABASE)
        return server

    def stop(self) -> None:
        """Stop the server (fast shutdown, SIGKILL if it hangs) and delete its folder."""
        pid = self._postmaster_pid()
        with suppress(subprocess.SubprocessError, ClusterError):
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60", "stop", timeout=70)
        if pid and _group_alive(pid):
            _signal_group(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def _postmaster_pid(self) -> int | None:
        with suppress(OSError, ValueError, IndexError):
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        return None

    def _run(self, program: str, *args: str, timeout: float = 180) -> None:
        result = subprocess.run(
            [*self.run_as, str(self.bin_dir / program), *args],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            log = self.log_file.read_text(errors="replace")[-3000:] if self.log_file.exists() else ""
            raise ClusterError(f"{program} failed ({result.returncode}): {result.stdout}{result.stderr}\n{log}")


@dataclass
class Redis:
    """``redis-server`` on a 127.0.0.1 port, nothing saved to disk."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, root: Path, timeout: float = 60) -> Redis:
        program = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(program):
            raise ClusterError("no redis-server: apt-get install redis-server (make celery-trial does)")
        port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        with (root / "redis.log").open("wb") as log:
            process = subprocess.Popen(
                [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(root)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        register_group(process.pid)
        server = cls(process=process, port=port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ClusterError(f"redis-server exited with {process.returncode}: see {root / 'redis.log'}")
            if server.ping():
                return server
            time.sleep(0.2)
        server.stop()
        raise ClusterError(f"redis-server not answering PING after {timeout} s")

    def ping(self) -> bool:
        with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        stop_sessions([self.process], grace=10)


def celery_env(postgres: Postgres, redis: Redis) -> dict[str, str]:
    """The settings that turn :mod:`tests.helpers.standalone`'s cluster into a CeleryExecutor deployment."""
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url(),
        "AIRFLOW__CELERY__BROKER_URL": redis.url,
        "AIRFLOW__CELERY__RESULT_BACKEND": postgres.url(
            "db+postgresql+psycopg2"
        ),  # SQLAlchemy 2.1 defaults to psycopg 3
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
        "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",
        # Sending a task to Redis may take more than the default 1 s on a loaded 2-core machine.
        "AIRFLOW__CELERY__OPERATION_TIMEOUT": "30",
        "AIRFLOW__CORE__PARALLELISM": "2",
    }


@dataclass
class CeleryWorker:
    """``airflow celery worker`` with an ``AIRFLOW_HOME`` of its own; started in a session of its own."""

    name: str
    home: Path
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                ["airflow", "celery", "worker", "--concurrency", str(WORKER_CONCURRENCY),
                 "--celery-hostname", f"{self.name}@%h", "--without-mingle", "--without-gossip"],
                env=self.env, cwd=self.home, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        register_group(self.process.pid)

    def wait_ready(self, timeout: float) -> None:
        """Wait until Celery says the worker is ready (``celery@... ready.`` in its log)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise ClusterError(f"{self.name} exited:\n{self.tail()}")
            if " ready." in self.log.read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise ClusterError(f"{self.name} not ready after {timeout} s:\n{self.tail()}")

    def drain(self, timeout: float) -> None:
        """Warm shutdown (what ``airflow celery stop`` sends): take no new task, finish the running one, exit.

        Returns once Celery has stopped consuming; :meth:`wait_stopped` waits for the exit.
        """
        assert self.process is not None
        offset = self.log.stat().st_size
        self.process.send_signal(signal.SIGTERM)  # the leader only: its pool child finishes the task
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log.open("rb") as log:
                log.seek(offset)
                if b"Warm shutdown" in log.read():
                    return
            if not self.alive:
                return
            time.sleep(0.2)
        raise ClusterError(f"{self.name} did not begin its warm shutdown within {timeout} s:\n{self.tail()}")

    def wait_stopped(self, timeout: float) -> None:
        """Wait for the worker to exit; SIGKILL its whole session if it has not after ``timeout`` s."""
        if self.process is None:
            return
        deadline = time.monotonic() + timeout
        while self.alive and time.monotonic() < deadline:
            time.sleep(0.5)
        stop_sessions([self.process], grace=5)  # whatever is left of its session

    def stop(self) -> None:
        if self.process is not None:
            stop_sessions([self.process])

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()[-lines:] if self.log.exists() else []
        return f"--- {self.name} (last {len(text)} lines of {self.log}) ---\n" + "\n".join(text)


@dataclass
class CeleryDeployment:
    """The running deployment: the Airflow cluster, its servers, and the workers by name."""

    cluster: AirflowCluster
    postgres: Postgres
    redis: Redis
    workers: dict[str, CeleryWorker] = field(default_factory=dict)

    def add_worker(self, name: str) -> CeleryWorker:
        home = self.cluster.home.parent / name
        env = {
            **self.cluster.env,
            "AIRFLOW_HOME": str(home),
            # Every worker serves its own logs; two on one host need two ports.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        }
        worker = CeleryWorker(name=name, home=home, env=env, log=self.cluster.log_file(f"celery-{name}"))
        self.workers[name] = worker
        return worker

    def ensure_workers(self, timeout: float) -> None:
        """Start every worker that is not running and wait until all are ready."""
        started = []
        for worker in self.workers.values():
            if not worker.alive:
                worker.log.unlink(missing_ok=True)
                worker.start()
                started.append(worker)
        for worker in started:
            worker.wait_ready(timeout)

    def worker_of(self, airflow_home: str) -> CeleryWorker:
        for worker in self.workers.values():
            if str(worker.home) == airflow_home:
                return worker
        raise ClusterError(f"no worker has AIRFLOW_HOME {airflow_home}")

    def tails(self) -> str:
        return "\n".join([self.cluster.tails(), *(worker.tail() for worker in self.workers.values())])

    def stop(self) -> None:
        """Stop every session at once (workers, components, Redis), then PostgreSQL."""
        processes = [worker.process for worker in self.workers.values() if worker.process is not None]
        try:
            stop_sessions([*processes, *self.cluster.processes.values(), self.redis.process])
        finally:
            self.postgres.stop()


@contextmanager
def celery_deployment(
    root: Path,
    dag_file: Path,
    extra_env: dict[str, str],
    worker_names: tuple[str, ...] = ("worker-a", "worker-b"),
    ready_timeout: float = 300,
) -> Iterator[CeleryDeployment]:
    """PostgreSQL, Redis, ``airflow db migrate``, the scheduler, dag-processor and api-server, and the
    workers, all ready; every process stopped on exit, whatever happens."""
    postgres = Postgres.start()
    redis: Redis | None = None
    deployment: CeleryDeployment | None = None
    try:
        redis = Redis.start(root / "redis")
        cluster = AirflowCluster.create(root, [dag_file], extra_env={**celery_env(postgres, redis), **extra_env})
        cluster.request_timeout = 60
        deployment = CeleryDeployment(cluster=cluster, postgres=postgres, redis=redis)
        cluster.migrate(timeout=max(ready_timeout, 300))
        cluster.start()
        for process in cluster.processes.values():
            register_group(process.pid)
        for name in worker_names:
            deployment.add_worker(name)
        deployment.ensure_workers(ready_timeout)
        cluster.wait_ready(ready_timeout)
        yield deployment
    finally:
        if deployment is not None:
            deployment.stop()
        else:
            if redis is not None:
                redis.stop()
            postgres.stop()
        if groups := os.environ.get("CELERY_TRIAL_GROUPS"):
            Path(groups).write_text("")  # all stopped: nothing left for the trap (a group id may be reused)
