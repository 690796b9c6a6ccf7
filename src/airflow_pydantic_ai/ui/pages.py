"""The HTML of the "Durable cache" view: server-rendered, every value escaped, no script but the theme.

Pages are built from plain data (:class:`ViewData`, :class:`Confirmation`); nothing here reads the
cache or the database. Every button that changes something is a form that POSTs to this view after a
confirmation page; links only read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from html import escape
from urllib.parse import quote, urlencode

from airflow_pydantic_ai.cache_tools.access import ShownCall
from airflow_pydantic_ai.durable.read import AttemptRecord, StepCost, StepInfo, replay_total

__all__ = [
    "Confirmation",
    "TaskRef",
    "ViewData",
    "confirmation_page",
    "iterations_page",
    "message_page",
    "state_label",
    "view_page",
]


@dataclass(frozen=True)
class TaskRef:
    """A task instance's ids, and the URLs of this view for it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    root: str
    """The URL path this view is mounted at (``/pydantic-ai/cache``)."""
    iteration: int | None = None
    """The loop iteration (Airflow 3.4 task-group loops); None outside a loop."""

    def query(self, **extra: object) -> str:
        values: dict[str, object] = {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
        }
        if self.iteration is not None:
            values["iteration"] = self.iteration
        values.update({key: value for key, value in extra.items() if value is not None})
        return urlencode(values)

    def url(self, page: str = "", **extra: object) -> str:
        return f"{self.root}/{page}?{self.query(**extra)}"

    def label(self) -> str:
        mapped = f" [{self.map_index}]" if self.map_index >= 0 else ""
        looped = f" (loop iteration {self.iteration})" if self.iteration is not None else ""
        return f"{self.dag_id} / {self.run_id} / {self.task_id}{mapped}{looped}"


@dataclass
class ViewData:
    """What the main page shows."""

    task: TaskRef
    state: str | None
    try_number: int
    operator: str
    location: str
    exists: bool
    steps: list[StepInfo] = field(default_factory=list)
    latest: AttemptRecord | None = None
    shown_step: StepInfo | None = None
    shown_content: str = ""
    shown_raw: bool = False
    """The shown step is in its stored form (the codec's tagged values), not as plain values."""
    calls: list[ShownCall] = field(default_factory=list)
    """The ``at_most_once()`` calls that left a start mark: unfinished and resolved ones are listed above the steps,
    a finished one marks its tool row."""
    pending: list[str] = field(default_factory=list)
    """The model requests submitted to a provider that works on them (batches, background responses; issue 38),
    one line each (``CacheReader.pending_requests``)."""
    running: bool = False
    """The task instance is active (:data:`~airflow_pydantic_ai.cache_tools.task_states.ACTIVE_STATES`): no deleting."""
    notice: str = ""


@dataclass(frozen=True)
class Confirmation:
    """A confirmation page for one state-changing action."""

    task: TaskRef
    title: str
    explanation: str
    action_url: str
    button: str
    token: str


def _page(title: str, body: str, static: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        f'<link rel="stylesheet" href="{escape(static)}/cache_view.css">'
        f'<script src="{escape(static)}/theme.js"></script>'
        f"</head><body><main>{body}</main></body></html>\n"
    )


def _time(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / 1024 / 1024:.1f} MiB"


def state_label(state: str | None) -> str:
    """A task instance state in Airflow's wording: ``up_for_retry`` is "Up For Retry", no state is "No Status"."""
    if not state or state == "none":
        return "No Status"
    return " ".join(word.capitalize() for word in state.split("_"))


def _header(task: TaskRef, subtitle: str = "") -> str:
    extra = f'<p class="muted">{escape(subtitle)}</p>' if subtitle else ""
    return f'<header><h1>Durable cache</h1><p class="ids">{escape(task.label())}</p>{extra}</header>'


def view_page(data: ViewData, static: str) -> str:
    """The main page: location, latest try, steps, one step's content, the two buttons."""
    task = data.task
    parts = [_header(task)]
    if data.notice:
        parts.append(f'<p class="notice" role="status">{escape(data.notice)}</p>')
    state = data.state or "none"
    parts.append(
        '<dl class="facts">'
        f"<dt>Cache location</dt><dd><code>{escape(data.location)}</code></dd>"
        f"<dt>Exists</dt><dd>{'yes' if data.exists else 'no'}</dd>"
        f'<dt>Task instance</dt><dd><span class="state state-{escape(state)}">{escape(state_label(state))}</span>'
        f" try {data.try_number} &middot; {escape(data.operator)}</dd>"
        "</dl>"
    )
    if data.latest is not None:
        warnings = "".join(f'<p class="warning">{escape(line)}</p>' for line in data.latest.changed)
        ended = _time(dt.datetime.fromtimestamp(data.latest.ended_at, tz=dt.UTC)) if data.latest.ended_at else ""
        how = ""
        if data.latest.ending is not None:
            how = (
                f'<p class="ended {escape(data.latest.ending.how)}">'
                f"<strong>How it ended:</strong> {escape(data.latest.ending.describe())}</p>"
            )
        parts.append(
            f'<section class="latest"><h2>Latest try ({data.latest.attempt}, ended {escape(ended)})</h2>'
            f'{how}<p class="summary"><code>{escape(data.latest.summary)}</code></p>{warnings}</section>'
        )
    if data.running:
        parts.append(
            f'<p class="notice">This task instance is {escape(state_label(state).lower())}: a try runs, is about to '
            "start or waits to resume from this cache, so deleting is refused until it has finished.</p>"
        )
    if not data.exists:
        parts.append('<p class="empty">Nothing recorded for this task instance.</p>')
        return _page("Durable cache", "".join(parts), _static(task))
    parts.append(_calls_in_doubt(data.calls, asks=_required_actions(task) if state in _ASKING else ""))
    if data.pending:  # issue 38: what a provider was given to work on, and whether its result is collected
        rows = "".join(f"<li><code>{escape(line)}</code></li>" for line in data.pending)
        parts.append(
            f'<section class="pending"><h2>Requests submitted to the provider ({len(data.pending)})</h2>'
            f"<ul>{rows}</ul></section>"
        )
    parts.append(_steps_table(data))
    if data.shown_step is not None:
        parts.append(_step_detail(data, data.shown_step))
    if not data.running:
        parts.append(
            f'<p class="actions"><a class="button danger" href="{escape(task.url("confirm", action="delete"))}">'
            "Delete cache</a></p>"
        )
    return _page("Durable cache", "".join(parts), _static(task))


def _step_detail(data: ViewData, step: StepInfo) -> str:
    """The shown step: its content (plain values, or the stored form on request) and the one action on it."""
    task = data.task
    if data.shown_raw:
        form = f'<a href="{escape(task.url(step=step.number))}#step-{step.number}">Show the values</a>'
    else:
        form = f'<a href="{escape(task.url(step=step.number, raw=1))}#step-{step.number}">Show the stored form</a>'
    fork = (
        ""
        if data.running
        else f' <a class="button small" href="{escape(task.url("confirm", action="fork", step=step.number))}">'
        "Run live from this step</a>"
    )
    return (
        f'<section class="detail" id="step-{step.number}"><h2>Step {step.number}: {escape(step.kind)} '
        f'{escape(step.shown_name)}</h2><p class="row-actions">{form}{fork}</p><pre>{escape(data.shown_content)}</pre>'
        "</section>"
    )


_ASKING = ("awaiting_input", "deferred")
"""The states in which a try waits for a person's answer (the question about the calls in doubt among them)."""


def _required_actions(task: TaskRef) -> str:
    """The task instance's Required Actions page in Airflow's UI (under the same base path as this view)."""
    base = task.root.removesuffix("/pydantic-ai/cache")
    mapped = f"/mapped/{task.map_index}" if task.map_index >= 0 else ""
    ids = [quote(value, safe="") for value in (task.dag_id, task.run_id, task.task_id)]
    return f"{base}/dags/{ids[0]}/runs/{ids[1]}/tasks/{ids[2]}{mapped}/required_actions"


def _calls_in_doubt(calls: list[ShownCall], *, asks: str = "") -> str:
    """Each call a try started and never finished: unanswered ones as a warning with the command that resolves them
    (and, while the task waits for the answer, its Required Actions page: ``asks``), answered ones plainly with the
    answer."""
    # The unanswered first: a person has to act on them.
    doubts = sorted(
        (shown for shown in calls if shown.call.in_doubt), key=lambda shown: shown.call.state != "unfinished"
    )
    if not doubts:
        return ""
    cards = []
    for shown in doubts:
        call = shown.call
        started = call.call.started
        lines = [
            f'<p class="call-name"><strong>tool {escape(started.tool)}</strong> call '
            f"<code>{escape(started.call_id or '-')}</code> "
            f'<span class="muted">ref <code>{escape(call.ref)}</code></span></p>',
            f'<p class="call-state">{escape(_sentence(call.describe()))}</p>',
            f"<p>Arguments: <code>{escape(shown.arguments)}</code></p>",
        ]
        if shown.result is not None:
            lines.append(f"<p>Result given to the model: <code>{escape(shown.result)}</code></p>")
        if call.checkpoints:
            lines.append(f'<p class="muted">Checkpoints saved: {escape(", ".join(call.checkpoints))}</p>')
        if call.problem:
            lines.append(f'<p class="muted">{escape(_sentence(call.problem))}</p>')
        if shown.resolve and asks and call.state == "unfinished":
            lines.append(
                f'<p class="asks">The task waits for this answer: give it on the task\'s <a href="{escape(asks)}" '
                'target="_top">Required Actions page</a>, or with:</p>'
                f'<pre class="command">{escape(shown.resolve)}</pre>'
            )
        elif shown.resolve:
            lines.append(
                "<p>To say what happened (then clear the task, or let its next retry run):</p>"
                f'<pre class="command">{escape(shown.resolve)}</pre>'
            )
        css = "call warning" if call.state == "unfinished" else "call resolved"
        cards.append(f'<div class="{css}" id="call-{escape(call.ref)}">{"".join(lines)}</div>')
    return f'<section class="calls"><h2>Calls in doubt ({len(doubts)})</h2>{"".join(cards)}</section>'


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."


def _steps_table(data: ViewData) -> str:
    task = data.task
    # A call with its own step (it finished, or a try used the answer given) is marked in the table.
    finished = {shown.call.tool_entry_name: shown.call for shown in data.calls if shown.call.recorded}
    rows = []
    for step in data.steps:
        show = f'<a href="{escape(task.url(step=step.number))}#step-{step.number}">Show</a>'
        problem = f' title="{escape(step.problem)}"' if step.problem else ""
        selected = ' class="selected"' if data.shown_step is not None and data.shown_step.number == step.number else ""
        marked = finished.get(step.entry_name)
        once = (
            f" <span class='once' title='{escape(marked.describe())}'>at most once</span>" if marked is not None else ""
        )
        rows.append(
            f"<tr{selected}><td class='num'>{step.number}</td><td><span class='kind kind-{escape(step.kind)}'{problem}>"
            f"{escape(step.kind)}</span>{once}</td><td>{escape(step.shown_name)}</td>"
            f"<td><code>{escape(step.call_id or '')}"
            f"</code></td><td class='num'>{step.attempt if step.attempt is not None else ''}</td>"
            f"<td>{escape(_time(step.recorded_at))}</td><td class='num'>{escape(_size(step.size))}</td>"
            f"<td class='num'>{_tokens(step.cost)}</td><td class='num'>{_cost(step.cost)}</td>"
            f"<td class='row-actions'>{show}</td></tr>"
        )
    total = replay_total([(step.kind, step.cost) for step in data.steps])
    return (
        f'<section><h2>Steps ({len(data.steps)})</h2><p class="totals">{escape(total)}</p>'
        '<table class="steps"><thead><tr><th>#</th><th>Kind</th>'
        "<th>Model or tool</th><th>Call id</th><th>Try</th><th>Recorded</th><th>Size</th><th>Tokens</th><th>Cost</th>"
        f"<th></th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _tokens(cost: StepCost) -> str:
    if cost.tokens is None:
        return ""
    return escape(f"{cost.tokens:,}", quote=True) + (
        f'<span class="muted"> ({cost.input_tokens or 0:,} in, {cost.output_tokens or 0:,} out)</span>'
    )


def _cost(cost: StepCost) -> str:
    return "" if cost.price is None else escape(cost.price)


def confirmation_page(confirmation: Confirmation) -> str:
    """A page that asks once more before a POST."""
    task = confirmation.task
    body = (
        f"{_header(task)}<section class='confirm'><h2>{escape(confirmation.title)}</h2>"
        f"<p>{escape(confirmation.explanation)}</p>"
        f'<form method="post" action="{escape(confirmation.action_url)}">'
        f'<input type="hidden" name="form_token" value="{escape(confirmation.token)}">'
        f'<button type="submit" class="button danger">{escape(confirmation.button)}</button> '
        f'<a class="button" href="{escape(task.url())}">Cancel</a></form></section>'
    )
    return _page(confirmation.title, body, _static(task))


def message_page(task: TaskRef | None, title: str, message: str, static: str) -> str:
    """A page that only says something (an error, a refusal)."""
    back = f'<p><a href="{escape(task.url())}">Back to the cache</a></p>' if task is not None else ""
    header = _header(task) if task is not None else "<header><h1>Durable cache</h1></header>"
    body = f"{header}<section><h2>{escape(title)}</h2><p>{escape(message)}</p>{back}</section>"
    return _page(title, body, static)


def iterations_page(task: TaskRef, iterations: list[int], static: str) -> str:
    """A task that ran in a loop (Airflow 3.4) has one cache per iteration: links to each."""
    links = "".join(
        f'<li><a href="{escape(TaskRef(**{**task.__dict__, "iteration": number}).url())}">'
        f"Loop iteration {number}</a></li>"
        for number in iterations
    )
    body = (
        f"{_header(task)}<section><h2>One cache per loop iteration</h2>"
        "<p>This task runs inside a task-group loop; each iteration records its own steps.</p>"
        f'<ul class="iterations">{links}</ul></section>'
    )
    return _page("Durable cache", body, static)


def _static(task: TaskRef) -> str:
    return f"{task.root}/static"
