"""Naming the agent runs inside a durable attempt that record nothing (no ``DurableCapability``).

pydantic-ai has no hook that announces an agent run to code outside it, and a run without our capability
runs none of our code. What such a run shares with the attempt is the usage it counts into: the
delegation pattern hands a delegate the calling run's usage (``usage=ctx.usage``). The attempt's own
runs count into an :class:`AttemptUsage`, whose ``incr`` pydantic-ai calls for every model response,
inside the run that received it (its ``RunContext`` is the current one then). A response counted for a
run the attempt never bound is a run without the capability: the attempt is told the run's agent, and
logs one WARNING per attempt naming it (:func:`unrecorded_run`); the toolset counts, per tool call, the
requests no run of the attempt recorded (:func:`unrecorded_requests`).

Guarantees: nothing is changed in what is counted (``incr`` adds exactly what ``RunUsage.incr`` adds);
outside a durable attempt, or when pydantic-ai keeps no current run context, nothing happens. A delegate
that counts into a usage of its own (no ``usage=ctx.usage``), or that shares a usage the attempt did not
create (an agent run at the top of a ``durable_attempt()`` block), is not seen here: the toolset's count
of unrecorded requests still names the tool it ran in, when the usage is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic_ai.usage import RequestUsage, RunUsage

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.attempt.nesting import current_place

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = ["AttemptUsage", "describe_agent", "unrecorded_requests", "unrecorded_run"]

_MAKE_IT_DURABLE = (
    "Make it durable: Agent(..., capabilities=[DurableCapability()]) (from airflow_pydantic_ai.durable import "
    "DurableCapability), or pass capabilities=[DurableCapability()] to its run"
)


class AttemptUsage(RunUsage):
    """The usage a durable attempt's runs count into: ``RunUsage`` that also sees which run each response is for."""

    def incr(self, incr_usage: RunUsage | RequestUsage) -> None:
        super().incr(incr_usage)
        place = current_place()
        if place is None:
            return
        context = _pydantic_ai.current_run_context()
        run_id = getattr(context, "run_id", None)
        if run_id is not None:
            unrecorded_run(place.run.attempt, run_id, lambda: describe_agent(context))


def unrecorded_run(attempt: Attempt, run_id: str, agent: Callable[[], str]) -> None:
    """A model response was counted for agent run ``run_id`` inside ``attempt``: when no run of the attempt
    records it (its agent has no DurableCapability), one WARNING per attempt names the ``agent()``."""
    if run_id in attempt.family.bound or not attempt.family.warn_once("unrecorded requests"):
        return
    attempt.log.warning(
        "Durable: %s ran inside this durable attempt without DurableCapability: its model requests and tool "
        "calls are not recorded, so they run again on a retry. %s",
        agent(),
        _MAKE_IT_DURABLE,
    )


def unrecorded_requests(attempt: Attempt, label: str, count: int) -> None:
    """``count`` model requests ran inside ``label``'s call without passing through a durable run: one WARNING
    (none when :func:`unrecorded_run` named the agent already)."""
    if not attempt.family.warn_once("unrecorded requests"):
        return
    attempt.log.warning(
        "Durable: %s made %d model request(s) that are not recorded: an agent run inside it has no "
        "DurableCapability, so it runs again on a retry. %s",
        label,
        count,
        _MAKE_IT_DURABLE,
    )


def describe_agent(context: Any) -> str:
    """``agent 'name'`` for the run ``context`` belongs to, else ``an unnamed agent (model 'id')``."""
    agent = getattr(context, "agent", None)
    name = getattr(agent, "name", None)
    if name:
        return f"agent {name!r}"
    model = getattr(context, "model", None)
    model_name = getattr(model, "model_name", None)
    system = getattr(model, "system", None)
    if not model_name:
        return "an unnamed agent"
    model_id = model_name if not system or str(model_name).startswith(f"{system}:") else f"{system}:{model_name}"
    return f"an unnamed agent (model {model_id!r})"
