"""The one table of step kinds: what each kind of recorded step is, and everything that depends on the kind.

Every module that treats kinds differently reads :data:`KINDS` (or a name derived from it below): the entry
format (prefix and role), the listing order, the store (what a pack holds), the counts (the summary line's
columns, the report, the metrics), the usage limits (what pydantic-ai counts), the instrumentation and the
words a person reads. A new kind of step is one row here, its step module, its key formula and its
interception hook (``docs/architecture.rst``, "A new kind of step").

No I/O, no pydantic-ai, no other module of the package: every floor may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "COMPANION_PREFIXES",
    "COUNTED_KINDS",
    "ENTRY_PREFIXES",
    "KINDS",
    "ROLES",
    "EntryPrefix",
    "KindSpec",
    "StepRole",
    "kind_of",
    "prefix_of_role",
]

StepRole = Literal[
    "model", "tool", "output", "decision", "result", "started", "resolution", "checkpoint", "pending", "forgotten"
]
"""What an entry is to a person: a model request, a tool call, a call of an output function, a person's
decision on a tool call that needed approval, the task's recorded output; or one of a call's companions: the
mark that an at-most-once call started (``started``), the answer to "did that call happen?" once it was cut
off (``resolution``), or a value a resumable tool saved while it ran (``checkpoint``); or a model request's
companion: its submission to a provider that works on it later (``pending``: a batch or a background response,
with its ticket, ``steps/pending_step.py``); or the mark that forgets
the entries a run failed on (``forgotten``, a tombstone: never a step, never shown as one)."""

EntryPrefix = Literal[
    "model", "tool", "decision", "result", "started", "resolution", "checkpoint", "pending", "forgotten"
]
"""The kind an entry's name starts with (``{prefix}-{key}.json``): an output function's call is stored as a
``tool`` entry, so that entry names stay what they were before output functions were recorded."""


@dataclass(frozen=True)
class KindSpec:
    """One kind of step and what each part of the package does with it."""

    role: StepRole
    prefix: EntryPrefix
    """The entry name's prefix (and the entry's stored ``kind``)."""
    rank: int
    """Where it sorts among the entries of one model answer in the listing: the answer, the decisions made on
    its calls (before they run), its calls, the recorded output (after every call)."""
    is_step: bool
    """Counted as a step (what a retry replays, ``found N steps``); the recorded output is not one."""
    packed: bool
    """Carried in a failed try's pack; the recorded output is not: cleanup after success deletes it last, alone."""
    summary_column: Literal["model", "tool"] | None
    """The summary line's column it counts in (an output function's call counts as a tool step); None: not in it."""
    usage_counter: Literal["requests", "tool_calls"] | None
    """What pydantic-ai's ``RunUsage`` counts it in, replayed or not (a replay is subtracted for the usage limits
    and counted by the budget across tries); None: pydantic-ai does not count it."""
    instrumented: bool
    """A durable unit pydantic-ai's instrumentation sees (a span, token and cost metrics)."""
    metric: str | None
    """The kind's part in the metric names (``pydantic_ai.durable.steps.replayed.{metric}``); None: no metric."""
    words: str
    """How the log names a step of this kind (``step 3: output function finalize ...``)."""
    companion: bool = False
    """Belongs to one tool call or model request (keyed like it) rather than being a step of its own: it takes no
    step number in the log, the view or ``cache show`` (which show it with its step), and is never exported to a
    fixture."""


KINDS: dict[StepRole, KindSpec] = {
    spec.role: spec
    for spec in (
        KindSpec("model", "model", 0, True, True, "model", "requests", True, "model", "model"),
        KindSpec("tool", "tool", 2, True, True, "tool", "tool_calls", True, "tool", "tool"),
        KindSpec("output", "tool", 2, True, True, "tool", None, True, "output", "output function"),
        KindSpec("decision", "decision", 1, True, True, None, None, False, "decision", "decision"),
        KindSpec("result", "result", 3, False, False, None, None, False, None, "output"),
        KindSpec("started", "started", 2, False, True, None, None, False, None, "started call", companion=True),
        KindSpec("resolution", "resolution", 2, False, True, None, None, False, None, "resolution", companion=True),
        KindSpec("checkpoint", "checkpoint", 2, False, True, None, None, False, None, "checkpoint", companion=True),
        KindSpec("pending", "pending", 0, False, True, None, None, False, None, "pending request", companion=True),
        KindSpec("forgotten", "forgotten", 4, False, True, None, None, False, None, "forgotten entries"),
    )
}
"""Every kind, by role, in the order the report and the metrics list them."""

ROLES: tuple[StepRole, ...] = tuple(KINDS)
ENTRY_PREFIXES: tuple[EntryPrefix, ...] = tuple(dict.fromkeys(spec.prefix for spec in KINDS.values()))
COUNTED_KINDS: tuple[StepRole, ...] = tuple(role for role, spec in KINDS.items() if spec.is_step)
COMPANION_PREFIXES: frozenset[str] = frozenset(spec.prefix for spec in KINDS.values() if spec.companion)
"""The prefixes of entries that belong to a call and are never numbered as steps."""
"""The kinds an attempt's accounting, its report and the metrics count (every step, not the recorded output)."""


def kind_of(role: str | None, prefix: str) -> KindSpec:
    """The kind of an entry stored with ``prefix`` and ``role`` (None: written before roles existed, the
    prefix's own kind)."""
    spec = KINDS.get(role or prefix)  # type: ignore[call-overload]
    if spec is None:
        raise KeyError(f"unknown step kind {role or prefix!r}")
    return spec


def prefix_of_role(role: StepRole) -> EntryPrefix:
    """The prefix an entry of ``role`` is stored under."""
    return KINDS[role].prefix
