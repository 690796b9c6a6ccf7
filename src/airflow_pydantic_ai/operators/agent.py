"""AgentOperator: run a pydantic-ai agent in an Airflow task, optionally durable across retries."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_pydantic_ai.operators.agent_checks import (
    refuse_approvals_without_durable,
    refuse_external_tools,
    to_xcom,
    tools_needing_approval,
    waits_for_a_person,
)

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    from airflow_pydantic_ai.approval import Resume
    from airflow_pydantic_ai.durable import Attempt
    from airflow_pydantic_ai.pending import PendingSettings
    from airflow_pydantic_ai.tries.modes import ModeSettings

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
    So does an ``at_most_once()`` tool call that an earlier try started and never finished, as
    ``on_unknown_outcome`` says (see ``docs/side_effects.rst``).

    Model requests sent through the provider's batch API (pydantic-ai's ``BatchModelRequests`` on the agent, or
    ``batch=``) or OpenAI's background mode (``openai_background``): with ``durable=True`` the submission is
    recorded before the wait, the task defers while the provider works (Airflow's triggerer checks the request;
    no worker slot is held), and it resumes on a worker when the result is ready (see ``docs/batch.rst``).

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
        ``"reject"`` rejects the pending calls (the model is told so) and the run goes on. A question about a
        call whose outcome is unknown always fails the task at the timeout.
    :param on_clear: What a try started by clearing the task does with its cache: ``"resume"`` (replay what
        was recorded) or ``"fresh"`` (discard it, run every step live). None (default) uses ``[pydantic_ai]
        on_clear`` (``resume`` unless set). On Airflow 3.4 the person who clears decides instead
        (``keep_task_state``); this applies there only when the task-state store cannot be read. Retries
        are never affected. See ``docs/durability.rst``.
    :param on_unknown_outcome: What a try does with an ``at_most_once()`` tool call that an earlier try started
        and never finished (the try was cut off while it ran): ``"ask"`` stops and asks a person on the task's
        Required Actions page whether it happened ("It happened", with the result to give the model; "Run it
        again"; "Fail the task"), waiting without a worker slot as for approvals (``approval_timeout``,
        ``approval_assigned_users``; nobody answering in time fails the task); ``"fail"`` fails the task, naming
        the call and the ``airflow pydantic-ai cache resolve`` command; ``"rerun"`` runs the call again with a
        WARNING. None (default): ``[pydantic_ai] durable_on_unknown_outcome`` (``ask`` unless set). See
        ``docs/side_effects.rst``.
    :param approval_assigned_users: Who may answer (Airflow's ``HITLUser`` dicts ``{"id": ..., "name": ...}``);
        empty: anyone allowed by the auth manager to answer human-in-the-loop requests of this DAG.
    :param durable_mode: ``"auto"`` (replay what was recorded, run the rest live), ``"replay"`` (run nothing
        live: a step that was not recorded fails the task at once, naming what changed), ``"record"`` (run
        every step live and record it, replacing what was recorded) or ``"off"`` (as ``durable=False``).
        Default: ``[pydantic_ai] durable_mode``. Any mode but ``"off"`` given here makes the task durable.
    :param durable_fixtures: A fixture folder (written by ``airflow pydantic-ai cache export`` or a
        ``record`` run) whose steps this task replays, read in place. With ``durable_mode="record"``
        the task writes its recorded steps there when it completes. Giving it makes the task durable. (templated)
    :param durable_live_tools: Tools that run live in ``replay`` mode even when recorded (pure functions
        under test); every other tool replays its recorded result.
    :param durable_keep_cache: Keep the cache after the task succeeded (to export it as a fixture);
        by default a successful task deletes it.
    :param batch: ``True`` adds pydantic-ai's ``BatchModelRequests()`` to the run (or give your own
        ``BatchModelRequests(...)``): every model request goes through the provider's batch API (about half the
        price; results within up to 24 hours). The agent's own ``BatchModelRequests`` works the same without it.
        Without ``durable=True`` a WARNING says that a lost worker submits again.
    :param pending_timeout: How long the task waits deferred for one pending request (a batch, a background
        response) before it fails (a retry picks up the same request): a timedelta, seconds or an ISO 8601
        duration; None waits without limit. Default 24 hours, the providers' batch completion window. It does not
        count against ``execution_timeout``, which times the work on a worker only. (templated)
    """

    template_fields: Sequence[str] = (
        "prompt",
        "system_prompt",
        "model_id",
        "durable_cache_path",
        "durable_fixtures",
        "pending_timeout",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"prompt": "md", "system_prompt": "md"}
    ui_color = "#e8d5f5"
    _modes: ModeSettings
    _pending: PendingSettings
    _SHARED_WHEN_COPIED: ClassVar[tuple[str, ...]] = (
        "agent",
        "deps",
        "toolsets",
        "output_type",
        "event_stream_handler",
        "batch",
    )
    """What every copy of the task shares with the original (Airflow deep-copies a task for a subset, a clear,
    a test run): a ready agent holds a ``ContextVar`` and locks that cannot be copied, and deps, toolsets and
    handlers are the user's live objects (a connection pool, an MCP client), not values."""

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
        on_clear: str | None = None,
        on_unknown_outcome: str | None = None,
        durable_mode: str | None = None,
        durable_fixtures: str | None = None,
        durable_live_tools: Collection[str] = (),
        durable_keep_cache: bool = False,
        batch: Any = None,
        pending_timeout: Any = timedelta(hours=24),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_clear is not None:
            from airflow_pydantic_ai.tries.settings import check_on_clear

            check_on_clear(on_clear, "AgentOperator on_clear=")
        self.on_clear = on_clear
        if on_unknown_outcome is not None:
            from airflow_pydantic_ai.tries.settings import check_on_unknown_outcome

            check_on_unknown_outcome(on_unknown_outcome, "AgentOperator on_unknown_outcome=")
        self.on_unknown_outcome = on_unknown_outcome
        from airflow_pydantic_ai.approval import ApprovalSettings

        self.approval = ApprovalSettings.checked(approval_timeout, on_approval_timeout, approval_assigned_users)
        from airflow_pydantic_ai.pending import PendingSettings

        if not (isinstance(pending_timeout, str) and "{{" in pending_timeout):  # a template is checked per try
            PendingSettings.checked(pending_timeout, batch)
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
        self.durable_mode = durable_mode
        self.durable_fixtures = durable_fixtures
        self.durable_live_tools = tuple(durable_live_tools)
        self.durable_keep_cache = durable_keep_cache
        self.batch = batch
        self.pending_timeout = pending_timeout

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentOperator:
        # An object already in the memo is "copied" as itself: the rest of the task is copied as Airflow does.
        for name in self._SHARED_WHEN_COPIED:
            value = self.__dict__.get(name)
            if value is not None:
                memo.setdefault(id(value), value)
        copied: AgentOperator = super().__deepcopy__(memo)
        return copied

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
        from airflow_pydantic_ai.tries.modes import replay_misses_fail_at_once

        with replay_misses_fail_at_once(self.task_id):
            return self._execute(context, resume=None)

    def resume_after_approval(self, context: Any, event: Any = None, **kwargs: Any) -> Any:
        """Airflow calls this (instead of ``execute``) when a person answered, or the approval timed out."""
        from airflow_pydantic_ai.approval import Resume
        from airflow_pydantic_ai.tries.modes import replay_misses_fail_at_once

        with replay_misses_fail_at_once(self.task_id):
            return self._execute(context, resume=Resume.from_kwargs(event, kwargs))

    def resume_after_pending(self, context: Any, event: Any = None, **kwargs: Any) -> Any:
        """Airflow calls this (instead of ``execute``) when the triggerer saw the pending model requests' results
        (or could not check them): the try replays its steps and collects the results."""
        from airflow_pydantic_ai.pending.wait import log_resume
        from airflow_pydantic_ai.tries.modes import replay_misses_fail_at_once

        log_resume(self.log, event)
        with replay_misses_fail_at_once(self.task_id):
            return self._execute(context, resume=None, continues=True)

    def _execute(self, context: Any, resume: Resume | None, continues: bool = False) -> Any:
        from airflow_pydantic_ai.tries.modes import ModeSettings
        from airflow_pydantic_ai.tries.settings import DurableArguments

        arguments = DurableArguments(  # one value, read once this try (templates are rendered by now)
            durable=self.durable,
            cache_path=self.durable_cache_path,
            on_clear=self.on_clear,
            mode=self.durable_mode,
            fixtures=self.durable_fixtures,
            live_tools=self.durable_live_tools,
            keep_cache=self.durable_keep_cache,
            budget_across_tries=self.budget_across_tries,
            on_unknown_outcome=self.on_unknown_outcome,
        )
        self._modes = ModeSettings.of(arguments)
        from airflow_pydantic_ai.pending import PendingSettings

        self._pending = PendingSettings.checked(self.pending_timeout, self.batch)
        if not self._modes.durable(arguments.durable):
            prompt, agent, model = self._prepare(context)
            refuse_approvals_without_durable(agent)
            refuse_external_tools(agent)
            from airflow_pydantic_ai.pending.settings import LOST_WORKER_WARNING, uses_provider_side_work

            if uses_provider_side_work(agent, self._pending, model):
                self.log.warning(LOST_WORKER_WARNING, self.task_id)
            return to_xcom(self._run_plain(agent, prompt, model).output)
        from airflow_pydantic_ai.durable import Attempt, run_agent
        from airflow_pydantic_ai.tries.lifecycle import hint_at_retries, note_how_the_try_ends, start_durable_run
        from airflow_pydantic_ai.tries.report import publish_report

        try:
            # First: a cache left by an earlier DAG run with this run_id is dropped on try 1 even when
            # the prompt or the agent fails to build (try 2 could not tell it apart any more).
            run = start_durable_run(
                context,
                log=self.log,
                arguments=arguments,
                resuming=resume is not None or continues,
                modes=self._modes,
                defer_pending=True,
                usage_limits=self.usage_limits,
            )
        except BaseException:
            # Every durable attempt logs its summary, also one that failed before any step ran.
            self.log.info(Attempt.empty_summary())
            raise
        # issue 22: the report as XCom durable_report and Airflow metrics, whatever the outcome
        run.when_ended(lambda report: publish_report(context, report, log=self.log, push=self.do_xcom_push))
        # The summary ends every attempt, also one that stops to wait for approval (which is not a failed try).
        with note_how_the_try_ends(run, log=self.log), run.ending(waits=waits_for_a_person):
            recorded = run.recorded_output()
            if recorded is not None:
                # The previous try finished and was killed before Airflow recorded its success.
                return self._complete(context, run, recorded.value)
            prompt, agent, model = self._prepare(context)
            refuse_external_tools(agent)
            from airflow_pydantic_ai.pending.settings import refuse_unsupported_batching

            refuse_unsupported_batching(agent, self._pending, model)
            if continues:
                pass  # after a pending request: the steps replay, the engine collects the result
            elif resume is None:
                hint_at_retries(context, log=self.log, asks_for_approval=bool(tools_needing_approval(agent)))
            else:
                from airflow_pydantic_ai.approval import record_answer

                record_answer(run, resume, settings=self.approval, log=self.log)
            from airflow_pydantic_ai.durable import RequestPending
            from airflow_pydantic_ai.durable.side_effects import AskAboutOutcome

            try:
                result = run_agent(
                    run,
                    agent,
                    prompt,
                    model=model,
                    usage_limits=self.usage_limits,
                    deps=self.deps,
                    event_stream_handler=self.event_stream_handler,
                    capabilities=self._pending.capabilities(),
                )
            except RequestPending as pending:  # a batch or background request: wait in the triggerer
                self._defer_while_pending(pending.tickets, agent)
            except AskAboutOutcome as question:  # on_unknown_outcome='ask': a call an earlier try never finished
                from airflow_pydantic_ai.approval import ask_about_outcome

                ask_about_outcome(
                    self, context, question.call, run=run, settings=self.approval, previous=resume, log=self.log
                )
            from airflow_pydantic_ai.durable import WaitingForDecisions

            if isinstance(result, WaitingForDecisions):
                from airflow_pydantic_ai.approval import ask

                ask(self, context, result, prompt=prompt, settings=self.approval, previous=resume, log=self.log)
            from airflow_pydantic_ai.pending import pending_output

            if pending_output(result.output):  # PendingModelResponse in the output type: wait, never push a ticket
                self._defer_while_pending([], agent)  # the submission is in the cache: the resumed try checks it
            return self._complete(context, run, to_xcom(result.output))

    def _defer_while_pending(self, tickets: list[Any], agent: Agent[Any, Any]) -> Any:
        """Release the worker until the provider has the results (:mod:`~airflow_pydantic_ai.pending.wait`)."""
        from airflow_pydantic_ai.pending import ModelSource, defer_while_pending

        source = ModelSource.of(llm_conn_id=self.llm_conn_id, model_id=self.model_id, agent=agent)
        defer_while_pending(self, tickets=tickets, source=source, settings=self._pending, agent=agent, log=self.log)

    def _prepare(self, context: Any) -> tuple[str, Agent[Any, Any], Any]:
        """The prompt of this try, the agent, and the model to run it with (None: the agent's own)."""
        prompt = self._resolve_prompt(context)
        agent = self.build_agent()
        return prompt, agent, self._model() if self.agent is not None else None

    def _complete(self, context: Any, run: Attempt, output: Any) -> Any:
        """Record the output (durable), push it, and have the cache deleted once Airflow records the success.

        Until then every recorded step stays: a worker killed after this point (before Airflow stores the
        task's success) leaves a cache from which the retry returns this same output, calling nothing.
        """
        run.record_output(output)
        if self.do_xcom_push:
            from airflow.sdk.bases.xcom import BaseXCom

            context["ti"].xcom_push(key=BaseXCom.XCOM_RETURN_KEY, value=output)
        from airflow_pydantic_ai.tries.lifecycle import task_identity

        # durable_mode = record with fixtures writes the fixture; durable_keep_cache keeps the cache.
        if not self._modes.after_success(run, task_identity(context["ti"]), self.log):
            self._delete_cache_after_success(run)
        return output

    def _delete_cache_after_success(self, run: Attempt) -> None:
        """Delete the cache from a success callback: Airflow's task runner calls those only after the
        supervisor has stored the task's success (Airflow 3.1, 3.2 and 3.3 alike).

        The callback goes on this try's copy of the operator (the task runner executes a copy), first in
        the list, before the DAG author's own callbacks.
        """
        from airflow_pydantic_ai.tries.lifecycle import delete_cache_after_success

        delete_cache_after_success(self, run)

    def _resolve_prompt(self, context: Any) -> str:
        """The prompt of this try (``@task.pydantic_ai`` gets it from its function)."""
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"AgentOperator prompt must be a non-empty string, got {self.prompt!r}")
        return self.prompt

    def _run_plain(self, agent: Agent[Any, Any], prompt: str, model: Any) -> Any:
        """The run's result, without durability (:func:`~airflow_pydantic_ai.operators.plain_run.run_plain`)."""
        from airflow_pydantic_ai.operators.plain_run import run_plain

        return run_plain(self, agent, prompt, model)
