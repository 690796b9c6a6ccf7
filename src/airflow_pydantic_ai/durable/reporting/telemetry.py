"""The telemetry of durable steps: replayed work is not reported twice, and spans say which task ran them.

pydantic-ai's instrumentation (OpenTelemetry: ``Agent.instrument_all()``, ``instrument=True``, Logfire)
opens a span for the agent run, each model request and each tool call, and records token and cost
metrics per request. A retry runs the agent loop again, so without care every replayed step would be
reported again.

* pydantic-ai 2.68 and later give durable engines :func:`pydantic_ai.durable_exec.replay_scope` and
  :func:`~pydantic_ai.durable_exec.record_durable_unit`: the attempt's agent runs go inside one
  :func:`telemetry_scope`, each step reports whether it ran (:meth:`StepTelemetry.unit_done`), and a span
  that covered only replayed steps is never exported, nor are a replayed request's token and cost metrics.
* Older releases (2.62-2.67) have no such surface and pydantic-ai is never patched: a replayed step's
  spans and metrics are reported again, and each of its spans carries ``pydantic_ai.durable.replayed =
  true`` (:data:`REPLAYED_ATTRIBUTE`) so that a trace backend can filter them (``docs/compatibility.rst``).

Every span a step runs under also gets the identity attributes the attempt was opened with (the Airflow
side gives the task instance's, under the names Airflow's own task span uses).

Guarantees: without instrumentation this costs a context-variable lookup per step; nothing here raises;
the span current when the attempt began (Airflow's task span, or none) is never stamped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

record_durable_unit: Callable[..., None] | None
replay_scope: Callable[..., Any] | None
try:  # pydantic-ai >= 2.68
    from pydantic_ai.durable_exec import record_durable_unit as _record_unit
    from pydantic_ai.durable_exec import replay_scope as _replay_scope

    record_durable_unit, replay_scope = _record_unit, _replay_scope
except ImportError:  # pragma: no cover - exercised by the oldest matrix session
    record_durable_unit = replay_scope = None

__all__ = ["HOLDS_BACK_REPLAYS", "REPLAYED_ATTRIBUTE", "StepTelemetry", "telemetry_scope"]

HOLDS_BACK_REPLAYS: bool = replay_scope is not None
"""Whether this pydantic-ai keeps replayed steps out of exported spans and metrics (2.68 and later)."""

REPLAYED_ATTRIBUTE = "pydantic_ai.durable.replayed"
"""Set on every span a step ran under: ``True`` when the step was replayed from the cache."""

_outer_span: ContextVar[trace.Span | None] = ContextVar("airflow_pydantic_ai_outer_span", default=None)


@contextmanager
def telemetry_scope() -> Iterator[None]:
    """Around an agent run of a durable attempt; an agent run inside another (a delegate) shares its scope."""
    if _outer_span.get() is not None:
        yield
        return
    token = _outer_span.set(trace.get_current_span())
    try:
        if replay_scope is None:
            yield
        else:
            with replay_scope():
                yield
    finally:
        _outer_span.reset(token)


@dataclass
class StepTelemetry:
    """What one attempt's steps tell the instrumentation: whether each ran, and the task's identity."""

    attributes: Mapping[str, str | int] = field(default_factory=dict)
    """Stamped on every span a step runs under (and on the agent run's span)."""

    def run_started(self) -> None:
        """An agent run of the attempt began: stamp its span with the identity."""
        span = self._own_span()
        if span is not None and self.attributes:
            span.set_attributes(dict(self.attributes))

    def unit_done(self, *, executed: bool) -> None:
        """A step ended, in the context of the request or call that asked for it: ``executed`` it ran live."""
        span = self._own_span()
        if span is not None:
            span.set_attributes({**self.attributes, REPLAYED_ATTRIBUTE: not executed})
        if record_durable_unit is not None:
            record_durable_unit(executed=executed)

    @staticmethod
    def _own_span() -> Any:
        """The current span, if instrumentation opened it inside the attempt (not the span around the attempt)."""
        span = trace.get_current_span()
        if not span.is_recording() or span is _outer_span.get():
            return None
        return span
