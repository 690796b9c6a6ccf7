"""The FastAPI app of the "Durable cache" view, mounted on Airflow's api-server by the provider's plugin.

Routes (under ``/pydantic-ai/cache``; the task instance's ids always in the query string):

- ``GET /`` the view (``&step=N`` also shows step N decoded, truncated, secrets masked; ``&raw=1`` in its stored form);
- ``GET /confirm?action=delete|fork[&step=N]`` a confirmation page holding a signed form token;
- ``POST /delete`` deletes the whole cache (``cache rm``), ``POST /fork?step=N`` deletes step N and
  every later step (``cache rm --from-step N``); both answer 303 to the view.

Who may do what is Airflow's auth manager's decision, asked with Airflow's own ``get_user``: reading
needs GET on the DAG's task instances, deleting needs PUT (the permission that clears a task
instance). Deleting is refused (409) while the task instance is active
(:data:`~airflow_pydantic_ai.cache_tools.task_states.ACTIVE_STATES`: running, about to, or waiting to resume, as
``cache rm`` refuses). Cookie-authenticated POSTs must pass :mod:`~airflow_pydantic_ai.ui.guard`.
Heavy Airflow imports happen inside the handlers: workers import the plugin too. The cache is opened
and a step rendered by :mod:`~airflow_pydantic_ai.cache_tools.access`, as the commands do.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.cache_tools.access import CacheAccess
from airflow_pydantic_ai.cache_tools.task_states import TaskRow, is_active
from airflow_pydantic_ai.durable.errors import OutsideCacheBase
from airflow_pydantic_ai.durable.read import plural
from airflow_pydantic_ai.ui.guard import FormTokens, cross_site_problem
from airflow_pydantic_ai.ui.pages import (
    Confirmation,
    TaskRef,
    ViewData,
    confirmation_page,
    iterations_page,
    message_page,
    view_page,
)

__all__ = ["MOUNT_PATH", "create_app"]

MOUNT_PATH = "/pydantic-ai/cache"
"""Where the app is mounted on the api-server (after ``[api] base_url``'s path)."""

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


def _identity(task: TaskRef, region: Any = None) -> Any:
    from airflow_pydantic_ai.durable import TaskIdentity

    return TaskIdentity(
        dag_id=task.dag_id, run_id=task.run_id, task_id=task.task_id, map_index=task.map_index, region=region
    )


def _task_row(task: TaskRef, region: Any = None) -> TaskRow:
    """The task instance's row from the metadata DB; 404 when there is none.

    ``region``: the cache's region (a loop iteration's, Airflow 3.4), which names the task instance there.
    """
    from airflow_pydantic_ai.cache_tools.task_states import task_row

    row = task_row(_identity(task, region))
    if row is None:
        raise _Refusal(404, "No such task instance", "There is no task instance with these ids.", None)
    return row


def _open(task: TaskRef) -> CacheAccess:
    from airflow_pydantic_ai.cache_tools.access import NoSuchIteration, OutsideCacheBase, open_cache
    from airflow_pydantic_ai.durable.errors import DurableConfigError

    try:
        return open_cache(task.dag_id, task.run_id, task.task_id, task.map_index, iteration=task.iteration)
    except NoSuchIteration as error:
        raise _Refusal(404, "No cache in this loop iteration", str(error), task) from None
    except (DurableConfigError, OutsideCacheBase) as error:
        raise _Refusal(503, "The durable cache cannot be opened", str(error), task) from None


def _opened_task(task: TaskRef) -> tuple[CacheAccess, TaskRow]:
    """The cache and the task instance's row; a loop iteration's task instance is found through its cache."""
    if task.iteration is None:
        row = _task_row(task)
        return _open(task), row
    access = _open(task)
    return access, _task_row(task, access.identity.region)


def _loop_iterations(task: TaskRef) -> list[int]:
    """The loop iterations (Airflow 3.4) the task left caches in; [] when it never ran in a loop."""
    from airflow_pydantic_ai.cache_tools.access import loop_caches
    from airflow_pydantic_ai.tries.settings import open_cache_base

    try:
        caches = loop_caches(open_cache_base(), task.dag_id, task.run_id, task.task_id, task.map_index)
    except Exception:
        return []
    return sorted({cache.iteration for cache in caches if cache.iteration is not None})


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

    def task_ref(dag_id: str, run_id: str, task_id: str, map_index: str, iteration: int | None = None) -> TaskRef:
        return TaskRef(
            dag_id=dag_id,
            run_id=_compat.run_id_from_view_link(run_id),
            task_id=task_id,
            map_index=_map_index(map_index),
            root=_root(),
            iteration=iteration,
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
        raw: bool = False,
        done: str = "",
        iteration: int | None = Query(default=None, ge=0),
    ) -> Response:
        _authorize(user, dag_id, "GET")
        task = task_ref(dag_id, run_id, task_id, map_index, iteration)
        try:
            access, row = _opened_task(task)
        except _Refusal as refusal:
            # A task in an Airflow 3.4 loop: the UI's link names no iteration; offer each iteration's cache.
            iterations = _loop_iterations(task) if refusal.status == 404 and iteration is None else []
            if not iterations:
                raise
            return _html(iterations_page(task, iterations, f"{task.root}/static"))
        from airflow_pydantic_ai.durable.read import latest_attempt

        with access.reader.one_survey():  # the steps, the calls and the step shown from one read of the store
            steps = access.reader.steps()
            data = ViewData(
                task=task,
                state=row.state,
                try_number=row.try_number,
                operator=row.operator,
                location=access.location,
                exists=bool(steps),
                steps=steps,
                calls=access.calls(),
                pending=[row.line() for row in access.reader.pending_requests()],
                latest=latest_attempt(access.store),
                running=is_active(row.state),
                notice=_notice(done),
            )
            if step is not None and steps:
                try:
                    data.shown_step, data.shown_content = access.render_step(step, raw=raw)
                    data.shown_raw = raw
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
        iteration: int | None = Query(default=None, ge=0),
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index, iteration)
        access, row = _opened_task(task)
        _refuse_active(task, row.state)
        steps = access.reader.steps()
        if action == "delete":
            title = "Delete the durable cache?"
            explanation = (
                f"All {plural(len(steps), 'recorded step')} of this task instance are deleted. "
                "Its next try runs every step live."
            )
            url, button, step_text = task.url("delete"), "Delete cache", ""
        else:
            if step is None or not 1 <= step <= len(steps):
                raise _Refusal(404, "No such step", f"There is no step {step} in this cache.", task)
            title = f"Run live from step {step}?"
            kept = "nothing" if step == 1 else "step 1" if step == 2 else f"steps 1 to {step - 1}"
            explanation = (
                f"Steps {step} to {len(steps)} ({plural(len(steps) - step + 1, 'step')}) are deleted. The next try "
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
        iteration: int | None = Query(default=None, ge=0),
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index, iteration)
        _check_post(request, user, form_token, "delete", (*_target(task), ""))
        access, row = _opened_task(task)
        _refuse_active(task, row.state)
        _refuse_calls_in_doubt(task, access)
        try:
            count = access.reader.delete_all()
        except OutsideCacheBase as error:  # a symbolic link in the cache's folders: nothing deleted
            raise HTTPException(409, f"Refused: {error}") from None
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
        iteration: int | None = Query(default=None, ge=0),
    ) -> Response:
        _authorize(user, dag_id, "PUT")
        task = task_ref(dag_id, run_id, task_id, map_index, iteration)
        _check_post(request, user, form_token, "fork", (*_target(task), str(step)))
        access, row = _opened_task(task)
        _refuse_active(task, row.state)
        try:
            deleted = access.reader.delete_from(step)
        except OutsideCacheBase as error:  # a symbolic link in the cache's folders: nothing deleted
            raise HTTPException(409, f"Refused: {error}") from None
        return RedirectResponse(task.url(done=f"forked:{step}:{len(deleted)}"), status_code=303)

    return app


def _notice(done: str) -> str:
    """The sentence for a ``done`` code (codes, not text: a link cannot make the view say anything else)."""
    kind, *numbers = done.split(":")
    if not all(number.isdigit() for number in numbers):
        return ""
    if kind == "deleted" and len(numbers) == 1:
        return f"Deleted the cache ({plural(int(numbers[0]), 'step')}). The next try runs every step live."
    if kind == "forked" and len(numbers) == 2:
        step, count = numbers
        return (
            f"Deleted step {step} and every later step ({plural(int(count), 'step')}). "
            f"The next try runs live from step {step}."
        )
    return ""


def _target(task: TaskRef) -> tuple[str, ...]:
    target = (task.dag_id, task.run_id, task.task_id, str(task.map_index))
    return target if task.iteration is None else (*target, f"loop{task.iteration}")


def _refuse_calls_in_doubt(task: TaskRef, access: CacheAccess) -> None:
    """Issue 35: deleting a cache that holds a call in doubt would forget it; refused as ``cache rm`` refuses it."""
    from airflow_pydantic_ai.cache_tools.doubts import calls_in_doubt, forgetting_refused
    from airflow_pydantic_ai.tries.lifecycle import cache_resolve_command

    doubts = calls_in_doubt(access.reader)
    if doubts:
        what = f"the cache of {access.identity.describe()}"
        detail = forgetting_refused(what, doubts, cache_resolve_command(access.identity))
        raise _Refusal(409, "Refused: the cache holds calls in doubt", detail, task)


def _refuse_active(task: TaskRef, state: str | None) -> None:
    if is_active(state):
        raise _Refusal(
            409,
            "Refused while the task instance is active",
            f"The task instance is {state}; a try may be writing this cache. Wait until it has finished.",
            task,
        )
