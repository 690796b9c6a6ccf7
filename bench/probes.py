"""CPU time spent fingerprinting, step by step.

The durable run computes two kinds of fingerprint: ``fingerprint_request`` for a model request (it
also extends the conversation digest with the new messages) and, for a tool call,
``MessageDigests.conversation`` (the conversation digest the call is keyed on) followed by
``fingerprint_tool_call``. The probe wraps those three where ``airflow_pydantic_ai.durable.run``
looks them up, and charges their CPU time (``time.thread_time``: this thread only, so the S3
server's thread does not count) to the model step they belong to. The steps are numbered by model
requests: step k is the k-th request plus the tool calls it asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import airflow_pydantic_ai.durable.run as durable_run
from airflow_pydantic_ai.durable.fingerprint import MessageDigests

__all__ = ["FingerprintProbe"]


@dataclass
class FingerprintProbe:
    steps: list[float] = field(default_factory=list)
    """CPU seconds per model step (index 0 is step 1; the last one is the final text answer)."""
    calls: int = 0
    _depth: int = 0

    def reset(self) -> None:
        self.steps = []
        self.calls = 0

    @property
    def total(self) -> float:
        return sum(self.steps)

    def _timed(self, function: Callable[..., Any], *, starts_step: bool) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:  # nested inside a probed call: already counted
                return function(*args, **kwargs)
            if starts_step or not self.steps:
                self.steps.append(0.0)
            self._depth += 1
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.steps[-1] += time.thread_time() - started
                self._depth -= 1
                self.calls += 1

        return timed

    @contextmanager
    def installed(self) -> Iterator[FingerprintProbe]:
        originals = (
            durable_run.fingerprint_request,
            durable_run.fingerprint_tool_call,
            MessageDigests.conversation,
        )
        durable_run.fingerprint_request = self._timed(originals[0], starts_step=True)  # type: ignore[assignment]
        durable_run.fingerprint_tool_call = self._timed(originals[1], starts_step=False)  # type: ignore[assignment]
        MessageDigests.conversation = self._timed(originals[2], starts_step=False)  # type: ignore[method-assign]
        try:
            yield self
        finally:
            durable_run.fingerprint_request = originals[0]  # type: ignore[assignment]
            durable_run.fingerprint_tool_call = originals[1]  # type: ignore[assignment]
            MessageDigests.conversation = originals[2]  # type: ignore[method-assign]

    def window(self, first: bool, share: float = 0.1) -> float:
        """Mean CPU seconds per step over the first (or last) ``share`` of the tool steps."""
        tool_steps = self.steps[:-1]  # the final text answer asks for no tool
        count = max(1, round(len(tool_steps) * share))
        chosen = tool_steps[:count] if first else tool_steps[-count:]
        return sum(chosen) / len(chosen)
