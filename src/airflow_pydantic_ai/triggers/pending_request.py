"""The trigger that checks a durable task's pending model requests (a batch, an OpenAI background response) in
Airflow's triggerer, so that no worker slot is held while the provider works.

It carries only JSON: the tickets' payloads (``PendingTicket.to_payload()``), the connection id and the model id. In
the triggerer it rebuilds the model from them (``PydanticAIHook(llm_conn_id).get_model(model_id)``, or pydantic-ai's
own ``infer_model(model_id)`` without a connection) and asks the engine (``PendingTicket.check(model)``: pydantic-ai's
own primitives (``batch_status``, the background response's status), at pydantic-ai's poll interval. A
triggerer restart re-creates it from these kwargs and checks again.

It ends with one :class:`~airflow.triggers.base.TriggerEvent` whose payload is a :class:`PendingCheck`'s dict:
``ready`` (every ticket has a result to collect), ``failed`` (one ended without one: the resumed try collects the
error, or pydantic-ai submits the request again) or ``unchecked`` (the triggerer could not check: the resumed try
checks on the worker). Whatever it says, the task resumes and re-runs its attempt, which collects the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = ["CLASSPATH", "PendingCheck", "PendingRequestTrigger"]

CLASSPATH = "airflow_pydantic_ai.triggers.pending_request.PendingRequestTrigger"


@dataclass(frozen=True)
class PendingCheck:
    """What the trigger found: the payload of its one event."""

    status: Literal["ready", "failed", "unchecked"]
    checks: int = 0
    """How many times the triggerer checked before it ended."""
    detail: str = ""
    """Why (a failed batch's status, or the error that kept the triggerer from checking)."""

    def to_event(self) -> TriggerEvent:
        return TriggerEvent(asdict(self))

    @classmethod
    def from_event(cls, event: Any) -> PendingCheck | None:
        """The check an event carries (None for another trigger's event, such as the plain wait's)."""
        if not isinstance(event, dict) or event.get("status") not in ("ready", "failed", "unchecked"):
            return None
        return cls(status=event["status"], checks=int(event.get("checks", 0)), detail=str(event.get("detail", "")))


class PendingRequestTrigger(BaseTrigger):
    """Check pending model requests until each has a result (or one has failed), without a worker.

    :param tickets: The pending requests, each as ``PendingTicket.to_payload()`` gives it.
    :param llm_conn_id: The task's ``pydantic_ai`` connection, the model is rebuilt from it; None: from ``model_id``.
    :param model_id: The model id (``openai-responses:gpt-5``...), overriding the connection's model.
    :param poll_interval: Seconds before the first check; each next wait grows by half (pydantic-ai's schedule).
    :param max_poll_interval: The longest wait between two checks, in seconds.
    """

    def __init__(
        self,
        *,
        tickets: list[dict[str, Any]],
        llm_conn_id: str | None,
        model_id: str | None,
        poll_interval: float,
        max_poll_interval: float,
    ) -> None:
        super().__init__()
        self.tickets = list(tickets)
        self.llm_conn_id = llm_conn_id
        self.model_id = model_id
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = max(float(max_poll_interval), self.poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "tickets": self.tickets,
            "llm_conn_id": self.llm_conn_id,
            "model_id": self.model_id,
            "poll_interval": self.poll_interval,
            "max_poll_interval": self.max_poll_interval,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_pydantic_ai import _compat
        from airflow_pydantic_ai.durable import PendingTicket

        waiting = [PendingTicket.from_payload(payload) for payload in self.tickets]
        try:
            model = await _in_a_thread(self._model)
        except Exception as error:  # the worker can check instead (a missing SDK, a connection it cannot read)
            self.log.warning(
                "Durable: the triggerer cannot build the model to check %d pending request(s) (%s: %s); the task "
                "resumes after %.0f s and checks on a worker",
                len(waiting),
                type(error).__name__,
                error,
                self.poll_interval,
            )
            await asyncio.sleep(self.poll_interval)
            yield PendingCheck("unchecked", detail=f"{type(error).__name__}: {error}").to_event()
            return
        checks = 0
        while True:
            await asyncio.sleep(_compat.poll_delay(checks, self.poll_interval, self.max_poll_interval))
            checks += 1
            still_waiting = []
            for ticket in waiting:
                try:
                    found = await ticket.check(model)
                except Exception as error:  # the worker checks again and raises it there
                    self.log.warning(
                        "Durable: checking %s failed (%s: %s); the task resumes and checks on a worker",
                        ticket.describe(),
                        type(error).__name__,
                        error,
                    )
                    yield PendingCheck("unchecked", checks, f"{type(error).__name__}: {error}").to_event()
                    return
                if found.state == "failed":
                    self.log.info("Durable: %s can give no result (%s)", ticket.describe(), found.why or found.status)
                    yield PendingCheck("failed", checks, found.why or found.status).to_event()
                    return
                if found.state == "pending":
                    still_waiting.append(ticket)
            if not still_waiting:
                self.log.info("Durable: %d pending request(s) ready after %d check(s)", len(waiting), checks)
                yield PendingCheck("ready", checks).to_event()
                return
            self.log.info("Durable: %d of %d request(s) pending (check %d)", len(still_waiting), len(waiting), checks)
            waiting = still_waiting

    def _model(self) -> Any:
        if self.llm_conn_id:
            from airflow_pydantic_ai.hooks.pydantic_ai import PydanticAIHook

            return PydanticAIHook(llm_conn_id=self.llm_conn_id).get_model(self.model_id or None)
        from pydantic_ai.models import infer_model

        return infer_model(self.model_id or "")


async def _in_a_thread(function: Any) -> Any:
    """Run a synchronous call (a connection lookup, an SDK client's construction) off the triggerer's event loop."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(function)()
