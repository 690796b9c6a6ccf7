"""``@task.pydantic_ai``: a TaskFlow function that returns the prompt for an
:class:`~airflow_pydantic_ai.operators.agent.AgentOperator`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

# common.compat's names for the decorator machinery: stable across Airflow 3.1-3.3 (SET_DURING_EXECUTION
# is otherwise only importable from a private module).
from airflow.providers.common.compat.sdk import (
    SET_DURING_EXECUTION,
    DecoratedOperator,
    TaskDecorator,
    context_merge,
    determine_kwargs,
    task_decorator_factory,
)

from airflow_pydantic_ai.operators.agent import AgentOperator

__all__ = ["agent_task"]


class _AgentDecoratedOperator(DecoratedOperator, AgentOperator):
    """
    Calls the decorated function to get the prompt, then runs the agent like :class:`AgentOperator`.

    Every :class:`AgentOperator` argument (``model_id``, ``llm_conn_id``, ``durable``, ``toolsets``...)
    passes through the decorator.

    :param python_callable: The function; it must return a non-empty string, the prompt.
    :param op_args: Positional arguments for the function. (templated)
    :param op_kwargs: Keyword arguments for the function. (templated)
    """

    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *AgentOperator.template_fields)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **AgentOperator.template_fields_renderers,
    }
    custom_operator_name: str = "@task.pydantic_ai"
    overwrite_rtif_after_execution: bool = True

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            prompt=SET_DURING_EXECUTION,
            **kwargs,
        )

    def _resolve_prompt(self, context: Any) -> str:
        # Runs inside AgentOperator.execute, so a failing function still gets the durable summary line.
        # The returned text is used as it is, never rendered as a template: it often carries data from
        # upstream tasks, and Jinja in it could pull Variables or Connections into a prompt sent to a model.
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        prompt = self.python_callable(*self.op_args, **kwargs)
        if not isinstance(prompt, str) or not prompt.strip():
            raise TypeError(
                f"@task.pydantic_ai function {self.python_callable.__name__!r} must return the prompt as a non-empty "
                f"string, got {prompt!r}"
            )
        self.prompt = prompt  # shown as the rendered prompt (overwrite_rtif_after_execution)
        return prompt

    def execute(self, context: Any) -> Any:
        return AgentOperator.execute(self, context)


def agent_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """
    Turn a function that returns a prompt into an agent task (``@task.pydantic_ai``).

    Accepts every :class:`~airflow_pydantic_ai.operators.agent.AgentOperator` argument::

        @task.pydantic_ai(model_id="openai:gpt-4o", durable=True, retries=2)
        def summarize(text: str) -> str:
            return f"Summarize: {text}"

    :param python_callable: The function to decorate.
    :param batch: As on ``AgentOperator``: ``True`` or a ``BatchModelRequests(...)`` sends the run's model requests
        through the provider's batch API; with ``durable=True`` the task defers while they are pending
        (``pending_timeout``, default 24 hours). See ``docs/batch.rst``.
    :param on_unknown_outcome: As on ``AgentOperator``: what a try does with an ``at_most_once()`` call an earlier
        try started and never finished, ``"ask"`` (a person, on the Required Actions page), ``"fail"`` or
        ``"rerun"``; None: ``[pydantic_ai] durable_on_unknown_outcome``. Checked when the DAG is parsed.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_AgentDecoratedOperator,
        **kwargs,
    )
