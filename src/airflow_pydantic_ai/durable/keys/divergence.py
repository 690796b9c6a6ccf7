"""Where an attempt leaves the path an earlier attempt recorded, and the one WARNING that says what changed.

The first model step that misses the cache where an earlier attempt recorded a step at the same
number is where the run diverged: the warning names the request components that differ (model,
instructions, user prompt, history, settings, tool definitions, output schema). Every later step runs
live anyway (the key chain covers its lineage), so only the first miss is explained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_pydantic_ai.durable.keys.fingerprint import changed_components
from airflow_pydantic_ai.durable.keys.releases import installed_release
from airflow_pydantic_ai.durable.keys.schemes import recorded_release
from airflow_pydantic_ai.durable.storage.entry import StepEntry

__all__ = ["Divergence", "another_release"]


def another_release(recorded: StepEntry) -> str:
    """When ``recorded`` was recorded under another pydantic-ai release than the one running: the words that say
    so (issue 34: the same agent under another pydantic-ai; the request it builds changed, not the user's
    prompt). Empty when the release is the same, or the entry does not name one (0.2.0 or earlier)."""
    then, now = recorded_release(recorded.recorded_with), installed_release()
    if then is None or then == now:
        return ""
    return f" under pydantic-ai {then}; this worker runs pydantic-ai {now}, which changed the request it sends"


@dataclass
class Divergence:
    """The model steps earlier attempts recorded, by number, and whether this attempt left their path."""

    recorded_at_step: dict[int, StepEntry] = field(default_factory=dict)
    diverged: bool = False
    changes: list[str] = field(default_factory=list)
    """The "changed: ..." warnings of this attempt, for its attempt record."""
    changed_components: list[str] = field(default_factory=list)
    """The request components those warnings name, for the durable report (issue 22)."""

    @classmethod
    def of(cls, entries: Mapping[str, StepEntry], scope: tuple[str, int] | None = None) -> Divergence:
        """Everything in the cache was loaded before this attempt began: it is all from earlier attempts.

        ``scope``: the agent run whose steps to compare (None: the attempt's first top-level run).
        """
        recorded: dict[int, StepEntry] = {}
        for entry in entries.values():
            if entry.kind != "model" or entry.scope_id != scope:
                continue
            known = recorded.get(entry.step)
            if known is None or entry.attempt > known.attempt:
                recorded[entry.step] = entry
        return cls(recorded_at_step=recorded)

    def for_scope(self, entries: Mapping[str, StepEntry], scope: tuple[str, int]) -> Divergence:
        """The divergence of another agent run of the attempt (its warnings go to the same attempt record)."""
        other = Divergence.of(entries, scope)
        other.changes = self.changes
        other.changed_components = self.changed_components  # issue 22: the report names them too
        return other

    def explain_miss(
        self,
        number: int,
        components: dict[str, Any],
        shown: Callable[[], str] | None = None,
        listed_as: Callable[[StepEntry], int] | None = None,
    ) -> str | None:
        """The WARNING for model step ``number`` of its run, which missed the cache, if it is the first to leave
        the recorded path (``shown``: how the log names the step, ``step 5: model test``; ``listed_as``: the
        number of a recorded entry in the cache listing, to name the step it differs from as the log, the view
        and ``cache show`` do; both asked for the warning only, so that a step that just has no entry yet
        costs nothing)."""
        if self.diverged:
            return None
        recorded = self.recorded_at_step.get(number)
        if recorded is None:
            return None
        self.diverged = True
        changes = changed_components(recorded.components, components) or [
            "an earlier step (same request, different history of replays)"
        ]
        named = shown() if shown is not None else f"model request {number}"
        # Named by its listing number (issue 28): where the new request is listed is not where the old one is.
        where = f" as step {listed_as(recorded)}" if listed_as is not None else ""
        upgrade = another_release(recorded)
        if upgrade:
            warning = (
                f"Durable: {named} differs from what attempt {recorded.attempt} recorded{where}{upgrade} "
                f"(changed: {', '.join(changes)}). It runs live, and so does every step after it."
            )
        else:
            warning = (
                f"Durable: {named} differs from what attempt {recorded.attempt} recorded{where}; "
                f"changed: {', '.join(changes)}. It runs live, and so does every step after it."
            )
        self.changes.append(warning)
        self.changed_components.extend(name for name in changes if name not in self.changed_components)
        return warning
