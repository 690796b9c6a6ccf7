"""One tool call (or output function call) of a durable attempt: replayed from its entry, or run and recorded.

The outcomes that are recorded: a return value, a ``ModelRetry`` or ``ToolFailed`` the tool raised, and
a retry already in pydantic-ai's own form (``ToolRetryError``). Any other exception records nothing:
the call ran (its side effects may have happened) but has no outcome to keep, so a retry runs it again.
One exception to that: an output validator that fails after the output function returned (pydantic-ai
runs both in one step). The function's result is recorded as it reached that validator, and a replay
hands it back for the validators from that one on to run again.

A synchronous tool runs in a thread that cannot be interrupted. When a sibling call fails and
pydantic-ai cancels this one, its side effect happens anyway, so its result is still recorded when the
thread finishes. When the whole run is cancelled (the task's ``execution_timeout``), the wait is bounded
by :data:`CANCELLED_RUN_GRACE`: the task ends when Airflow says, and a late result is not recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed, ToolRetryError

from airflow_pydantic_ai.durable.encoding.allowed_types import AllowedTypes
from airflow_pydantic_ai.durable.encoding.codec import UnsupportedValue
from airflow_pydantic_ai.durable.steps.outcome import (
    Raised,
    RetrySignal,
    Returned,
    ToolOutcome,
    Validating,
    decode_outcome,
    encode_outcome,
)
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.attempt.owner import StepOwner
    from airflow_pydantic_ai.durable.side_effects.tool_policy import CallGuard

__all__ = ["CANCELLED_RUN_GRACE", "ToolStep"]

CANCELLED_RUN_GRACE = 2.0
"""Seconds a synchronous tool still has to finish once the whole run is cancelled (Airflow's
``execution_timeout``, a SIGTERM, Ctrl-C): its result is recorded if it comes within them; after
them the run ends and the tool's thread is left to finish on its own, unrecorded."""
_POLL = 0.1
ValidatorFailure = Callable[[BaseException], "tuple[int, Any, str] | None"]
"""Tells whether an output validator raised the error after the output function returned: the validator's
index, the value it was handed and its name; None when the error is the function's own."""


@dataclass
class ToolStep:
    """A tool call (or output function call) of a durable run, replayed or live; counted as a tool step."""

    run: StepOwner
    label: str
    tool_name: str
    key: str | None
    is_tool: bool = True
    """A function tool (False: an output function, which pydantic-ai does not count as a tool call)."""
    call_id: str | None = None
    replayed: ToolOutcome | None = None
    started: float = field(default_factory=time.monotonic)
    abandoned: bool = False
    """The run ended before this live call did: whatever it returns later is not recorded."""
    live: bool = False
    """The tool opted out of replay (its metadata): it runs on every try and is never recorded."""
    numbered: str | None = field(default=None, repr=False)
    """How the log named the call once it ran live (its number is taken once, not per line)."""
    arguments: Any = field(default=None, repr=False)
    """The arguments as the model sent them (what a tool policy may keep of the call)."""
    guard: CallGuard | None = field(default=None, repr=False)
    """What the tool's policies do around this live call (``side_effects/policies.py``); None: nothing."""
    allowed: AllowedTypes = field(default_factory=AllowedTypes, repr=False)
    """The classes its result may name (``allowed_types.py``): what the tool declares, never what an entry says."""

    @property
    def entry_name(self) -> str:
        return entry_name("tool", self.key or "")

    @property
    def kind(self) -> Literal["tool", "output"]:
        return "tool" if self.is_tool else "output"

    @property
    def is_replay(self) -> bool:
        return self.replayed is not None

    @property
    def failed_validator(self) -> tuple[int, str] | None:
        """For a recorded output function result that had not passed every output validator: the index and
        name of the one that failed on it (that validator and those after it run again on the replayed value)."""
        if isinstance(self.replayed, Validating):
            return self.replayed.validator_index, self.replayed.validator_name
        return None

    def shown(self, entry: StepEntry | None = None, *, never_written: bool = False) -> str:
        """How the log names the call: ``step 6: tool lookup (call c1)``, numbered as the view and ``cache show``
        number it (``numbering.py``): by its entry (``entry``, or the one it replays), else where it would be
        listed if it were recorded now (``never_written``: it failed, and is numbered after the calls of its answer
        still running). A call that is never recorded (a live tool, no key) has no number."""
        if self.key is None:
            return self.label
        if entry is None and self.numbered is not None:
            return self.numbered
        if entry is None and self.replayed is not None:
            entry = self.run.entries.get(self.entry_name)
        if entry is None:
            entry = self._entry(self.run.answer_number, {})
        return f"step {self.run.step_number(entry, never_written=never_written)}: {self.label}"

    def load(self, entry: StepEntry) -> None:
        """Take the recorded outcome from ``entry`` (a damaged one is ignored with a warning: the call runs live)."""
        try:
            self.replayed = decode_outcome(entry.payload, self.allowed)
        except Exception as error:  # whatever is wrong with the stored outcome, run the call live
            self.run.entry_unusable(entry, error, f"{self.shown(entry)} runs live")
            self.forget()

    def forget(self) -> None:
        """Run live after all: drop the recorded outcome."""
        self.replayed = None

    def take_given(self, payload: dict[str, Any]) -> None:
        """Replay an outcome given elsewhere (a person said this call, cut off in an earlier try, happened, with this
        result), and record it as the call's own entry, so that the call is a step of the listing under the number
        the log gives it, and later tries replay it as any recorded result."""
        self.replayed = decode_outcome(payload, self.allowed)
        self._write(self.run.answer_number, payload)

    async def replay_or_run(
        self,
        call: Callable[[], Awaitable[Any]],
        *,
        in_thread: bool = False,
        validator_failure: ValidatorFailure | None = None,
    ) -> Any:
        """The recorded outcome; or ``call()`` live, recorded. ``in_thread``: the call runs in a worker thread
        that a cancellation cannot stop (a sync tool), so its outcome is still recorded when it comes.
        ``validator_failure``: for an output function, which tells an output validator's failure from its own."""
        if self.is_replay:
            return self.replay()
        if self.is_tool and self.run.budget is not None:  # issue 22: a budget across retries may refuse it
            self.run.budget.before_tool_call(self.shown())
        if self.guard is not None:  # last, right before the call, once nothing can refuse it
            self.guard.starting()
        with self._coming():
            if in_thread:
                return await self._recorded_even_if_cancelled(call())
            return await self._recorded(call(), validator_failure)

    def replay(self) -> Any:
        """Return (or raise) what the tool did when it was recorded."""
        run = self.run
        outcome = self.replayed
        assert outcome is not None
        # pydantic-ai counts a function tool's return in usage.tool_calls: replayed, it did not happen.
        run.step_replayed(
            self.kind, self.entry_name, counted_by_pydantic_ai=self.is_tool and isinstance(outcome, Returned)
        )
        shown = self.shown()
        if isinstance(outcome, Validating):
            source = run.replayed_from(self.entry_name)
            run.log.info(
                "Durable: %s replayed %s; output validator %s (and any after it) runs again on it%s",
                shown,
                "from the cache" if source.startswith("from the cache") else source,
                outcome.validator_name,
                source.removeprefix("from the cache"),
            )
            return outcome.value
        given = self.guard.replayed_as() if self.guard is not None else None
        source = run.replayed_from(self.entry_name) if given is None else given
        run.log.info("Durable: %s replayed %s", shown, source)
        if isinstance(outcome, Returned):
            return outcome.value
        if not isinstance(outcome.error, ToolFailed):  # a retry: it may be what makes the run fail
            run.retry_drawn(self.entry_name, shown, type(outcome.error).__name__)
        raise outcome.error

    # --- running live ----------------------------------------------------------------------------

    async def _recorded(self, call: Awaitable[Any], validator_failure: ValidatorFailure | None = None) -> Any:
        """Await a live call and record its outcome."""
        try:
            # Agent runs started by the call (a delegate) are scoped under this step.
            with self.run.running(self.key):
                result = await call
        except (ModelRetry, ToolFailed) as error:
            self._record_raise(error)
            raise
        except (ApprovalRequired, CallDeferred):
            # Not an outcome: the call waits for a decision (or for work done elsewhere) and is made again after it.
            self.run.log.info("Durable: %s asks for approval", self.shown())
            raise
        except ToolRetryError as error:  # a retry pydantic-ai already wrapped (an output function's, for text output)
            self._record_retry_signal(error)
            raise
        except BaseException as error:  # it ran (its side effects may have happened) but has no outcome to keep
            if isinstance(error, Exception) and self.guard is not None:  # it ended and said it failed
                self.guard.ended_without_outcome(error)
            failed = validator_failure(error) if validator_failure is not None else None
            if failed is None:
                self._record_failure(error)
            else:
                self._record_validator_failure(error, *failed)
            raise
        self._record_return(result)
        return result

    async def _recorded_even_if_cancelled(self, call: Awaitable[Any]) -> Any:
        task = asyncio.ensure_future(self._recorded(call))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await self._wait_for_thread(task)
            raise

    async def _wait_for_thread(self, task: asyncio.Future[Any]) -> None:
        """Wait for a cancelled call's thread so its result is recorded: while only this call is cancelled (a
        sibling failed), as long as it takes; once the whole run is cancelled, for the grace period only."""
        run_task = self.run.run_task
        run_cancelled_at: float | None = None
        with anyio.CancelScope(shield=True):
            while not task.done():
                if run_cancelled_at is None and _is_cancelled(run_task):
                    run_cancelled_at = time.monotonic()
                if run_cancelled_at is not None and time.monotonic() - run_cancelled_at >= CANCELLED_RUN_GRACE:
                    self._abandon(CANCELLED_RUN_GRACE)
                    return
                await asyncio.wait({task}, timeout=_POLL)
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what propagates

    def _coming(self) -> AbstractContextManager[None]:
        """While the call runs live: its entry is written when it ends (what a failing sibling is numbered after)."""
        if self.key is None or self.live:
            return nullcontext()
        return self.run.step_coming(self._entry(self.run.answer_number, {}))

    def _abandon(self, grace: float) -> None:
        """The run was cancelled and this call's thread did not finish within ``grace`` seconds."""
        self.abandoned = True
        self.run.step_ran(self.kind)
        self.run.not_stored()
        on_retry = self._on_retry() or "it runs again on a retry"
        self.run.log.warning(
            "Durable: %s did not finish within %.0f s after the run was cancelled (after %.2f s in all); its "
            "result is not recorded and %s",
            self.shown(never_written=True),
            grace,
            time.monotonic() - self.started,
            on_retry,
        )

    # --- recording outcomes ----------------------------------------------------------------------

    def _finish(self) -> int:
        self.run.step_ran(self.kind)
        elapsed = time.monotonic() - self.started
        if self.live:
            self.run.log.info("Durable: %s ran live in %.2f s (a live tool: never recorded)", self.label, elapsed)
            return self.run.answer_number
        self.numbered = self.shown()
        self.run.log.info("Durable: %s ran live in %.2f s", self.numbered, elapsed)
        if self.key is None:
            self.run.not_stored()
        return self.run.answer_number

    def _record_return(self, value: Any) -> None:
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        step_number = self._finish()
        if self.key is None:
            return
        try:
            payload = encode_outcome(Returned(value), self.allowed)
        except UnsupportedValue as error:
            self.run.not_stored()
            self.run.log.warning("Durable: the result of %s is not cached: %s", self.shown(), error)
            return
        self._write(step_number, payload)

    def _record_failure(self, error: BaseException) -> None:
        """The tool ran and raised (or was cancelled): counted as executed; a retry runs it again."""
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        self.run.step_ran(self.kind)
        # The run fails (if it does) because of this call, not because of the model answer that asked
        # for it: that answer must stay cached, or its other tool calls would happen again.
        self.run.call_failed()
        on_retry = self._on_retry()  # a policy's say: an at-most-once call cut off has its outcome unknown
        what_next = self.run.outlook.what_next() if on_retry is None else self.run.outlook.what_next(on_retry)
        # A call in doubt has no step of its own (no number a command takes) until an answer about it is used.
        shown = self.label if on_retry is not None else self.shown(never_written=True)
        self.run.log.info(
            "Durable: %s failed after %.2f s (%s); it is not cached and %s",
            shown,
            time.monotonic() - self.started,
            type(error).__name__,
            what_next,
        )

    def _record_validator_failure(self, error: BaseException, index: int, value: Any, validator: str) -> None:
        """The output function returned ``value`` and output validator number ``index`` raised: the function's
        part is done and recorded (when its result can be), so a retry replays it and runs the validators."""
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        self.run.step_ran(self.kind)
        # The run fails because of this output step, not because of the model answer that asked for it.
        self.run.call_failed()
        step_number = self.run.answer_number
        elapsed = time.monotonic() - self.started
        shown = self.shown()
        if self.key is None:
            self.run.not_stored()
            self.run.log.info(
                "Durable: %s returned in %.2f s, then output validator %s failed (%s); it is not cached and %s",
                *(shown, elapsed, validator, type(error).__name__, self.run.outlook.what_next()),
            )
            return
        try:
            payload = encode_outcome(Validating(value, index, validator), self.allowed)
        except UnsupportedValue as unsupported:
            self.run.not_stored()
            self.run.log.warning(
                "Durable: %s returned in %.2f s, then output validator %s failed (%s); its result is not cached "
                "(%s) and the function %s",
                *(shown, elapsed, validator, type(error).__name__, unsupported, self.run.outlook.what_next()),
            )
            return
        self.run.log.info(
            "Durable: %s returned in %.2f s and is recorded, then output validator %s failed (%s); %s",
            *(shown, elapsed, validator, type(error).__name__),
            self.run.outlook.what_next("a retry replays the result and runs the validators again"),
        )
        self._write(step_number, payload)

    def _record_raise(self, error: ModelRetry | ToolFailed) -> None:
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        step_number = self._finish()
        if self.key is None:
            return
        if isinstance(error, ModelRetry):  # ToolFailed costs no retry: it can never exhaust them
            self.run.retry_drawn(self.entry_name, self.shown(), "ModelRetry")
        self._write(step_number, encode_outcome(Raised(error)))
        if self.guard is not None and not isinstance(error, ToolFailed):  # a retry: may be forgotten with its answer
            self.guard.retry_recorded()

    def _record_retry_signal(self, error: ToolRetryError) -> None:
        """A retry already in pydantic-ai's own form: stored as the part it sends the model, replayed as is."""
        if self.abandoned:  # finished after its run ended: never recorded, already counted
            return
        step_number = self._finish()
        if self.key is None:
            return
        self.run.retry_drawn(self.entry_name, self.shown(), "ToolRetryError")
        self._write(step_number, encode_outcome(RetrySignal(error)))
        if self.guard is not None:  # a retry: may be forgotten with its answer
            self.guard.retry_recorded()

    def _on_retry(self) -> str | None:
        """What a policy says a retry does with this call when this try does not finish it (None: runs again)."""
        return self.guard.on_retry() if self.guard is not None else None

    def _entry(self, step_number: int, payload: dict[str, Any]) -> StepEntry:
        return StepEntry(
            kind="tool",
            key=self.key or "",
            step=step_number,
            attempt=self.run.attempt,
            label=self.tool_name,
            payload=payload,
            call_id=self.call_id,
            role="tool" if self.is_tool else "output",
            recorded_at=time.time(),
            scope=self.run.entry_scope,
        )

    def _write(self, step_number: int, payload: dict[str, Any]) -> None:
        assert self.key is not None
        entry = self._entry(step_number, payload)
        self.run.record(entry, self.numbered or self.shown(entry))


def _is_cancelled(run_task: asyncio.Task[Any] | None) -> bool:
    """Whether the agent run as a whole is being cancelled (unknown counts as yes: never wait unbounded)."""
    return run_task is None or run_task.done() or run_task.cancelling() > 0
