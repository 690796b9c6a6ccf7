"""``ctx.model`` in a tool of a durable run: the tool's own model requests are recorded and replayed.

pydantic-ai hands a tool the run's model itself as ``RunContext.model`` (2.62 to 2.68: the model
wrappers capabilities install apply to the run's own requests only), so a tool that asks the model
directly (``await ctx.model.request(...)``, ``pydantic_ai.direct.model_request(ctx.model, ...)``) would
run live on every try, unseen. :func:`with_recorded_model` gives the tool a copy of its context whose
``model`` is a :class:`RunContextModel` (``dataclasses.replace`` on the context the toolset wrapper
receives: a public hook, nothing of pydantic-ai is patched).

Guarantees: the tool's requests are the steps of one run scoped under the tool call's step, exactly like
a delegate's (``attempt/nesting.py``), bound at the first request (a tool that never asks the model takes
no place, so the delegates it starts keep their indexes); they are recorded while the call runs live and
replayed when the call runs again on a retry; when the call itself replays, nothing inside it runs. A
live tool (``live_tool()``) has no key: its requests run live and are not recorded. An agent run given
``model=ctx.model`` records through its own ``DurableCapability`` against the model underneath (the
capability unwraps this wrapper); one without the capability records through this wrapper.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai import RunContext

from airflow_pydantic_ai.durable.attempt.nesting import Place, current_place
from airflow_pydantic_ai.durable.interception.model import CachingModel

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun

__all__ = ["RunContextModel", "with_recorded_model"]


class RunContextModel(CachingModel):
    """The model a tool sees as ``ctx.model``: its requests are steps of a run scoped under the tool call."""

    def __init__(self, wrapped: Any, run: AgentRun, agent: str | None):
        super().__init__(wrapped, run)
        self.agent = agent
        self._bound: AgentRun | None = None
        self.requests = 0
        """Requests made through this model (each is a model step of the attempt, outside the run's usage)."""

    def recording_run(self) -> AgentRun:
        self.requests += 1
        if self._bound is None:
            # The tool call's live scope (set by its step); outside it (the model kept and used after the
            # call returned) a place without a key: the requests run live and are not recorded.
            place = current_place() or Place(run=self.run, parent=None, top_level=False)
            # Without a pydantic-ai run id to claim, bind always hands out a run.
            self._bound = cast("AgentRun", place.run.attempt.bind(place, None, self.agent))
        return self._bound


def with_recorded_model(ctx: RunContext[Any], run: AgentRun) -> RunContext[Any]:
    """``ctx`` for a tool call of ``run``, with a ``model`` whose requests are recorded under the call's step."""
    # A run given ``model=ctx.model`` (a delegate) hands its own tools that wrapper: they record under their own call.
    model = ctx.model.wrapped if isinstance(ctx.model, CachingModel) else ctx.model
    return replace(ctx, model=RunContextModel(model, run, getattr(ctx.agent, "name", None)))
