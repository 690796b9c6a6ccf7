"""What a step may ask of the attempt that owns it: the one protocol every step module is typed against.

The attempt (``DurableRun``) is the one owner of the state steps change (the one count, the writer, the
last answer, the key chain); steps reach it only through this protocol, so no step module
imports the run (and the run imports every step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, Protocol

from pydantic_ai.usage import RequestUsage

from airflow_pydantic_ai.durable.attempt.last_answer import LastAnswer
from airflow_pydantic_ai.durable.attempt.replay_policy import ReplayPolicy
from airflow_pydantic_ai.durable.attempt.writer import StepWriter, TryOutlook
from airflow_pydantic_ai.durable.keys.chain import KeyChain, ModelKey
from airflow_pydantic_ai.durable.keys.divergence import Divergence
from airflow_pydantic_ai.durable.kinds import StepRole
from airflow_pydantic_ai.durable.reporting.budget import RetryBudget
from airflow_pydantic_ai.durable.reporting.report import AttemptOutcome, DurableReport
from airflow_pydantic_ai.durable.reporting.stats import AttemptStats, TaskLogger
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["AttemptOwner", "StepOwner"]


class StepOwner(Protocol):
    """The attempt as its steps see it: what they read, and the verbs they report through.

    Steps never change the attempt's rooms themselves (the counts, the writer, the last
    answer, the key chain): each verb below is the one way to say what happened, and the attempt decides
    which rooms that touches.
    """

    attempt: int
    entries: dict[str, StepEntry]
    """What the cache held when the attempt started (read only)."""
    unverified: dict[str, str]
    """Entries that exist but could not be verified (name -> why), read only."""
    unread: str
    """Why the cache could not be read at all (empty when it was)."""
    run_task: asyncio.Task[Any] | None
    budget: RetryBudget | None
    """Usage limits counted across tries (issue 22), checked before a live request or tool call."""

    @property
    def log(self) -> TaskLogger: ...

    @property
    def outlook(self) -> TryOutlook: ...

    @property
    def who(self) -> str: ...

    @property
    def entry_scope(self) -> dict[str, Any] | None: ...

    @property
    def answer_number(self) -> int:
        """The number of the model step (in this agent run) whose answer the calls running now belong to."""
        ...

    def step_number(self, entry: StepEntry, *, never_written: bool = False) -> int:
        """The number ``entry`` has (or would have, written now) in the cache's listing (``numbering.py``);
        ``never_written``: a failed step, numbered after the calls of its answer still running."""
        ...

    def step_coming(self, entry: StepEntry) -> AbstractContextManager[None]:
        """While the call that writes ``entry`` runs live (``StepNumbers.coming``)."""
        ...

    @property
    def task_instance(self) -> list[Any]:
        """The task instance this attempt belongs to, as its entries store it (dag, run, task, map index, and a
        loop's region and index); the cache's location when the store was opened without one."""
        ...

    def holds_secret(self, payload: Any) -> bool:
        """Whether ``payload`` holds a value registered as secret (what the writer refuses to store)."""
        ...

    # --- the verbs -------------------------------------------------------------------------------

    def step_replayed(
        self,
        kind: StepRole,
        entry_name: str,
        *,
        usage: RequestUsage | None = None,
        cost: Decimal | None = None,
        counted_by_pydantic_ai: bool = True,
    ) -> None:
        """A step was answered from its entry (``usage``/``cost``: what a model step spent when it was recorded;
        ``counted_by_pydantic_ai``: pydantic-ai counts it in its usage although it did not happen)."""
        ...

    def step_ran(self, kind: StepRole, *, usage: RequestUsage | None = None, cost: Decimal | None = None) -> None:
        """A step ran live (recorded or not)."""
        ...

    def record(self, entry: StepEntry, what: str) -> bool:
        """Record ``entry`` (False: it was not stored; the log says why)."""
        ...

    def not_stored(self) -> None:
        """A step ran live and is not recorded (the caller logged why)."""
        ...

    def answer_is(self, entry_names: list[str], shown: str) -> None:
        """The model answer the run is on now is stored under ``entry_names`` (what it may fail on)."""
        ...

    def retry_drawn(self, entry_name: str, shown: str, outcome: str) -> None:
        """A call of the current answer drew a retry (``outcome``: ``ModelRetry``...), recorded or replayed."""
        ...

    def call_failed(self) -> None:
        """A call of the current answer raised an exception that is never recorded: that call ends the run."""
        ...

    def request_failed(self, place: ModelKey) -> None:
        """The model request at ``place`` was sent and raised."""
        ...

    def entry_unusable(self, entry: StepEntry, error: object, consequence: str) -> None: ...

    def replayed_from(self, entry_name: str) -> str:
        """Where a replayed entry came from, for its log line (``from the cache (recorded by try 1)``)."""
        ...

    def record_decision(self, entry: StepEntry, what: str) -> None: ...

    def mark_start(self, step: Any) -> None:
        """Record that an at-most-once call starts now (right before it runs)."""
        ...

    def forget_mark(self, name: str) -> None:
        """An at-most-once call ended with an exception of its own: its start mark goes (a retry runs it again)."""
        ...

    def bind(self, place: Any, run_id: str | None, agent: str | None) -> StepOwner | None:
        """The run an agent run starting at ``place`` records into (see ``nesting.py``); None: already bound."""
        ...

    def stable_run_id(self, place: Any) -> str | None:
        """The ``run_id`` an agent run starting at ``place`` gets on every try; None: pydantic-ai's random one."""
        ...

    def unrecorded_run(self, run_id: str, agent: Callable[[], str]) -> None:
        """A model response was counted for agent run ``run_id``: name its agent once when nothing records it."""
        ...

    def running(self, key: str | None) -> AbstractContextManager[None]:
        """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
        ...


class _OneTimeWarnings(Protocol):
    def warn_once(self, what: str) -> bool: ...


class AttemptOwner(StepOwner, Protocol):
    """The attempt as its own rooms of work see it (finding a step, opening, ending: ``lookup.py``,
    ``opening.py``, ``ending.py``): its state, beside what steps see. Typed here so that none of them imports
    the run, which imports them."""

    writer: StepWriter
    keys: KeyChain
    stats: AttemptStats
    last_answer: LastAnswer
    divergence: Divergence
    policy: ReplayPolicy
    finished: bool
    outcome: AttemptOutcome
    report_readers: list[Callable[[DurableReport], None]]

    @property
    def family(self) -> _OneTimeWarnings: ...

    @property
    def store(self) -> StepStore: ...

    @property
    def run_key(self) -> Any: ...

    def agent_for_replay(self) -> str | None: ...

    def pack_for_next_try(self) -> None: ...

    def end_failed_try(self) -> None: ...

    def summary(self) -> str: ...
