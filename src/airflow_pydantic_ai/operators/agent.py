"""AgentOperator: run a pydantic-ai agent in an Airflow task, optionally durable across retries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.durable import DurableRun

__all__ = ["AgentOperator"]


class AgentOperator(BaseOperator):
    """
    Run a pydantic-ai agent on a prompt and push its output to XCom.

    The agent is either built from the arguments (``model_id`` / ``llm_conn_id``, ``system_prompt``,
    ``output_type``, ``toolsets``, ``agent_params``) or given ready-made with ``agent=`` (its
    ``@agent.tool`` tools included). A structured output (a pydantic model or dataclass) is pushed
    as its JSON dict.

    With ``durable=True`` each model response and tool result is recorded in an object-storage cache
    keyed by dag / run / task / map index. When the task fails and Airflow retries it, unchanged
    steps replay from the cache instead of calling the model or repeating the tool; a changed step
    runs live with a warning naming what changed, and every step after it runs live too. The output
    is recorded in the cache before it is pushed, and the cache is deleted once Airflow has recorded
    the task's success (from a success callback): a worker lost in between leaves a retry that
    returns the same output without calling the model or any tool. Delete the cache by hand to force
    a fresh run. The location is printed at the start of the task log.

    :param prompt: The user prompt. (templated)
    :param llm_conn_id: A ``pydantic_ai`` connection (API key, base URL, model in its extra). With
        none, ``model_id`` is resolved by pydantic-ai itself using the usual environment credentials.
    :param model_id: A pydantic-ai model id such as ``"openai:gpt-4o"`` or ``"test"``; overrides the
        connection's model. (templated)
    :param system_prompt: Instructions for the agent. (templated)
    :param output_type: The agent's output type: ``str`` (default), a pydantic model, a dataclass...
    :param toolsets: Toolsets (e.g. ``FunctionToolset``, MCP servers) the agent may use.
    :param agent_params: Further keyword arguments for ``pydantic_ai.Agent(...)``.
    :param usage_limits: A ``pydantic_ai.usage.UsageLimits``; replayed steps do not count against it.
    :param durable: Record steps and replay them on a retry.
    :param agent: A ready ``pydantic_ai.Agent`` to run instead of building one. ``model_id`` or
        ``llm_conn_id``, if given, override its model for the run.
    :param durable_cache_path: Cache base for this task, overriding ``[pydantic_ai] durable_cache_path``.
        (templated)
    :param deps: The run's dependencies, handed to ``agent.run(deps=...)``; tools read them as
        ``ctx.deps``. A replayed tool step does not run the tool, so it does not touch ``deps``.
    :param event_stream_handler: An async function ``(ctx, events)`` handed to
        ``agent.run(event_stream_handler=...)``: it sees the events of every model response and tool
        call as they happen. With ``durable=True`` a replayed model step arrives as a completed
        stream whose part events are rebuilt from the recorded response.
    """

    template_fields: Sequence[str] = ("prompt", "system_prompt", "model_id", "durable_cache_path")
    template_fields_renderers: ClassVar[dict[str, str]] = {"prompt": "md", "system_prompt": "md"}
    ui_color = "#e8d5f5"

    def __init__(
        self,
        *,
        prompt: str,
        llm_conn_id: str | None = None,
        model_id: str | None = None,
        system_prompt: str | None = None,
        output_type: Any = str,
        toolsets: Sequence[Any] | None = None,
        agent_params: dict[str, Any] | None = None,
        usage_limits: UsageLimits | None = None,
        durable: bool = False,
        agent: Agent[Any, Any] | None = None,
        durable_cache_path: str | None = None,
        deps: Any = None,
        event_stream_handler: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if agent is not None:
            conflicts = {"system_prompt": system_prompt, "toolsets": toolsets, "agent_params": agent_params}
            given = [name for name, value in conflicts.items() if value]
            if output_type is not str:
                given.append("output_type")
            if given:
                raise ValueError(
                    f"AgentOperator got agent= together with {', '.join(given)}; configure those on your "
                    "pydantic_ai.Agent instead (model_id / llm_conn_id may still override its model)."
                )
        elif llm_conn_id is None and model_id is None:
            raise ValueError(
                "AgentOperator needs a model: set model_id= (e.g. 'openai:gpt-4o', or 'test' for TestModel), "
                "llm_conn_id= (a pydantic_ai connection), or agent= (a ready pydantic_ai.Agent)."
            )
        self.prompt = prompt
        self.llm_conn_id = llm_conn_id
        self.model_id = model_id
        self.system_prompt = system_prompt
        self.output_type = output_type
        self.toolsets = list(toolsets) if toolsets else None
        self.agent_params = dict(agent_params or {})
        self.usage_limits = usage_limits
        self.durable = durable
        self.agent = agent
        self.durable_cache_path = durable_cache_path
        self.deps = deps
        self.event_stream_handler = event_stream_handler

    def _model(self) -> Any:
        """The model to run with: from the connection, the model id, or None for the agent's own."""
        if self.llm_conn_id:
            from airflow_pydantic_ai.hooks.pydantic_ai import PydanticAIHook

            return PydanticAIHook(llm_conn_id=self.llm_conn_id).get_model(self.model_id or None)
        return self.model_id or None

    def build_agent(self) -> Agent[Any, Any]:
        """The agent this task runs (a fresh one unless ``agent=`` was given)."""
        if self.agent is not None:
            return self.agent
        from pydantic_ai import Agent

        return Agent(
            self._model(),
            output_type=self.output_type,
            instructions=self.system_prompt or None,
            toolsets=self.toolsets,
            **self.agent_params,
        )

    def execute(self, context: Any) -> Any:
        run: DurableRun | None = None
        try:
            if self.durable:
                from airflow_pydantic_ai.durability import start_durable_run

                # First: a cache left by an earlier DAG run with this run_id is dropped on try 1 even when
                # the prompt or the agent fails to build (try 2 could not tell it apart any more).
                run = start_durable_run(context, log=self.log, cache_path=self.durable_cache_path)
                recorded = run.recorded_output()
                if recorded is not None:
                    # The previous try finished and was killed before Airflow recorded its success.
                    return self._complete(context, run, recorded.value)
            prompt = self._resolve_prompt(context)
            agent = self.build_agent()
            model = self._model() if self.agent is not None else None
            output = _to_xcom(self._run_agent(agent, prompt, model, run).output)
            return self._complete(context, run, output)
        except BaseException:
            if run is not None:
                run.end_failed_try()
            raise
        finally:
            # Every durable attempt says what it replayed and executed, also one that failed before any step ran.
            if run is not None:
                run.log_summary()
            elif self.durable:
                from airflow_pydantic_ai.durable import empty_summary

                self.log.info(empty_summary())

    def _complete(self, context: Any, run: DurableRun | None, output: Any) -> Any:
        """Record the output (durable), push it, and have the cache deleted once Airflow records the success.

        Until then every recorded step stays: a worker killed after this point (before Airflow stores the
        task's success) leaves a cache from which the retry returns this same output, calling nothing.
        """
        if run is None:
            return output
        run.record_output(output)
        if self.do_xcom_push:
            from airflow.sdk.bases.xcom import BaseXCom

            context["ti"].xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=output)
        self._delete_cache_after_success(run)
        return output

    def _delete_cache_after_success(self, run: DurableRun) -> None:
        """Delete the cache from a success callback: Airflow's task runner calls those only after the
        supervisor has stored the task's success (Airflow 3.1, 3.2 and 3.3 alike).

        The callback goes on this try's copy of the operator (the task runner executes a copy), first in
        the list, before the DAG author's own callbacks.
        """
        callbacks = [
            callback for callback in self.on_success_callback or () if not isinstance(callback, _DeleteDurableCache)
        ]
        self.on_success_callback = [_DeleteDurableCache(run), *callbacks]

    def _resolve_prompt(self, context: Any) -> str:
        """The prompt of this try (``@task.pydantic_ai`` gets it from its function)."""
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"AgentOperator prompt must be a non-empty string, got {self.prompt!r}")
        return self.prompt

    def _run_agent(self, agent: Agent[Any, Any], prompt: str, model: Any, run: DurableRun | None) -> Any:
        from pydantic_ai.exceptions import UnexpectedModelBehavior

        run_arguments: dict[str, Any] = {"deps": self.deps, "event_stream_handler": self.event_stream_handler}
        if run is None:
            return agent.run_sync(prompt, model=model, usage_limits=self.usage_limits, **run_arguments)
        from airflow_pydantic_ai.durable import DurableCapability

        try:
            return agent.run_sync(
                prompt,
                model=model,
                usage_limits=run.usage_limits(self.usage_limits),
                capabilities=[DurableCapability(run)],
                **run_arguments,
            )
        except UnexpectedModelBehavior:
            # Retries ran out: what failed (the last answer, the retries it drew) would fail the same way on replay.
            run.forget_what_failed()
            raise


class _DeleteDurableCache:
    """A success callback that deletes one try's durable cache (see ``AgentOperator._delete_cache_after_success``)."""

    def __init__(self, run: DurableRun) -> None:
        self.run = run

    def __call__(self, context: Any) -> None:
        self.run.finish()

    def __repr__(self) -> str:
        return f"<delete the durable cache at {self.run.store.location}>"


def _to_xcom(output: Any) -> Any:
    """JSON-friendly form of an agent output (a pydantic model becomes its JSON dict)."""
    if output is None or isinstance(output, (str, int, float, bool)):
        return output
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(output)
