"""A model request the provider works on after it was submitted (a batch request, an OpenAI background response).

pydantic-ai submits such a request and hands back a *suspended* response holding its ticket (the ``Batch`` of
``BatchModelRequests``, or the background response's id); its continuation loop then waits and checks until the
result is there. Here the submission is a step of its own: the suspended response is recorded as a ``pending``
entry (a companion of the model step's key, ``kinds.py``) right after the submission, before any wait. A later
try, on any worker, takes that ticket and goes on checking the same batch or background response instead of
submitting the request again; a resubmission pydantic-ai makes (``max_resubmissions``) rewrites the entry, so the
count goes on across tries. Checks are not steps. The result, once collected, is the model step's response,
recorded and replayed like any other (``model_step.py``), with its usage and cost.

Why a companion entry rather than the model step recorded with state ``suspended``: a model entry is an answer the
run acts on, and every reader (replay, the counts, fixtures, export, the view) takes it as one; a ticket is not an
answer, it is rewritten on each resubmission, and it is never exported to a fixture. The companion sits beside the
step it belongs to (same key), the way an at-most-once call's start mark sits beside its call.

The Airflow side (deferral to the triggerer) uses three things, all on the face ``airflow_pydantic_ai.durable``:

- :class:`RequestPending`: raised out of ``run_agent`` when ``AttemptOptions.defer_pending`` is True and a
  request is pending once its submission is recorded; it carries the :class:`PendingTicket` of each.
- :class:`PendingTicket`: what a trigger needs to check one request (JSON round trip for its kwargs).
- :meth:`PendingTicket.check` (also :func:`check_pending`): ``pending`` / ``ready`` / ``failed``, asked with
  pydantic-ai's own primitives (``Model.batch_status``, the background response's retrieve).

With ``defer_pending`` False the run waits in-process as pydantic-ai does, after recording the submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models import Model

__all__ = [
    "PendingKind",
    "PendingState",
    "PendingStatus",
    "PendingTicket",
    "RequestPending",
    "check_pending",
]

PendingKind = Literal["batch", "background"]
"""How the provider runs the request: in a batch job (``BatchModelRequests``), or as an OpenAI background
response (``openai_background=True``)."""

PendingState = Literal["pending", "ready", "failed"]
"""What a check found: still running; the result can be collected (or the provider ended the job: a resumed try
collects it, or resubmits as pydantic-ai would); the job can never give a result (``why`` says what happened)."""


@dataclass(frozen=True)
class PendingTicket:
    """One submitted request the provider works on: what a trigger needs to check it, and a try to resume it.

    Plain data: :meth:`to_payload` / :meth:`from_payload` round-trip it through JSON (a trigger's kwargs).
    """

    kind: PendingKind
    provider: str
    """The provider's name as pydantic-ai's model gives it (``openai``, ``anthropic``, ``google-gla``...)."""
    model_name: str
    job_id: str
    """The batch id (``kind="batch"``) or the background response's id (``kind="background"``)."""
    submitted_at: datetime
    """When the submission was recorded (UTC)."""
    status: str
    """The provider's status when it was last seen (a batch: ``in_progress``, ``canceling``, ``ended``; a
    background response: ``queued``, ``in_progress``...)."""
    step: int
    """The model step's number (as the log, the view and ``cache show`` number it)."""
    key: str
    """The model step's key (the ``pending`` entry is ``pending-{key}.json``)."""
    response: dict[str, Any] = field(default_factory=dict)
    """The suspended response pydantic-ai returned, encoded as the cache encodes a response: it holds the
    ``Batch`` handle (``provider_details['batch']``) or the background response's id, which is what pydantic-ai
    needs to check and collect it."""
    resubmissions: int = 0
    """How many times pydantic-ai submitted the request again (expired, rate-limited...), over all tries."""

    def to_payload(self) -> dict[str, Any]:
        """A JSON-ready dict (``submitted_at`` as ISO 8601)."""
        raise NotImplementedError

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PendingTicket:
        """The ticket :meth:`to_payload` gave."""
        raise NotImplementedError

    def suspended_response(self) -> ModelResponse:
        """The suspended response, rebuilt (what a resumed try continues from)."""
        raise NotImplementedError

    def describe(self) -> str:
        """How the log names it: ``batch batch_abc of openai:gpt-5 (step 2, submitted 2026-12-06 23:10 UTC,
        in_progress)``."""
        raise NotImplementedError

    async def check(self, model: Model) -> PendingStatus:
        """Ask the provider how the request stands (:func:`check_pending`)."""
        return await check_pending(model, self)


@dataclass(frozen=True)
class PendingStatus:
    """What one check of a :class:`PendingTicket` found."""

    state: PendingState
    status: str
    """The provider's own status word."""
    why: str | None = None
    """For ``failed``: what happened (expired past resubmission, cancelled, no longer kept by the provider)."""


class RequestPending(BaseException):
    """Internal signal: the run stops while the provider works on submitted requests (``defer_pending``).

    Raised out of ``run_agent`` once each request's submission is recorded. A ``BaseException`` like a
    cancellation, so that no ``except Exception`` in a tool or a capability takes it for a failure, and marked for
    pydantic-ai as suspending a durable run, so pydantic-ai leaves the batch or background response running for the
    try that continues it. The Airflow side defers the task until :meth:`PendingTicket.check` says ``ready`` or
    ``failed``, then runs the task again: that try replays the recorded steps and collects the result.
    """

    def __init__(self, tickets: list[PendingTicket]) -> None:
        super().__init__("; ".join(ticket.describe() for ticket in tickets) or "a model request is pending")
        self.tickets = tickets


async def check_pending(model: Model, ticket: PendingTicket) -> PendingStatus:
    """How the request of ``ticket`` stands, asked through pydantic-ai's ``model`` (the task's model, rebuilt from
    its connection): ``Model.batch_status`` for a batch, the background response's retrieve for a background one.

    A batch that ended is ``ready`` (collecting it, or resubmitting what expired, is the resumed try's work, as
    pydantic-ai does it); a batch or response the provider no longer has, or cancelled, is ``failed``.
    """
    raise NotImplementedError
