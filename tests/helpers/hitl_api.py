"""Answer human-in-the-loop requests as a person would: through Airflow's own REST API, logged in.

:class:`HitlApi` runs the api-server's public FastAPI app in this process (Starlette's test client: real
routes, real auth manager, real database writes, no socket), with SimpleAuthManager users whose
passwords the test knows. :class:`Responder` answers, in a thread beside a blocking ``dag.test()``,
each time the task parks waiting for input.

Requires the ``airflow_db`` fixture.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USERS = {"alice": "admin", "bob": "viewer", "carol": "user"}


@dataclass
class HitlApi:
    client: Any
    passwords: dict[str, str]
    _tokens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, folder: Path) -> HitlApi:
        from airflow.configuration import conf

        passwords = {name: f"{name}-secret-password" for name in USERS}
        password_file = folder / "simple_auth_manager_passwords.json"
        password_file.write_text(json.dumps(passwords))
        conf.set(
            "core", "auth_manager", "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        )
        conf.set("core", "simple_auth_manager_all_admins", "False")
        conf.set("core", "simple_auth_manager_users", ",".join(f"{name}:{role}" for name, role in USERS.items()))
        conf.set("core", "simple_auth_manager_passwords_file", str(password_file))
        if not conf.get("api_auth", "jwt_secret", fallback=""):
            conf.set("api_auth", "jwt_secret", "test-secret-" + "x" * 48)
        from airflow.api_fastapi.app import create_app, purge_cached_app
        from fastapi.testclient import TestClient

        purge_cached_app()
        return cls(client=TestClient(create_app(apps="core")), passwords=passwords)

    def token(self, user: str) -> str:
        if user not in self._tokens:
            response = self.client.post("/auth/token", json={"username": user, "password": self.passwords[user]})
            assert response.status_code in (200, 201), response.text
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def respond(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        body: Any,
        *,
        user: str = "alice",
        map_index: int = -1,
    ) -> Any:
        """PATCH the response as the Required Actions page does; returns the HTTP response."""
        return self.client.patch(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails",
            json=body,
            headers={"Authorization": f"Bearer {self.token(user)}"},
        )

    def detail(self, dag_id: str, run_id: str, task_id: str, *, user: str = "alice", map_index: int = -1) -> Any:
        response = self.client.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails",
            headers={"Authorization": f"Bearer {self.token(user)}"},
        )
        assert response.status_code == 200, response.text
        return response.json()


def awaiting_input(dag_id: str, task_id: str) -> tuple[str, Any] | None:
    """``(run_id, ti_id)`` of ``task_id`` when it waits for input, else None."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.run_id, TaskInstance.id).where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == task_id,
                TaskInstance.state.in_([TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED]),
            )
        ).first()
    return None if row is None else (row[0], row[1])


Answer = Callable[[HitlApi, str, dict[str, Any]], None]
"""Called with the api, the run id and the HITL detail of one wait; gives the answer (or not)."""


@dataclass
class Responder:
    """Answers each wait of ``task_id`` in turn with the next of ``answers``, in a thread."""

    api: HitlApi
    dag_id: str
    task_id: str
    answers: list[Answer]
    timeout: float = 60
    details: list[dict[str, Any]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Responder:
        self._thread = threading.Thread(target=self._run, name="hitl-responder", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._thread is not None
        self._thread.join(timeout=self.timeout)
        if self.errors:
            raise self.errors[0]

    def _run(self) -> None:
        try:
            for answer in self.answers:
                run_id, ti_id = self._wait_for_wait()
                detail = self.api.detail(self.dag_id, run_id, self.task_id)
                self.details.append(detail)
                answer(self.api, run_id, detail)
                self._wait_until_resumed(ti_id)
        except BaseException as error:  # reported by __exit__
            self.errors.append(error)
            self._fail_waiting_task()

    def _fail_waiting_task(self) -> None:
        """dag.test() would wait for an answer forever: fail the waiting task so that the run ends."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import update

        with create_session() as session:
            session.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.dag_id == self.dag_id,
                    TaskInstance.task_id == self.task_id,
                    TaskInstance.state.in_([TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED]),
                )
                .values(state=TaskInstanceState.FAILED)
            )

    def _wait_for_wait(self) -> tuple[str, Any]:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            found = awaiting_input(self.dag_id, self.task_id)
            if found is not None:
                return found
            time.sleep(0.2)
        raise TimeoutError(f"{self.dag_id}.{self.task_id} never waited for input within {self.timeout} s")

    def _wait_until_resumed(self, ti_id: Any) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if awaiting_input(self.dag_id, self.task_id) is None:
                return
            time.sleep(0.2)


def choose(option: str, user: str = "alice", **params: Any) -> Answer:
    """An answer choosing ``option`` with form fields ``params``; asserts Airflow accepted it."""

    def answer(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        task_id = detail["task_instance"]["task_id"]
        dag_id = detail["task_instance"]["dag_id"]
        response = api.respond(dag_id, run_id, task_id, {"chosen_options": [option], "params_input": params}, user=user)
        assert response.status_code == 200, response.text

    return answer


def rendered_request(detail: dict[str, Any]) -> str:
    """The current round's request text (the rendered field the task refreshes every round)."""
    return str((detail["task_instance"].get("rendered_fields") or {}).get("approval_request", ""))


def refs_in(text: str) -> list[str]:
    """The call refs a request text lists, in order."""
    import re

    return re.findall(r"ref `([0-9a-f]+)`", text)


def sweep_timeouts_after(seconds: float) -> Answer:
    """Nobody answers: after ``seconds`` the scheduler's own timeout sweep resolves the wait.

    ``dag.test()`` runs no scheduler, so the test runs its sweep (``check_awaiting_input_timeouts``).
    """

    def answer(api: HitlApi, run_id: str, detail: dict[str, Any]) -> None:
        from airflow.jobs.job import Job
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

        time.sleep(seconds)
        SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts()

    return answer
