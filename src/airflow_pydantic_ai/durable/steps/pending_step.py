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

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic_ai.messages import ModelResponse

from airflow_pydantic_ai.durable import _pydantic_ai
from airflow_pydantic_ai.durable.encoding.codec import decode_response, encode_response
from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from airflow_pydantic_ai.durable.steps.model_step import ModelStep

__all__ = [
    "PendingKind",
    "PendingRequest",
    "PendingState",
    "PendingStatus",
    "PendingTicket",
    "RequestPending",
    "check_pending",
    "pending_job",
]

PendingKind = Literal["batch", "background"]
"""How the provider runs the request: in a batch job (``BatchModelRequests``), or as an OpenAI background
response (``openai_background=True``)."""

PendingState = Literal["pending", "ready", "failed"]
"""What a check found: still running; the result can be collected (or the provider ended the job: a resumed try
collects it, or resubmits as pydantic-ai would); the job can never give a result (``why`` says what happened)."""

_PENDING: Final = "pending"


def pending_job(response: Any) -> tuple[PendingKind, str] | None:
    """``(kind, job id)`` when ``response`` is a suspended response the provider still works on; else None."""
    return _pydantic_ai.pending_job(response)  # type: ignore[return-value]


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

    @classmethod
    def of(
        cls, response: ModelResponse, *, model_name: str, step: int, key: str, submitted_at: datetime | None = None
    ) -> PendingTicket:
        """The ticket of ``response``, a suspended response the provider works on (``ValueError`` otherwise)."""
        job = pending_job(response)
        if job is None:
            raise ValueError("not a response the provider still works on (a batch or background response)")
        kind, job_id = job
        batch = _pydantic_ai.batch_of(response)
        status = str((response.provider_details or {}).get("status") or "in_progress")
        resubmissions = 0
        if batch is not None:
            status, resubmissions = str(batch[0].status), batch[1]
        return cls(
            kind=kind,
            provider=response.provider_name or "",
            model_name=model_name,
            job_id=job_id,
            submitted_at=submitted_at or datetime.now(UTC),
            status=status,
            step=step,
            key=key,
            response=encode_response(response),
            resubmissions=resubmissions,
        )

    def to_payload(self) -> dict[str, Any]:
        """A JSON-ready dict (``submitted_at`` as ISO 8601)."""
        return {
            "kind": self.kind,
            "provider": self.provider,
            "model_name": self.model_name,
            "job_id": self.job_id,
            "submitted_at": self.submitted_at.isoformat(),
            "status": self.status,
            "step": self.step,
            "key": self.key,
            "response": self.response,
            "resubmissions": self.resubmissions,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> PendingTicket:
        """The ticket :meth:`to_payload` gave."""
        kind = payload["kind"]
        if kind not in ("batch", "background"):
            raise ValueError(f"unknown pending request kind {kind!r}")
        return cls(
            kind=kind,
            provider=str(payload["provider"]),
            model_name=str(payload["model_name"]),
            job_id=str(payload["job_id"]),
            submitted_at=datetime.fromisoformat(str(payload["submitted_at"])),
            status=str(payload["status"]),
            step=int(payload["step"]),
            key=str(payload["key"]),
            response=dict(payload.get("response") or {}),
            resubmissions=int(payload.get("resubmissions") or 0),
        )

    def suspended_response(self) -> ModelResponse:
        """The suspended response, rebuilt (what a resumed try continues from)."""
        return decode_response(self.response)

    def describe(self) -> str:
        """How the log names it: ``batch batch_abc of openai:gpt-5 (step 2, submitted 2026-12-06 23:10 UTC,
        in_progress)``."""
        submitted = self.submitted_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        again = f", submitted again {self.resubmissions}x" if self.resubmissions else ""
        return (
            f"{self.kind} {self.job_id} of {self.provider}:{self.model_name} "
            f"(step {self.step}, submitted {submitted}, {self.status}{again})"
        )

    async def check(self, model: Model) -> PendingStatus:
        """Ask the provider how the request stands (``check_pending``: ``Model.batch_status`` for a batch, the
        background response's retrieve for a background one)."""
        return await check_pending(model, self)


@dataclass(frozen=True)
class PendingStatus:
    """What one check of a :class:`PendingTicket` found."""

    state: PendingState
    status: str
    """The provider's own status word."""
    why: str | None = None
    """For ``failed``: what happened (expired past resubmission, cancelled, no longer kept by the provider)."""


class RequestPending(DurableError):
    """Internal signal: the run stops while the provider works on submitted requests (``defer_pending``).

    Raised out of ``run_agent`` once each request's submission is recorded, like ``AskAboutOutcome`` (a
    ``DurableError``, as every error the package raises on purpose), and marked for pydantic-ai as suspending a
    durable run, so pydantic-ai leaves the batch or background response running for the try that continues it.
    The Airflow side defers the task until :meth:`PendingTicket.check` says ``ready`` or ``failed``, then runs the
    task again: that try replays the recorded steps and collects the result.
    """

    def __init__(self, tickets: list[PendingTicket]) -> None:
        super().__init__("; ".join(ticket.describe() for ticket in tickets) or "a model request is pending")
        self.tickets = tickets
        _pydantic_ai.mark_run_suspended(self)


async def check_pending(model: Model, ticket: PendingTicket) -> PendingStatus:
    """How the request of ``ticket`` stands, asked through pydantic-ai's ``model`` (the task's model, rebuilt from
    its connection): ``Model.batch_status`` for a batch, the background response's retrieve for a background one.

    A batch that ended is ``ready`` (collecting it, or resubmitting what expired, is the resumed try's work, as
    pydantic-ai does it); a batch or response the provider no longer has, or cancelled, is ``failed``.
    """
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models import ModelRequestParameters

    suspended = ticket.suspended_response()
    try:
        if ticket.kind == "batch":
            batch = _pydantic_ai.batch_of(suspended)
            if batch is None:
                return PendingStatus("failed", "unknown", "the ticket holds no batch handle")
            checked = await model.batch_status(batch[0])
            if checked.status == "ended":
                return PendingStatus("ready", checked.status)
            return PendingStatus("pending", checked.status)
        # A background response: pydantic-ai's model retrieves it when the messages end in it.
        response = await model.request([suspended], None, ModelRequestParameters())
    except ModelHTTPError as error:
        if error.status_code == 404:
            return PendingStatus(
                "failed", "gone", f"{ticket.provider} no longer has {ticket.kind} {ticket.job_id} (HTTP 404)"
            )
        raise
    status = str((response.provider_details or {}).get("status") or response.state)
    if pending_job(response) is not None:
        return PendingStatus("pending", status)
    if response.state == "complete":
        return PendingStatus("ready", status)
    return PendingStatus("failed", status, f"the background response ended {status}")


@dataclass
class PendingRequest:
    """A model step whose request the provider works on: its submission recorded, its checks not steps.

    Made by the caching model when a request's live answer is a submission (:meth:`submitted`) or when an earlier
    try recorded one (:meth:`resumed`); each check goes through :meth:`checked`, and the result through
    :meth:`collected`, which records it as the model step's response.
    """

    step: ModelStep
    ticket: PendingTicket
    defer: bool
    """``AttemptOptions.defer_pending``: stop the run with :class:`RequestPending` while it is pending."""
    submitted_at: float = field(default_factory=time.time)
    picked_up: bool = False
    """Picked up from an earlier try's entry (not submitted by this try)."""

    @property
    def entry_name(self) -> str:
        return entry_name(_PENDING, self.ticket.key)

    @classmethod
    def resumed(cls, step: ModelStep, *, defer: bool) -> tuple[PendingRequest, ModelResponse] | None:
        """The submission an earlier try recorded for ``step``, and its suspended response; None when there is none
        (or it cannot be rebuilt: the WARNING says the request is submitted again)."""
        if step.key is None or step.replayed is not None:
            return None
        entry = step.run.attempt.entries.get(entry_name(_PENDING, step.key))
        if entry is None:
            return None
        try:
            ticket = PendingTicket.from_payload(entry.payload["ticket"])
            response = ticket.suspended_response()
        except Exception as error:
            step.run.attempt.entry_unusable(entry, error, f"{step.shown()} is submitted again")
            return None
        pending = cls(step, ticket, defer, entry.recorded_at or time.time(), picked_up=True)
        step.run.attempt.log.info(
            "Durable: %s: picking up %s, submitted by try %d (not submitted again)",
            step.shown(),
            ticket.describe(),
            entry.attempt,
        )
        return pending, response

    @classmethod
    def submitted(cls, step: ModelStep, response: ModelResponse, model_name: str, *, defer: bool) -> PendingRequest:
        """``response`` is the submission of ``step``'s request: record its ticket now, before any wait."""
        ticket = PendingTicket.of(response, model_name=model_name, step=step.listed_number(), key=step.key or "")
        pending = cls(step, ticket, defer)
        pending._record(f"the submission of {step.shown()}")
        step.run.attempt.log.info("Durable: %s was submitted: %s", step.shown(), ticket.describe())
        return pending

    def checked(self, response: ModelResponse) -> None:
        """A check found the request still pending (``response``): a resubmission (a new job) is recorded, so that
        a later try waits for the new job and pydantic-ai's ``max_resubmissions`` counts across tries."""
        job = pending_job(response)
        if job is None:
            return
        submitted_again = job[1] != self.ticket.job_id
        ticket = PendingTicket.of(
            response,
            model_name=self.ticket.model_name,
            step=self.ticket.step,
            key=self.ticket.key,
            submitted_at=datetime.now(UTC) if submitted_again else self.ticket.submitted_at,
        )
        self.ticket = ticket
        if submitted_again:
            self._record(f"the resubmission of {self.step.shown()}")
            self.step.run.attempt.log.warning(
                "Durable: %s was submitted again by pydantic-ai (%d of its resubmissions): %s",
                self.step.shown(),
                ticket.resubmissions,
                ticket.describe(),
            )

    def collected(self, response: ModelResponse) -> None:
        """The result came: the model step's response, recorded like any live one (its usage and cost)."""
        self.step.record(response)

    def stop_if_deferred(self) -> None:
        """With ``defer_pending``: stop the run here (:class:`RequestPending`), the request left running."""
        if self.defer:
            raise RequestPending([self.ticket])

    def _record(self, what: str) -> None:
        step = self.step
        if step.key is None:
            return  # a step that can never be recorded (fail closed): a kill submits it again, as it always did
        entry = StepEntry(
            kind=_PENDING,
            key=step.key,
            step=step.number,
            attempt=step.run.attempt.try_number,
            label=step.label,
            payload={"ticket": self.ticket.to_payload()},
            components=step.place.components,
            recorded_at=time.time(),
            scope=step.run.entry_scope,
        )
        step.run.attempt.record(entry, what)
