"""The readable texts of a model request (instructions, user prompt) and a short diff between two of them.

A fingerprint keeps digests only, which say *that* the prompt changed. When a replay must fail on a
changed prompt (``durable_mode = replay``, ``cache verify``), a person wants to see *how*: so a model
entry may carry the request's instructions and user prompt as text, masked by the caller's secrets
masker before they are stored, and :func:`text_diff` shows a short unified diff of the two.

Guarantees: texts are masked before they are returned (nothing here stores or logs them); a diff is
cut to :data:`DIFF_LINES` lines. No I/O.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import CompactionPart, ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

__all__ = ["DIFF_LINES", "TEXTS_COMPONENT", "TEXT_LABELS", "ConversationScan", "request_texts", "text_diff"]

TEXTS_COMPONENT = "texts"
"""The key under which a model entry's ``components`` carry the texts (never part of a fingerprint)."""
TEXT_LABELS = {"instructions": "instructions/system prompt", "user_prompt": "user prompt"}
"""The texts kept, by the fingerprint component they explain."""
DIFF_LINES = 40


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(item if isinstance(item, str) else f"<{type(item).__name__}>" for item in content)
    return f"<{type(content).__name__}>"


_PARTS = operator.attrgetter("parts")


@dataclass
class ConversationScan:
    """What a step reads from the whole conversation (its system prompts, its last user prompt, whether it holds a
    compaction), kept over the conversation's growing prefix: a step walks only the messages new since the last.

    A message is known by its identity and that of its ``parts`` list, as in ``MessageDigests``: a conversation
    that is not the last one extended (history rewritten by a processor, compacted) is walked again from its start.
    """

    _messages: list[ModelMessage] = field(default_factory=list)
    _parts: list[Any] = field(default_factory=list)
    _system: list[str] = field(default_factory=list)
    _prompt: str = ""
    _compacted: bool = False

    def texts(self, messages: Sequence[ModelMessage], mask: Callable[[str], str]) -> dict[str, str]:
        """The instructions (system prompt parts, then the last request's instructions) and the run's user prompt,
        masked."""
        self._advance(messages)
        requests = (message for message in reversed(messages) if isinstance(message, ModelRequest))
        instructions = next((request.instructions or "" for request in requests), "")
        texts = {"instructions": "\n".join([*self._system, instructions]).strip("\n"), "user_prompt": self._prompt}
        return {name: str(mask(text)) for name, text in texts.items()}

    def compacted(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether a message holds a compaction (a summary or a provider's compaction item that replaced the
        history before it)."""
        self._advance(messages)
        return self._compacted

    def _advance(self, messages: Sequence[ModelMessage]) -> None:
        seen = len(self._messages)
        if not (
            len(messages) >= seen
            and all(map(operator.is_, messages, self._messages))
            and all(map(operator.is_, map(_PARTS, messages), self._parts))
        ):
            self._messages, self._parts, self._system, self._prompt, self._compacted = [], [], [], "", False
            seen = 0
        for message in messages[seen:]:
            self._messages.append(message)
            self._parts.append(message.parts)
            for part in message.parts:
                if isinstance(part, CompactionPart):
                    self._compacted = True
                elif not isinstance(message, ModelRequest):
                    continue
                elif isinstance(part, SystemPromptPart):
                    self._system.append(part.content)
                elif isinstance(part, UserPromptPart):
                    self._prompt = _text(part.content)


def request_texts(messages: Sequence[ModelMessage], mask: Callable[[str], str]) -> dict[str, str]:
    """The instructions (system prompt parts, then the last request's instructions) and the run's user prompt."""
    return ConversationScan().texts(messages, mask)


def text_diff(name: str, recorded: Mapping[str, str], current: Mapping[str, str]) -> str:
    """A unified diff of text ``name`` (``instructions`` or ``user_prompt``); empty when either is unknown."""
    before, after = recorded.get(name), current.get(name)
    if before is None or after is None or before == after:
        return ""
    label = TEXT_LABELS.get(name, name)
    lines = list(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile=f"recorded {label}",
            tofile=f"current {label}",
            lineterm="",
            n=1,
        )
    )
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... ({len(lines) - DIFF_LINES} more diff lines)"]
    return "\n".join(lines)
