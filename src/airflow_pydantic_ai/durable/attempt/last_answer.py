"""The model answer an attempt is on, and the retries its calls drew: what a run that fails can fail on.

When pydantic-ai gives up (``UnexpectedModelBehavior``: retries exhausted), replaying that last answer
or the retries it drew would fail the retry the same way, even when the cause was transient. The
:class:`LastAnswer` knows which entries those are, so they can be forgotten; what the run got past
(earlier answers and retries, the answer's calls that returned) stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LastAnswer"]


@dataclass
class LastAnswer:
    """The entries behind the current model answer (see ``AgentRun.forget_what_failed``)."""

    number: int = 0
    shown: str = ""
    """How the log names the answer's step (``step 5: model test``)."""
    model_entries: list[str] = field(default_factory=list)
    """The answer's entries (more than one when a fallback stored it under the failed tries' keys too)."""
    retry_entries: list[str] = field(default_factory=list)
    retry_labels: list[tuple[str, str]] = field(default_factory=list)
    failed_call: bool = False
    """A call raised an exception that is never recorded: that, not the answer, ended the run."""

    def drew_retry(self, entry_name: str, label: str, outcome: str) -> None:
        self.retry_entries.append(entry_name)
        self.retry_labels.append((label, outcome))

    @property
    def to_forget(self) -> list[str]:
        """The entries a retry must not replay; none when a call that is never recorded ended the run."""
        if self.failed_call:
            return []
        return [*self.model_entries, *self.retry_entries]

    def describe(self) -> str:
        """What failed, for the log: "the answer of step 5: model test, and the ModelRetry of tool x"."""
        what = [f"the answer of {self.shown or f'model request {self.number}'}"] if self.model_entries else []
        what += [f"the {outcome} of {label}" for label, outcome in self.retry_labels]
        return what[0] if len(what) == 1 else ", ".join(what[:-1]) + " and " + what[-1]
