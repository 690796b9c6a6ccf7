"""CPU time spent fingerprinting, step by step.

The durable run computes two kinds of fingerprint: a model request's (it also extends the
conversation digest with the new messages) and, for a tool call, the conversation digest the call
is keyed on followed by the call's own. The key chain makes them through its ``Fingerprinter``
seam; the probe hands the run a timed one (``AttemptOptions(fingerprinter=probe.fingerprinter())``)
and charges their CPU time (``time.thread_time``: this thread only, so the S3 server's thread does
not count) to the model step they belong to. The steps are numbered by model
requests: step k is the k-th request plus the tool calls it asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage

from airflow_pydantic_ai.durable.keys.chain import Fingerprinter
from airflow_pydantic_ai.durable.keys.fingerprint import RequestFingerprint

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

    def fingerprinter(self) -> Fingerprinter:
        """A fingerprinter for one durable run whose calls are timed into this probe."""
        return _TimedFingerprinter(probe=self)

    def window(self, first: bool, share: float = 0.1) -> float:
        """Mean CPU seconds per step over the first (or last) ``share`` of the tool steps."""
        tool_steps = self.steps[:-1]  # the final text answer asks for no tool
        count = max(1, round(len(tool_steps) * share))
        chosen = tool_steps[:count] if first else tool_steps[-count:]
        return sum(chosen) / len(chosen)


@dataclass
class _TimedFingerprinter(Fingerprinter):
    probe: FingerprintProbe = field(default_factory=FingerprintProbe)

    def request(self, **request: Any) -> RequestFingerprint:
        timed: Callable[..., RequestFingerprint] = self.probe._timed(super().request, starts_step=True)
        return timed(**request)

    def conversation(self, messages: Sequence[ModelMessage]) -> str:
        timed: Callable[..., str] = self.probe._timed(super().conversation, starts_step=False)
        return timed(messages)

    def tool_call(self, **call: Any) -> str:
        timed: Callable[..., str] = self.probe._timed(super().tool_call, starts_step=False)
        return timed(**call)
