"""Where an agent run that starts now belongs in the durable attempt: the attempt's top level, or a step.

A durable attempt covers every agent run inside it that carries the durable capability: the operator's
own run, a delegate awaited inside a tool call (in parallel tool calls too), several runs one after
another in one task. Each run is a *scope* of the attempt with a key chain of its own:

- the first run at the attempt's top level keys its steps exactly as a single-agent attempt always did
  (caches written before nested runs existed keep replaying);
- a run started while a tool call (or an output function) of another run is running is scoped under
  that call's step: its chain starts from the call's key and the run's index among the runs that call
  started (0, 1, ...), so two identical delegations, the same delegate twice and parallel delegations
  finishing in any order each replay their own steps;
- a further run at the top level (a second agent after the first) is scoped the same way under the
  attempt itself.

The place is carried by a context variable: :func:`attempt_scope` sets it for the attempt, and a tool step
sets it (:func:`step_scope`) for as long as its call runs live. A replayed call does not run, so nothing
inside it runs either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.keys.fingerprint import digest
from airflow_pydantic_ai.durable.keys.run_ids import stable_run_id
from airflow_pydantic_ai.durable.storage.entry import TOP_PARENT

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.agent_run import AgentRun
    from airflow_pydantic_ai.durable.attempt.attempt import Attempt

__all__ = [
    "TOP",
    "AttemptFamily",
    "Place",
    "RunScope",
    "attempt_scope",
    "current_place",
    "draw_run_id",
    "step_scope",
]

TOP = TOP_PARENT
"""The parent key of the runs at the attempt's top level."""


@dataclass(frozen=True)
class RunScope:
    """Where one agent run's steps sit in the attempt (stored in each of its entries, read by the read side)."""

    parent: str
    """The key of the step that started the run (:data:`TOP` for a run at the attempt's top level)."""
    index: int
    """The run's index among the runs ``parent`` started (0, 1, ...)."""
    at: int
    """The number of the model step of the enclosing run whose call started this run (0 at the top level)."""
    agent: str | None
    """The agent's name, when it has one."""
    depth: int = 1

    @property
    def id(self) -> tuple[str, int]:
        return (self.parent, self.index)

    def chain_start(self) -> str:
        """Where the run's key chain starts (instead of the top-level run's ``start``)."""
        return digest("nested-run/v1", self.parent, str(self.index))

    def to_payload(self) -> dict[str, object]:
        return {"parent": self.parent, "index": self.index, "at": self.at, "agent": self.agent, "depth": self.depth}

    @classmethod
    def from_payload(cls, payload: object) -> RunScope | None:
        if not isinstance(payload, dict):
            return None
        try:
            agent = payload.get("agent")
            return cls(
                parent=str(payload["parent"]),
                index=int(payload["index"]),
                at=int(payload["at"]),
                agent=None if agent is None else str(agent),
                depth=int(payload.get("depth", 1)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass
class AttemptFamily:
    """What every agent run of one attempt shares."""

    agent_runs: int = 0
    """Agent runs bound to the attempt so far."""
    first_agent: str | None = None
    bound: dict[str, Any] = field(default_factory=dict)
    """The attempt's run each pydantic-ai run id records into (a second durable capability on a run stays inert)."""
    warned: set[str] = field(default_factory=set)
    """One-per-attempt warnings already given."""
    defer_pending: bool = False
    """``AttemptOptions.defer_pending``: a request the provider works on stops the run once its submission is
    recorded (``steps/pending_step.py``)."""
    continuations: int = 0
    """Stable run ids given so far to runs that claim the attempt's first run (``run_agent``'s run, then each of
    its continuations after an approval stop): the next one's continuation number."""

    def warn_once(self, topic: str) -> bool:
        """True the first time ``topic`` comes up in this attempt."""
        if topic in self.warned:
            return False
        self.warned.add(topic)
        return True


@dataclass
class Place:
    """The attempt, and the step (if any) whose call is running in this context."""

    run: AgentRun
    """The agent run the running step belongs to (the attempt's first run at the top level)."""
    parent: str | None
    """The running step's key; None at the attempt's top level, or when the step has no key (fail closed)."""
    at: int = 0
    depth: int = 0
    top_level: bool = True
    root_claims: bool = False
    """Every run started at the top level is the attempt's first run (``run_agent``: its runs after an approval
    continue the same conversation)."""
    started: int = 0
    """How many runs this place started so far (the place is shared by the contexts copied from it)."""
    drawn: dict[str, int] = field(default_factory=dict)
    """Indexes drawn for runs given a stable run id before they bound (run id -> index): pydantic-ai asks for
    the id before the run binds, and the run takes the index it was named by."""

    def next_index(self) -> int:
        index = self.started
        self.started += 1
        return index

    def index_for(self, run_id: str | None) -> int:
        """The index of the run ``run_id`` starting here: the one drawn with its stable id, or the next."""
        if run_id is not None and run_id in self.drawn:
            return self.drawn.pop(run_id)
        return self.next_index()


_PLACE: ContextVar[Place | None] = ContextVar("airflow_pydantic_ai_durable_place", default=None)


def current_place() -> Place | None:
    """Where an agent run starting now belongs; None outside a durable attempt."""
    return _PLACE.get()


@contextmanager
def attempt_scope(attempt: Attempt, *, root_claims: bool = False) -> Iterator[Place]:
    """Make ``attempt`` the durable attempt of every agent run (with the durable capability) started inside."""
    place = Place(run=attempt.first, parent=None, root_claims=root_claims)
    token = _PLACE.set(place)
    try:
        yield place
    finally:
        _PLACE.reset(token)


@contextmanager
def step_scope(run: AgentRun, key: str | None, at: int) -> Iterator[None]:
    """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
    outer = _PLACE.get()
    depth = (outer.depth if outer is not None else 0) + 1
    token = _PLACE.set(Place(run=run, parent=key, at=at, depth=depth, top_level=False))
    try:
        yield
    finally:
        _PLACE.reset(token)


def draw_run_id(place: Place) -> str | None:
    """The ``run_id`` an agent run starting at ``place`` gets on every try of the task instance (formula in
    ``keys/run_ids.py``); None (pydantic-ai's random one) where the run has no stable place: under a step that
    could not be keyed (whose steps never replay either).

    pydantic-ai asks before the run binds: the run's index in ``place`` is drawn here and kept in
    ``place.drawn`` for ``Attempt.bind``. A run that claims the attempt's first run (``run_agent``) is numbered
    by continuation instead, since pydantic-ai refuses a continuation a ``run_id`` its history already holds.
    """
    attempt = place.run.attempt
    family = attempt.family
    owner = attempt.store.owner or [attempt.store.root]
    if place.parent is None and place.top_level and place.root_claims:
        family.continuations += 1
        return stable_run_id(owner, TOP, 0, family.continuations - 1)
    if place.parent is None and not place.top_level:
        return None
    index = place.next_index()
    run_id = stable_run_id(owner, place.parent or TOP, index)
    if run_id in family.bound:
        return None  # never two runs of one attempt under one id (a run already bound would stay unrecorded)
    place.drawn[run_id] = index
    return run_id
