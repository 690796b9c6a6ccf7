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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

__all__ = ["DIFF_LINES", "TEXTS_COMPONENT", "TEXT_LABELS", "request_texts", "text_diff"]

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


def request_texts(messages: Sequence[ModelMessage], mask: Callable[[str], str]) -> dict[str, str]:
    """The instructions (system prompt parts, then the last request's instructions) and the run's user prompt."""
    system: list[str] = []
    prompt = ""
    instructions = ""
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                system.append(part.content)
            elif isinstance(part, UserPromptPart):
                prompt = _text(part.content)
        instructions = message.instructions or ""
    texts = {"instructions": "\n".join([*system, instructions]).strip("\n"), "user_prompt": prompt}
    return {name: str(mask(text)) for name, text in texts.items()}


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
