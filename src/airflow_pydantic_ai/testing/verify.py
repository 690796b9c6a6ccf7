"""Replay recorded steps against the current code of a DAG, with no live call: does an edit break the replay?

For each agent task of a DAG (``AgentOperator``, ``@task.pydantic_ai``), :func:`verify_task` builds the
agent and the prompt as the task would (templates rendered with a minimal context: the DAG, the task,
its params, the run id), and runs it in ``durable_mode = replay`` over the steps a kept cache or a
fixture holds. The first step the current code would not replay raises the replay miss, which names
the step, the components that changed and the prompt's diff; a run that replays to its end
"replays cleanly".

Guarantees: no model request and no tool call (no tool runs live, not even one a task names in
``durable_live_tools``); nothing is written to the cache or the fixture. A task whose prompt needs
what only a real run has (an upstream task's XCom) is reported as not verifiable, never run.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable import Attempt, StepStore
    from airflow_pydantic_ai.durable.read import StepEntry
    from airflow_pydantic_ai.operators.agent import AgentOperator

__all__ = ["Verdict", "verify_task"]

Outcome = Literal["clean", "diverged", "error"]


@dataclass(frozen=True)
class Verdict:
    """What replaying one task's recorded steps against the current code gave."""

    task_id: str
    outcome: Outcome
    detail: str

    def line(self, dag_id: str) -> str:
        return f"{dag_id}.{self.task_id}: {self.detail}"


class _QuietLog:
    """The attempt's logger: its per-step lines are not the command's output."""

    def info(self, msg: str, *args: Any, **_: Any) -> None:
        pass

    debug = info
    warning = info
    error = info


def _context(dag: Any, task: Any, run_id: str) -> dict[str, Any]:
    ti = types.SimpleNamespace(
        dag_id=dag.dag_id, task_id=task.task_id, run_id=run_id, map_index=-1, try_number=1, max_tries=0
    )
    return {"dag": dag, "task": task, "params": dict(task.params or {}), "run_id": run_id, "ti": ti}


def verify_task(
    dag: Any,
    task: AgentOperator,
    store: StepStore,
    extra: dict[str, StepEntry] | None,
    source: str,
    *,
    run_id: str = "verify",
) -> Verdict:
    """Replay ``store``'s steps (and ``extra``, a fixture's) for ``task`` in replay mode, calling nothing live."""
    from airflow_pydantic_ai.durable import Attempt, AttemptOptions, Recording, ReplayPolicy, run_agent
    from airflow_pydantic_ai.durable.errors import ReplayMiss
    from airflow_pydantic_ai.tries.modes import mask

    policy = ReplayPolicy(mode="replay", mask=mask, source=source, agent=f"the agent of task {task.task_id!r}")
    options = AttemptOptions(policy=policy, recording=Recording(extra, source) if extra else None)
    run = Attempt.open(store, attempt=1, log=_QuietLog(), options=options)
    if not run.steps_found().recorded:
        return Verdict(task.task_id, "error", f"nothing recorded in {source}")
    try:
        context = _context(dag, task, run_id)
        task.render_template_fields(context)  # type: ignore[arg-type]
        prompt, agent, model = task._prepare(context)
    except Exception as error:
        return Verdict(task.task_id, "error", f"cannot be verified: building its prompt or agent failed ({error})")
    try:
        run_agent(run, agent, prompt, model=model, usage_limits=task.usage_limits, deps=task.deps)
    except Exception as error:
        from airflow_pydantic_ai.tries.modes import find_error

        miss = find_error(error, ReplayMiss)
        if isinstance(miss, ReplayMiss) and miss.changed:
            return Verdict(task.task_id, "diverged", f"diverges{_releases(run)}: {miss}")
        if miss is not None:  # a failed run's cache ends here: its retry would run on live from this step
            return Verdict(task.task_id, "clean", _clean(run, source, ends_at=run.steps_found().model_steps))
        return Verdict(task.task_id, "error", f"the replay failed: {type(error).__name__}: {error}")
    return Verdict(task.task_id, "clean", _clean(run, source))


def _releases(run: Attempt) -> str:
    """Issue 34: when the recording was made under another pydantic-ai release than the one installed here (``cache
    verify`` run in the environment of an upgrade), the words that say which, so that the verdict answers "what
    would run live after this upgrade"; empty otherwise."""
    from airflow_pydantic_ai.durable.read import installed_release

    here = installed_release()
    others = sorted(release for release in run.steps_found().releases - {None, here} if release is not None)
    if others:
        return f" (recorded under pydantic-ai {', '.join(others)}; installed here: {here})"
    return ""  # the same release, or entries written before they named theirs (0.3.0 and earlier)


def _clean(run: Attempt, source: str, ends_at: int | None = None) -> str:
    replayed = run.steps_found().replayed
    steps = f"{replayed.model} model and {replayed.tool} tool steps from {source}{_releases(run)}"
    if ends_at is None:
        return f"replays cleanly ({steps})"
    return (
        f"replays cleanly up to model step {ends_at}, where the recording ends ({steps}); a retry runs on live "
        "from there"
    )
