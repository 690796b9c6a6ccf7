"""The Airflow side of ``durable_mode`` and fixtures: which mode a task runs in, and what each mode does
around the attempt.

A task's mode is its ``durable_mode=`` argument, else ``[pydantic_ai] durable_mode``, else ``auto``; an
unknown value fails the task at its start, naming the option and the allowed values. ``off`` runs the
task as ``durable=False``; any other mode, or a fixture folder, given on the task makes it durable.

Around the attempt: ``record`` has the attempt discard the task instance's cache (``start_over``), so every
step runs live and what is stored replaces what was there (the calls in doubt are kept); ``auto`` and ``replay`` with
``durable_fixtures=`` replay the fixture's steps too (the fixture is read in place, never copied into the
cache); ``record`` with ``durable_fixtures=`` writes the recorded steps as the task's fixture once the
task succeeded; ``durable_keep_cache=True`` keeps the cache after a success (for ``cache export``).
A replay miss fails the task at once (no retry: the code, not the world, changed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable import DurableMode, check_mode

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable import Attempt, Recording, ReplayPolicy, StepStore, TaskIdentity, TaskLogger
    from airflow_pydantic_ai.tries.settings import DurableArguments

__all__ = ["ModeSettings", "find_error", "listening_for_replay_misses", "mask", "replay_misses_fail_at_once"]

CONFIG_OPTION = "[pydantic_ai] durable_mode"
ARGUMENT = "AgentOperator(durable_mode=...)"


def mask(text: str) -> str:
    """``text`` with every value registered with Airflow's secrets masker replaced by ``***``."""
    return str(_compat.redact(text))


@dataclass(frozen=True)
class ModeSettings:
    """A task's mode and fixture arguments, read and checked at its start."""

    mode: DurableMode
    explicit: bool
    """The task set ``durable_mode=`` itself (which makes it durable unless it is ``off``)."""
    fixtures: str | None = None
    live_tools: frozenset[str] = frozenset()
    keep_cache: bool = False

    @classmethod
    def read(
        cls,
        mode: str | None,
        *,
        fixtures: str | None = None,
        live_tools: Collection[str] = (),
        keep_cache: bool = False,
    ) -> ModeSettings:
        """The task's mode (its argument, else the option); raises ``DurableConfigError`` naming the one to fix."""
        from airflow_pydantic_ai.tries.settings import configured_mode

        configured = check_mode(configured_mode(), CONFIG_OPTION)
        chosen = configured if mode is None else check_mode(mode, ARGUMENT)
        return cls(
            mode=chosen,
            explicit=mode is not None,
            fixtures=str(fixtures).strip() or None if fixtures is not None else None,
            live_tools=frozenset(live_tools),
            keep_cache=keep_cache,
        )

    @classmethod
    def of(cls, arguments: DurableArguments) -> ModeSettings:
        """The mode and fixture settings of a task's :class:`DurableArguments`, read and checked."""
        return cls.read(
            arguments.mode,
            fixtures=arguments.fixtures,
            live_tools=arguments.live_tools,
            keep_cache=arguments.keep_cache,
        )

    def durable(self, durable: bool) -> bool:
        """Whether the task runs durable: ``durable=True``, a mode or fixtures given on the task; never when off."""
        return self.mode != "off" and (durable or self.explicit or self.fixtures is not None)

    # --- around the attempt ------------------------------------------------------------------------

    @property
    def start_over(self) -> str:
        """``record``: why the attempt discards the cache (every step runs live and replaces what was recorded; the
        calls in doubt are kept). Empty in any other mode."""
        return "durable_mode = record" if self.mode == "record" else ""

    def opening(
        self, store: StepStore, identity: TaskIdentity, log: TaskLogger
    ) -> tuple[ReplayPolicy, Recording | None]:
        """What the attempt is opened with: its policy, and the fixture's steps in ``auto`` and ``replay`` mode."""
        from airflow_pydantic_ai.durable import Recording, ReplayPolicy
        from airflow_pydantic_ai.durable.errors import FixtureError
        from airflow_pydantic_ai.durable.read import read_fixture

        policy = ReplayPolicy(
            mode=self.mode,
            live_tools=self.live_tools,
            mask=mask,
            source=f"the durable cache at {store.location}",
            agent=f"the agent of task {identity.task_id!r}",
        )
        if self.fixtures is None or self.mode == "record":
            return policy, None
        try:
            fixture = read_fixture(self.fixtures, identity.dag_id, identity.task_id, identity.map_index)
        except FixtureError as error:
            if self.mode == "replay":
                raise
            log.warning("Durable: %s; every step not in the cache runs live", error)
            return policy, None
        policy.source = f"the fixture {fixture.path}"
        return policy, Recording(fixture.entries, f"the fixture {fixture.path}")

    def started(self, recording: Recording | None, log: TaskLogger) -> None:
        """Say, once the cache is open, what the mode and the fixture change for this attempt."""
        if self.mode == "replay":
            log.info(
                "Durable: durable_mode = replay: every step must replay; a step that was not recorded fails the task%s",
                f" (tools run live: {', '.join(sorted(self.live_tools))})" if self.live_tools else "",
            )
        if recording is not None:
            log.info("Durable: replaying %s (%d steps)", recording.source, len(recording.entries))

    def after_success(self, run: Attempt, identity: TaskIdentity, log: TaskLogger) -> bool:
        """``record`` with fixtures: write the fixture. Returns whether the cache is kept."""
        if self.mode == "record" and self.fixtures is not None:
            from airflow_pydantic_ai.durable.read import write_fixture

            entries = run.reader().entries()
            path = write_fixture(self.fixtures, identity, entries, mask=mask)
            log.info(
                "Durable: wrote the fixture %s (%d steps, %d bytes)",
                path,
                sum(entry.is_step for entry in entries),
                path.stat().st_size,
            )
        if self.keep_cache:
            log.info("Durable: durable_keep_cache: the cache at %s is kept after the success", run.location)
        return self.keep_cache


_MISS_LISTENERS: list[Callable[[str, str], None]] = []


@contextmanager
def listening_for_replay_misses(listener: Callable[[str, str], None]) -> Iterator[None]:
    """Call ``listener(task_id, message)`` for each replay miss in this process meanwhile (the pytest plugin
    uses it to fail the test with the miss itself, not just a failed state)."""
    _MISS_LISTENERS.append(listener)
    try:
        yield
    finally:
        _MISS_LISTENERS.remove(listener)


@contextmanager
def replay_misses_fail_at_once(task_id: str) -> Iterator[None]:
    """A replay miss (or a missing fixture in ``replay`` mode) fails the task with no retry: a retry would
    miss the same way, since the code changed, not the world. So does a call whose outcome is unknown and that
    this try may not run again (``OutcomeUnknown``: ``on_unknown_outcome='fail'``, or an answer "fail the
    task"): nothing changes between tries until a person records an answer, and then a clear picks it up."""
    from airflow_pydantic_ai.durable.errors import FixtureError, ReplayMiss
    from airflow_pydantic_ai.durable.side_effects import OutcomeUnknown

    try:
        yield
    except Exception as error:
        miss = find_error(error, ReplayMiss) or find_error(error, FixtureError)
        unknown = find_error(error, OutcomeUnknown) if miss is None else None
        if miss is None and unknown is None:
            raise
        from airflow.providers.common.compat.sdk import AirflowFailException

        if unknown is not None:
            raise AirflowFailException(f"OutcomeUnknown: {unknown}") from error
        for listener in list(_MISS_LISTENERS):
            listener(task_id, str(miss))
        raise AirflowFailException(str(miss)) from error


def find_error(error: BaseException, kind: type[BaseException], depth: int = 0) -> BaseException | None:
    """``error`` itself, one in its group, or its cause, when of ``kind`` (pydantic-ai may wrap a tool's error)."""
    if isinstance(error, kind):
        return error
    if depth > 8:
        return None
    inner: list[BaseException] = list(error.exceptions) if isinstance(error, BaseExceptionGroup) else []
    cause = error.__cause__ or error.__context__
    for candidate in [*inner, *([cause] if cause is not None else [])]:
        found = find_error(candidate, kind, depth + 1)
        if found is not None:
            return found
    return None
