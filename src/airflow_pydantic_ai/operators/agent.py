"""AgentOperator: run a pydantic-ai agent in an Airflow task, optionally durable across retries."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.approval import Resume
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

    With ``durable=True``, tools that need approval (``requires_approval=True``, ``ApprovalRequired``)
    make the task ask a person through Airflow's human-in-the-loop request and wait without a worker
    slot; the answer's decisions are recorded like steps and the run goes on (see ``docs/approval.rst``).

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
    :param budget_across_tries: With ``durable=True``: ``usage_limits`` count the live usage of every try of
        the task instance, not of each try alone (kept in the cache beside the steps). A try that would go past
        a limit fails before the request, naming the limit and what earlier tries spent. None (default): the
        ``[pydantic_ai] durable_budget_across_tries`` option decides.
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
    :param approval_timeout: How long a person has to approve or reject tool calls that need approval
        (``requires_approval=True``, ``ApprovalRequired``); None waits without limit. Needs ``durable=True``.
    :param on_approval_timeout: ``"fail"`` (default) fails the task when nobody answered in time;
        ``"reject"`` rejects the pending calls (the model is told so) and the run goes on.
    :param approval_assigned_users: Who may answer (Airflow's ``HITLUser`` dicts ``{"id": ..., "name": ...}``);
        empty: anyone allowed by the auth manager to answer human-in-the-loop requests of this DAG.
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
        budget_across_tries: bool | None = None,
        durable: bool = False,
        agent: Agent[Any, Any] | None = None,
        durable_cache_path: str | None = None,
        deps: Any = None,
        event_stream_handler: Callable[..., Any] | None = None,
        approval_timeout: timedelta | None = None,
        on_approval_timeout: str = "fail",
        approval_assigned_users: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from airflow_pydantic_ai.approval import ApprovalSettings

        self.approval = ApprovalSettings.checked(approval_timeout, on_approval_timeout, approval_assigned_users)
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
        self.budget_across_tries = budget_across_tries
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
        return self._execute(context, resume=None)

    def resume_after_approval(self, context: Any, event: Any = None, **kwargs: Any) -> Any:
        """Airflow calls this (instead of ``execute``) when a person answered, or the approval timed out."""
        from airflow_pydantic_ai.approval import Resume

        return self._execute(context, resume=Resume.from_kwargs(event, kwargs))

    def _execute(self, context: Any, resume: Resume | None) -> Any:
        if not self.durable:
            prompt, agent, model = self._prepare(context)
            _refuse_approvals_without_durable(agent)
            _refuse_external_tools(agent)
            return _to_xcom(self._run_plain(agent, prompt, model).output)
        from airflow_pydantic_ai.durability import start_durable_run
        from airflow_pydantic_ai.durable import empty_summary, run_agent
        from airflow_pydantic_ai.reporting import publish_report

        try:
            # First: a cache left by an earlier DAG run with this run_id is dropped on try 1 even when
            # the prompt or the agent fails to build (try 2 could not tell it apart any more).
            run = start_durable_run(
                context,
                log=self.log,
                cache_path=self.durable_cache_path,
                resuming=resume is not None,
                usage_limits=self.usage_limits,
                budget_across_tries=self.budget_across_tries,
            )
        except BaseException:
            # Every durable attempt logs its summary, also one that failed before any step ran.
            self.log.info(empty_summary())
            raise
        # issue 22: the report as XCom durable_report and Airflow metrics, whatever the outcome
        run.when_ended(lambda report: publish_report(context, report, log=self.log, push=self.do_xcom_push))
        # The summary ends every attempt, also one that stops to wait for approval (which is not a failed try).
        with run.ending(waits=_waits_for_a_person):
            recorded = run.recorded_output()
            if recorded is not None:
                # The previous try finished and was killed before Airflow recorded its success.
                return self._complete(context, run, recorded.value)
            prompt, agent, model = self._prepare(context)
            _refuse_external_tools(agent)
            if resume is not None:
                from airflow_pydantic_ai.approval import record_answer

                record_answer(run, resume, settings=self.approval, log=self.log)
            result = run_agent(
                run,
                agent,
                prompt,
                model=model,
                usage_limits=self.usage_limits,
                deps=self.deps,
                event_stream_handler=self.event_stream_handler,
            )
            from airflow_pydantic_ai.durable import WaitingForDecisions

            if isinstance(result, WaitingForDecisions):
                from airflow_pydantic_ai.approval import ask

                ask(self, context, result, prompt=prompt, settings=self.approval, previous=resume, log=self.log)
            return self._complete(context, run, _to_xcom(result.output))

    def _prepare(self, context: Any) -> tuple[str, Agent[Any, Any], Any]:
        """The prompt of this try, the agent, and the model to run it with (None: the agent's own)."""
        prompt = self._resolve_prompt(context)
        agent = self.build_agent()
        return prompt, agent, self._model() if self.agent is not None else None

    def _complete(self, context: Any, run: DurableRun, output: Any) -> Any:
        """Record the output (durable), push it, and have the cache deleted once Airflow records the success.

        Until then every recorded step stays: a worker killed after this point (before Airflow stores the
        task's success) leaves a cache from which the retry returns this same output, calling nothing.
        """
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
        from airflow_pydantic_ai.durability import delete_cache_after_success

        delete_cache_after_success(self, run)

    def _resolve_prompt(self, context: Any) -> str:
        """The prompt of this try (``@task.pydantic_ai`` gets it from its function)."""
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"AgentOperator prompt must be a non-empty string, got {self.prompt!r}")
        return self.prompt

    def _run_plain(self, agent: Agent[Any, Any], prompt: str, model: Any) -> Any:
        """The run's result, without durability."""
        from pydantic_ai.exceptions import UserError

        try:
            return agent.run_sync(
                prompt,
                model=model,
                usage_limits=self.usage_limits,
                deps=self.deps,
                event_stream_handler=self.event_stream_handler,
            )
        except UserError as error:
            if "DeferredToolRequests" not in str(error):
                raise
            # A tool raised ApprovalRequired (or CallDeferred): only a durable run can wait for the answer.
            raise ValueError(
                "a tool call asked for approval (ApprovalRequired); the run has to survive the wait for a "
                "person's answer, which only the durable cache provides. Set durable=True on the "
                "AgentOperator / @task.pydantic_ai."
            ) from error


def _refuse_external_tools(agent: Agent[Any, Any]) -> None:
    """Calls answered by work done outside the agent (external tools) cannot be waited for: say so before any step."""
    from pydantic_ai.toolsets import ExternalToolset

    def visit(toolset: Any) -> None:
        if isinstance(toolset, ExternalToolset):
            names = ", ".join(sorted(tool.name for tool in toolset.tool_defs)) or "(none)"
            raise ValueError(
                f"the agent has external tools ({names}) whose calls are answered by work done outside the agent; "
                "AgentOperator cannot wait for such results (only for a person's approval). Turn them into function "
                "tools, with requires_approval=True if a person should confirm them."
            )

    for toolset in agent.toolsets:
        toolset.apply(visit)


def _refuse_approvals_without_durable(agent: Agent[Any, Any]) -> None:
    """Tools that need approval wait for a person, and only the durable cache keeps the run through the wait."""
    for toolset in agent.toolsets:
        tools = getattr(toolset, "tools", None)
        if not isinstance(tools, dict):
            continue
        needing = sorted(name for name, tool in tools.items() if getattr(tool, "requires_approval", False))
        if needing:
            raise ValueError(
                f"the tool(s) {', '.join(needing)} need approval (requires_approval=True); the run has to survive "
                "the wait for a person's answer, which only the durable cache provides. Set durable=True on the "
                "AgentOperator / @task.pydantic_ai."
            )


def _waits_for_a_person(error: BaseException) -> bool:
    """The try parks (``awaiting_input``) or defers until a person answers: it has not failed."""
    return type(error).__name__ in ("TaskAwaitingInput", "TaskDeferred")


def _to_xcom(output: Any) -> Any:
    """JSON-friendly form of an agent output (a pydantic model becomes its JSON dict)."""
    if output is None or isinstance(output, (str, int, float, bool)):
        return output
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(output)
