"""What a step of a durable attempt may do when it finds no recorded entry: the ``durable_mode`` policy.

``auto`` (the default) replays what was recorded and runs the rest live, recording it. ``replay`` allows
no live call at all: a model request or a tool call with no matching entry raises ``ReplayMiss``
*before* the model or the tool is called, naming the step, the agent, the request components that
changed (the fingerprint's component digests) and, for a changed prompt or instructions, a short
unified diff of the texts (masked). Tools named in ``live_tools`` run live in ``replay`` mode even when
recorded (a pure function under test). ``record`` runs everything live and records it (the Airflow side
empties the cache first); ``off`` is ``durable=False`` and never reaches this module.

The attempt (:class:`~airflow_pydantic_ai.durable.attempt.attempt.Attempt`) owns one :class:`ReplayPolicy`
and asks it at each lookup; nothing else here touches the run's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_pydantic_ai.durable.errors import ReplayMiss
from airflow_pydantic_ai.durable.keys.divergence import another_release
from airflow_pydantic_ai.durable.keys.fingerprint import changed_components
from airflow_pydantic_ai.durable.keys.request_text import TEXT_LABELS, TEXTS_COMPONENT, ConversationScan, text_diff
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from airflow_pydantic_ai.durable.keys.chain import ModelKey

__all__ = ["DURABLE_MODES", "DurableMode", "ReplayMiss", "ReplayPolicy", "check_mode"]

DurableMode = Literal["auto", "replay", "record", "off"]
DURABLE_MODES: tuple[DurableMode, ...] = ("auto", "replay", "record", "off")
_FIX = (
    "Nothing ran live (durable_mode = replay). If the change is intended, record again: "
    "pytest --durable-record, or run the task once with durable_mode='record'."
)


def check_mode(value: Any, option: str) -> DurableMode:
    """``value`` as a mode; a ``DurableConfigError`` naming ``option`` and the allowed values otherwise."""
    from airflow_pydantic_ai.durable.errors import DurableConfigError

    mode = str(value).strip().lower() if isinstance(value, str) else value
    if mode not in DURABLE_MODES:
        raise DurableConfigError(f"{option} {value!r} is not one of {', '.join(DURABLE_MODES)}")
    return mode  # type: ignore[no-any-return]


def _identity(text: str) -> str:
    return text


@dataclass
class ReplayPolicy:
    """The mode of one attempt and what its misses do."""

    mode: DurableMode = "auto"
    live_tools: frozenset[str] = frozenset()
    """Tools that run live in ``replay`` mode, recorded or not."""
    mask: Callable[[str], str] = _identity
    """The secrets masker texts go through before they are stored or shown."""
    source: str = "the durable cache"
    """Where the recorded steps come from, for the miss message (a fixture file, a cache location)."""
    agent: str = "the agent"
    """Which agent runs, for the miss message (``agent 'name'``, set when the run starts)."""
    _last_texts: dict[str, str] | None = field(default=None, repr=False)
    _scan: ConversationScan = field(default_factory=ConversationScan, repr=False)

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    def runs_live(self, tool_name: str) -> bool:
        """A tool named to run live in ``replay`` mode: its recorded result is not used."""
        return self.replaying and tool_name in self.live_tools

    def names_agent(self, agent: str | None) -> None:
        """The agent the attempt runs has a name: a replay miss names it."""
        if agent:
            self.agent = f"agent {agent!r}"

    def note_request(self, place: ModelKey, messages: Sequence[ModelMessage]) -> None:
        """Keep the request's texts (masked) in its components when they differ from the previous step's."""
        if place.key is None:
            return
        texts = self._scan.texts(messages, self.mask)
        if texts != self._last_texts:
            place.components[TEXTS_COMPONENT] = texts
            self._last_texts = texts

    def check_model_step(
        self,
        place: ModelKey,
        entries: Mapping[str, StepEntry],
        messages: Sequence[ModelMessage],
        recorded: Mapping[int, StepEntry],
        agent: str | None = None,
    ) -> None:
        """In ``replay`` mode, raise ``ReplayMiss`` unless the request was recorded.

        ``recorded``: the model entries of this agent run by step number (the divergence's); ``agent``: which
        agent runs, when it is not the attempt's first one.
        """
        if not self.replaying:
            return
        if place.key is not None and entry_name("model", place.key) in entries:
            return
        head = f"model step {place.number} ({place.label}) of {agent or self.agent}"
        if place.key is None:
            raise ReplayMiss(
                f"{head} cannot be fingerprinted ({place.failure}), so it cannot be replayed. {_FIX}", changed=True
            )
        at_step = recorded.get(place.number)
        if at_step is None:
            raise ReplayMiss(
                f"{head} is not in {self.source}: it recorded {len(recorded)} model step(s) and nothing at "
                f"step {place.number}: the recording ends before this step. {_FIX}",
                changed=False,
            )
        changes = changed_components(at_step.components, place.compared or place.components) or [
            "an earlier step (same request, different history)"
        ]
        upgrade = another_release(at_step)
        if upgrade:
            lines = [f"{head} does not match {self.source}, recorded{upgrade} (changed: {', '.join(changes)}). {_FIX}"]
        else:
            lines = [f"{head} does not match {self.source}; changed: {', '.join(changes)}. {_FIX}"]
        current = self._scan.texts(messages, self.mask)
        before = _texts_until(recorded, place.number)
        for name in TEXT_LABELS:
            diff = text_diff(name, before, current)
            if diff:
                lines.append(diff)
        raise ReplayMiss("\n".join(lines), changed=True)

    def check_call_step(
        self,
        label: str,
        tool_name: str,
        key: str | None,
        entries: Mapping[str, StepEntry],
        model_step: int,
        recorded: Mapping[int, StepEntry],
    ) -> None:
        """In ``replay`` mode, raise ``ReplayMiss`` unless the call was recorded (or its tool runs live).

        ``model_step``: the number of the model step whose answer made the call; ``recorded``: the model entries
        of this agent run by step number.
        """
        if not self.replaying or tool_name in self.live_tools:
            return
        if key is not None and entry_name("tool", key) in entries:
            return
        why = "cannot be fingerprinted" if key is None else f"has no recorded result in {self.source}"
        later = any(step > model_step for step in recorded)
        raise ReplayMiss(
            f"{label} (after model step {model_step}) {why}, and durable_mode = replay runs no tool live (name it "
            f"in durable_live_tools to run it live). {_FIX}",
            changed=key is None or later,
        )

    def check_decision(self, call: str, recorded: bool) -> None:
        """In ``replay`` mode, raise ``ReplayMiss`` when a call needs a person's decision that was not recorded."""
        if self.replaying and not recorded:
            raise ReplayMiss(
                f"the call {call} needs approval and {self.source} holds no decision for it; durable_mode = replay "
                f"asks no person. {_FIX}",
                changed=False,
            )


def _texts_until(recorded: Mapping[int, StepEntry], number: int) -> dict[str, str]:
    """The texts in force at step ``number``: those of the latest step at or before it that stored them."""
    for step in sorted((step for step in recorded if step <= number), reverse=True):
        texts = recorded[step].components.get(TEXTS_COMPONENT)
        if isinstance(texts, dict):
            return {str(name): str(text) for name, text in texts.items()}
    return {}
