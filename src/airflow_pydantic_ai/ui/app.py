"""The FastAPI app of the "Durable cache" view, mounted on Airflow's api-server by the provider's plugin.

Routes (under ``/pydantic-ai/cache``; the task instance's ids always in the query string):

- ``GET /`` the view (``&step=N`` also shows step N decoded, truncated, secrets masked);
- ``GET /confirm?action=delete|fork[&step=N]`` a confirmation page holding a signed form token;
- ``POST /delete`` deletes the whole cache (``cache rm``), ``POST /fork?step=N`` deletes step N and
  every later step (``cache rm --from-step N``); both answer 303 to the view.

Who may do what is Airflow's auth manager's decision, asked with Airflow's own ``get_user``: reading
needs GET on the DAG's task instances, deleting needs PUT (the permission that clears a task
instance). Deleting is refused (409) while the task instance is running or about to. Cookie-
authenticated POSTs must pass :mod:`~airflow_pydantic_ai.ui.guard`. Heavy Airflow imports happen
inside the handlers: workers import the plugin too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable import CacheReader, StepDetail, StepInfo
from airflow_pydantic_ai.ui.guard import FormTokens, cross_site_problem
from airflow_pydantic_ai.ui.pages import (
    Confirmation,
    TaskRef,
    ViewData,
    confirmation_page,
    message_page,
    view_page,
)

__all__ = ["ACTIVE_STATES", "MOUNT_PATH", "create_app", "render_step"]

MOUNT_PATH = "/pydantic-ai/cache"
"""Where the app is mounted on the api-server (after ``[api] base_url``'s path)."""

ACTIVE_STATES = frozenset({"running", "queued", "scheduled", "restarting", "deferred", "up_for_reschedule"})
"""Task instance states in which a try runs or is about to start: deleting is refused."""

_CONTENT_LIMIT = 4096
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC = {"cache_view.css": "text/css; charset=utf-8", "theme.js": "text/javascript; charset=utf-8"}


def _root() -> str:
    """The URL path of the view: ``[api] base_url``'s path + :data:`MOUNT_PATH`."""
    from airflow.configuration import conf

    base_path = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base_path}{MOUNT_PATH}"


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=_SECURITY_HEADERS)


class _Refusal(Exception):
    def __init__(self, status: int, title: str, message: str, task: TaskRef | None = None) -> None:
        super().__init__(message)
        self.status, self.title, self.message, self.task = status, title, message, task


def _map_index(text: str) -> int:
    # The UI leaves "{MAP_INDEX}" in the link of an unmapped task instance.
    if text in ("", "{MAP_INDEX}"):
        return -1
    try:
        value = int(text)
    except ValueError:
        raise _Refusal(400, "Bad request", f"map_index must be a whole number, got {text!r}") from None
    if value < -1:
        raise _Refusal(400, "Bad request", f"map_index must be -1 or more, got {value}")
    return value


async def _user(request: Request) -> Any:
    """The caller, as Airflow's API resolves it (bearer header first, then the UI's cookie)."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    return await get_user(request, None, credentials)


_UserDep = Annotated[Any, Depends(_user)]


def _authorize(user: Any, dag_id: str, method: str) -> None:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    allowed = get_auth_manager().is_authorized_dag(
        method=method,  # type: ignore[arg-type]
        access_entity=DagAccessEntity.TASK_INSTANCE,
        details=details,
        user=user,
    )
    if not allowed:
        verb = "see" if method == "GET" else "change"
        raise HTTPException(403, f"You may not {verb} the task instances of DAG {dag_id!r}")


def _task_row(task: TaskRef) -> tuple[str | None, int, str]:
    """(state, try number, operator) of the task instance from the metadata DB; 404 when there is none."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(TaskInstance.state, TaskInstance.try_number, TaskInstance.operator).where(
                TaskInstance.dag_id == task.dag_id,
                TaskInstance.run_id == task.run_id,
                TaskInstance.task_id == task.task_id,
                TaskInstance.map_index == task.map_index,
            )
        ).first()
    if row is None:
        raise _Refusal(404, "No such task instance", "There is no task instance with these ids.", None)
    state = row[0]
    return (str(getattr(state, "value", state)) if state is not None else None), int(row[1] or 0), str(row[2] or "")


def _open(task: TaskRef) -> Any:
    from airflow_pydantic_ai.cache_access import OutsideCacheBase, open_cache
    from airflow_pydantic_ai.durable import DurableConfigError

    try:
        return open_cache(task.dag_id, task.run_id, task.task_id, task.map_index)
    except (DurableConfigError, OutsideCacheBase) as error:
        raise _Refusal(503, "The durable cache cannot be opened", str(error), task) from None


def _redactor() -> Callable[[Any], Any]:
    """Airflow's secrets masking: values under sensitive keys, and values registered as secrets with
    either of Airflow's maskers (the core one of the api-server, the task SDK's)."""
    maskers: list[Callable[[Any], Any]] = []
    for module in ("airflow._shared.secrets_masker", "airflow.sdk._shared.secrets_masker"):
        try:
            maskers.append(importlib.import_module(module).redact)
        except ImportError:  # pragma: no cover - other Airflow layouts
            continue

    def redact(value: Any) -> Any:
        for mask in maskers:
            value = mask(value)
        return value

    return redact


def render_step(reader: CacheReader, number: int) -> tuple[StepInfo, str]:
    """Step ``number`` as the view shows it: secrets masked (sensitive keys and registered values), truncated.

    Raises ``KeyError`` when there is no such step.
    """
    detail = reader.read(number)
    redact = _redactor()
    text = StepDetail(detail.info, redact(detail.content)).render(limit=None, redact=redact)
    if len(text) > _CONTENT_LIMIT:
        text = f"{text[:_CONTENT_LIMIT]}\n... ({len(text) - _CONTENT_LIMIT} more characters not shown)"
    return detail.info, text


def _tokens() -> FormTokens:
    from airflow.configuration import conf

    secret = conf.get("api", "secret_key", fallback="") or ""
    if not secret:
        raise _Refusal(503, "No secret key", "[api] secret_key is empty; set it to use the view's buttons.")
    return FormTokens(secret.encode())


def _user_id(user: Any) -> str:
    return str(user.get_id() if hasattr(user, "get_id") else getattr(user, "username", ""))


def _request_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"


def _base_origin() -> set[str]:
    from airflow.configuration import conf

    parts = urlsplit(conf.get("api", "base_url", fallback="") or "")
    return {f"{parts.scheme}://{parts.netloc}"} if parts.scheme and parts.netloc else set()


def _check_post(request: Request, user: Any, token: str, action: str, target: tuple[str, ...]) -> None:
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return  # no ambient credential: not forgeable from another site
    problem = cross_site_problem(request.headers, _request_origin(request), _base_origin())
    if problem is None and not _tokens().check(token, _user_id(user), action, target):
        problem = "the form token is missing, expired or not yours (open the view again)"
    if problem is not None:
        raise HTTPException(403, f"Refused: {problem}")


def create_app() -> FastAPI:
    """The app the plugin mounts at :data:`MOUNT_PATH`."""
    app = FastAPI(title="Durable cache (airflow-pydantic-ai)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(_Refusal)
    async def _refused(request: Request, error: _Refusal) -> Response:
        return _html(message_page(error.task, error.title, error.message, f"{_root()}/static"), error.status)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, error: HTTPException) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            page = message_page(None, f"Error {error.status_code}", str(error.detail), f"{_root()}/static")
            return _html(page, error.status_code)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=_SECURITY_HEADERS)

    def task_ref(dag_id: str, run_id: str, task_id: str, map_index: str) -> TaskRef:
        return TaskRef(
            dag_id=dag_id,
            run_id=_compat.run_id_from_view_link(run_id),
            task_id=task_id,
            map_index=_map_index(map_index),
            root=_root(),
        )

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in _STATIC:
            raise HTTPException(404, "Not found")
        data = resources.files("airflow_pydantic_ai.ui").joinpath("static", name).read_bytes()
        return Response(data, media_type=_STATIC[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/", response_class=HTMLResponse)
    def view(
        request: Request,
        user: _UserDep,
        dag_id: str = Query(min_length=1),
        run_id: str = Query(min_length=1),
        task_id: str = Query(min_length=1),
        map_index: str = "-1",
        step: int | None = None,
        done: str = "",
    ) -> Response:
        _authorize(user, dag_id, "GET")
        task = task_ref(dag_id, run_id, task_id, map_index)
        state, try_number, operator = _task_row(task)
        access = _open(task)
        from airflow_pydantic_ai.durable import latest_attempt

        steps = access.reader.steps()
        data = ViewData(
            task=task,
            state=state,
            try_number=try_number,
            operator=operator,
            location=access.location,
            exists=bool(steps),
            steps=steps,
            latest=latest_attempt(access.store),
            running=state in ACTIVE_STATES,
            notice=_notice(done),
        )
        if step is not None and steps:
            try:
                data.shown_step, data.shown_content = render_step(access.reader, step)
            except KeyError:
                raise _Refusal(404, "No such step", f"There is no step {step} in this cache.", task) from None
        return _html(view_page(data, f"{task.root}/static"))

    @app.get("/confirm", response_class=HTMLResponse)
    def confirm(
        request: Request,
        user: _UserDep,
        dag_id: str = Query(min_length=1),
        run_id: str = Query(min_length=1),
        task_id: str = Query(min_length=1),
        action: str = Query(pattern="^(delete|fork)$"),
        map_index: str = "-1",
        step: int | None = None,
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index)
        state, _, _ = _task_row(task)
        _refuse_active(task, state)
        steps = _open(task).reader.steps()
        if action == "delete":
            title = "Delete the durable cache?"
            explanation = (
                f"All {len(steps)} recorded steps of this task instance are deleted. Its next try runs every step live."
            )
            url, button, step_text = task.url("delete"), "Delete cache", ""
        else:
            if step is None or not 1 <= step <= len(steps):
                raise _Refusal(404, "No such step", f"There is no step {step} in this cache.", task)
            title = f"Run live from step {step}?"
            kept = "nothing" if step == 1 else "step 1" if step == 2 else f"steps 1 to {step - 1}"
            explanation = (
                f"Steps {step} to {len(steps)} ({len(steps) - step + 1} steps) are deleted. The next try "
                f"replays {kept} and runs live from step {step}."
            )
            url, button, step_text = task.url("fork", step=step), "Run live from this step", str(step)
        token = _tokens().issue(_user_id(user), action, (*_target(task), step_text))
        page = confirmation_page(
            Confirmation(task=task, title=title, explanation=explanation, action_url=url, button=button, token=token)
        )
        return _html(page)

    @app.post("/delete")
    def delete(
        request: Request,
        user: _UserDep,
        dag_id: str = Query(min_length=1),
        run_id: str = Query(min_length=1),
        task_id: str = Query(min_length=1),
        map_index: str = "-1",
        form_token: str = Form(default=""),
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index)
        _check_post(request, user, form_token, "delete", (*_target(task), ""))
        state, _, _ = _task_row(task)
        _refuse_active(task, state)
        count = _open(task).reader.delete_all()
        return RedirectResponse(task.url(done=f"deleted:{count}"), status_code=303)

    @app.post("/fork")
    def fork(
        request: Request,
        user: _UserDep,
        dag_id: str = Query(min_length=1),
        run_id: str = Query(min_length=1),
        task_id: str = Query(min_length=1),
        step: int = Query(ge=1),
        map_index: str = "-1",
        form_token: str = Form(default=""),
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index)
        _check_post(request, user, form_token, "fork", (*_target(task), str(step)))
        state, _, _ = _task_row(task)
        _refuse_active(task, state)
        deleted = _open(task).reader.delete_from(step)
        return RedirectResponse(task.url(done=f"forked:{step}:{len(deleted)}"), status_code=303)

    return app


def _notice(done: str) -> str:
    """The sentence for a ``done`` code (codes, not text: a link cannot make the view say anything else)."""
    kind, *numbers = done.split(":")
    if not all(number.isdigit() for number in numbers):
        return ""
    if kind == "deleted" and len(numbers) == 1:
        return f"Deleted the cache ({numbers[0]} steps). The next try runs every step live."
    if kind == "forked" and len(numbers) == 2:
        step, count = numbers
        return f"Deleted step {step} and every later step ({count} steps). The next try runs live from step {step}."
    return ""


def _target(task: TaskRef) -> tuple[str, ...]:
    return (task.dag_id, task.run_id, task.task_id, str(task.map_index))


def _refuse_active(task: TaskRef, state: str | None) -> None:
    if state in ACTIVE_STATES:
        raise _Refusal(
            409,
            "Refused while the task instance is active",
            f"The task instance is {state}; a try may be writing this cache. Wait until it has finished.",
            task,
        )
