"""What a step may ask of the attempt that owns it: the one protocol every step module is typed against.

The attempt (``DurableRun``) is the one owner of the state steps change (counts, the writer, the replay
ledger, the last answer, the key chain); steps reach it only through this protocol, so no step module
imports the run (and the run imports every step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from airflow_pydantic_ai.durable.keys.chain import KeyChain
from airflow_pydantic_ai.durable.steps.budget import RetryBudget
from airflow_pydantic_ai.durable.steps.last_answer import LastAnswer
from airflow_pydantic_ai.durable.steps.stats import AttemptStats, TaskLogger
from airflow_pydantic_ai.durable.steps.usage import ReplayLedger
from airflow_pydantic_ai.durable.steps.writer import StepWriter, TryOutlook
from airflow_pydantic_ai.durable.storage.entry import StepEntry

__all__ = ["StepOwner"]


class StepOwner(Protocol):
    """The attempt as its steps see it."""

    attempt: int
    entries: dict[str, StepEntry]
    keys: KeyChain
    stats: AttemptStats
    ledger: ReplayLedger
    last_answer: LastAnswer
    writer: StepWriter
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

    def entry_unusable(self, entry: StepEntry, error: object, consequence: str) -> None: ...

    def record_decision(self, entry: StepEntry, what: str) -> None: ...

    def bind(self, place: Any, run_id: str | None, agent: str | None) -> StepOwner | None:
        """The run an agent run starting at ``place`` records into (see ``nesting.py``); None: already bound."""
        ...

    def unrecorded_run(self, run_id: str, agent: Callable[[], str]) -> None:
        """A model response was counted for agent run ``run_id``: name its agent once when nothing records it."""
        ...

    def running(self, key: str | None) -> AbstractContextManager[None]:
        """While a step's call runs live: agent runs started inside it are scoped under ``key``."""
        ...
