"""Digests of the messages of a conversation, computed once per message and chained over its prefixes.

Each message is digested once per run (without the fields that change on every attempt: timestamps,
run and conversation ids, usage, response ids), and the digest of the unchanged prefix is reused, so
fingerprinting a step costs the size of what is new, not the length of the whole history.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

from airflow_pydantic_ai.durable.keys.canonical import FingerprintError, canonical_json, digest, strip
from airflow_pydantic_ai.durable.keys.schemes import KeyScheme
from airflow_pydantic_ai.durable.keys.wire import LOCAL_MESSAGE_FIELDS, LOCAL_PART_FIELDS, without_defaults

__all__ = ["Chain", "MessageDigests"]

# Fields that differ between two attempts at the same conversation.
_VOLATILE_MESSAGE_FIELDS = frozenset(
    {
        "timestamp",
        "run_id",
        "conversation_id",
        "usage",
        "provider_response_id",
        "workspace_ref",
        "history_digest",
        "failed_attempts",
        "model_id",
    }
)
_VOLATILE_PART_FIELDS = frozenset({"timestamp"})
_VOLATILE_PROVIDER_DETAILS = frozenset({"timestamp"})
"""Keys of a response's ``provider_details`` that stamp one call: the provider's creation time (OpenAI's
``created``, to the second). Never sent back to the provider; keeping it would make the key of every
step after a re-asked answer depend on the clock."""

_MESSAGE_ADAPTER: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_PARTS = operator.attrgetter("parts")


@dataclass(frozen=True)
class _MessageDigest:
    """Digests of one message, whole and by component."""

    full: str
    request_run_id: str | None
    """A request's ``run_id`` (None for a response: pydantic-ai stamps those after they are seen here)."""
    system: str
    """Its system prompt parts (sent with every request of the conversation); empty when it has none."""
    instructions: str
    """A request's ``instructions`` field (a fallback for ``instruction_parts``, read from the last requests)."""
    user_prompt: str
    other: str
    """Everything else: tool calls and returns, text, the message's own fields."""

    @property
    def as_history(self) -> str:
        """What a message of an earlier run weighs as history: all of it but its system prompt parts."""
        return digest(self.instructions, self.user_prompt, self.other)

    @property
    def as_run_history(self) -> str:
        """What a message of the current run weighs as history: its instructions count as instructions."""
        return digest(self.user_prompt, self.other)


def _digest_message(
    message: ModelMessage, *, scheme: KeyScheme, keep_response_timestamps: bool = False
) -> _MessageDigest:
    try:
        data = _MESSAGE_ADAPTER.dump_python(message, mode="json")
    except Exception as error:
        raise FingerprintError(f"cannot serialize a {type(message).__name__}: {error}") from error
    run_id = data.get("run_id")
    wire = scheme.is_wire
    if scheme.release is not None:  # a legacy key: the fields as the recording release serialised them
        data = scheme.as_recorded(type(message).__name__, data)
        data["parts"] = [
            scheme.as_recorded(type(original).__name__, part)
            for original, part in zip(message.parts, data.get("parts", []), strict=True)
        ]
    data = strip(data, _VOLATILE_MESSAGE_FIELDS)
    details = data.get("provider_details")
    if isinstance(details, dict) and not keep_response_timestamps and _VOLATILE_PROVIDER_DETAILS & details.keys():
        data["provider_details"] = strip(details, _VOLATILE_PROVIDER_DETAILS) or (None if wire else {})
    if wire:
        data = without_defaults(type(message), data, LOCAL_MESSAGE_FIELDS)
        parts = [
            without_defaults(type(original), strip(part, _VOLATILE_PART_FIELDS), LOCAL_PART_FIELDS)
            for original, part in zip(message.parts, data.get("parts", []), strict=True)
        ]
    else:
        parts = [strip(part, _VOLATILE_PART_FIELDS) for part in data.get("parts", [])]
    # Each part and each field is written as canonical JSON once; the texts digested (the whole message, its
    # system prompt, user prompt and other parts) are joined from those pieces, byte for byte what canonical_json
    # of each would give: a large tool return is serialised once, not twice.
    part_texts = [canonical_json(part) for part in parts]
    system: list[str] = []
    user_prompt: list[str] = []
    other_parts: list[str] = []
    for original, text in zip(message.parts, part_texts, strict=True):
        if isinstance(original, SystemPromptPart):
            system.append(text)
        elif isinstance(original, UserPromptPart):
            user_prompt.append(text)
        else:
            other_parts.append(text)
    fields = {key: canonical_json(value) for key, value in data.items() if key != "parts"}
    instructions = fields.pop("instructions", None)
    other = digest(_object_text({**fields, "parts": _list_text(other_parts)}))
    if instructions is None and len(other_parts) == len(part_texts):
        full = other  # a response, or a request of tool returns without instructions: the message is its other
    else:
        whole = {**fields, "parts": _list_text(part_texts)}
        if instructions is not None:
            whole["instructions"] = instructions
        full = digest(_object_text(whole))
    return _MessageDigest(
        full=full,
        request_run_id=run_id if isinstance(run_id, str) and isinstance(message, ModelRequest) else None,
        system=digest(_list_text(system)) if system else "",
        instructions=digest(canonical_json(None) if instructions is None else instructions),
        user_prompt=digest(_list_text(user_prompt)),
        other=other,
    )


def _list_text(items: list[str]) -> str:
    """The canonical JSON of a list whose items' canonical JSON is ``items``."""
    return f"[{','.join(items)}]"


def _object_text(fields: dict[str, str]) -> str:
    """The canonical JSON of an object whose values' canonical JSON is ``fields`` (keys sorted, as json sorts them)."""
    return "{" + ",".join(f"{canonical_json(key)}:{fields[key]}" for key in sorted(fields)) + "}"


@dataclass(frozen=True)
class Chain:
    """Running digests over a prefix of the conversation.

    The conversation may start with the history of earlier agent runs (``message_history``). The
    current run begins at the last request whose ``run_id`` differs from the request before it; the
    prompt of that request is *the* user prompt, everything else (but system prompts) is history.
    """

    full: str = ""
    system: str = ""
    all_history: str = ""
    """Every message as history: what precedes a run that starts after this prefix."""
    run_id: str | None = None
    run_instructions: str = ""
    run_prompt: str = ""
    before_run: str = ""
    run_history: str = ""
    """The current run's messages as history, its opening prompt excepted."""
    messages: int = 0

    def extend(self, message: _MessageDigest) -> Chain:
        opens_a_run = self.messages == 0 or (
            message.request_run_id is not None and message.request_run_id != self.run_id
        )
        return Chain(
            full=digest(self.full, message.full),
            # Only messages that carry system prompt parts count: more history is not a new system prompt.
            system=digest(self.system, message.system) if message.system else self.system,
            all_history=digest(self.all_history, message.as_history),
            run_id=message.request_run_id or self.run_id,
            run_instructions=digest("" if opens_a_run else self.run_instructions, message.instructions),
            run_prompt=message.user_prompt if opens_a_run else self.run_prompt,
            before_run=self.all_history if opens_a_run else self.before_run,
            run_history=digest("", message.other) if opens_a_run else digest(self.run_history, message.as_run_history),
            messages=self.messages + 1,
        )

    @property
    def history(self) -> str:
        return digest(self.before_run, self.run_history)


@dataclass
class MessageDigests:
    """Per-run memo of message digests and of the digests of conversation prefixes.

    A message is known by its identity *and* the identity of its ``parts`` list: pydantic-ai's way to
    rewrite history mid-run is to replace a message or reassign its ``parts`` (a history processor
    does), and either shows here; mutating a part in place is unsupported by pydantic-ai itself (its
    ``MessageHistoryMutatedWarning``). References are kept, so an id is never reused while memoised.
    A conversation that extends the one seen last reuses its prefix digests: the cost of a step is the
    cost of its new messages.
    """

    keep_response_timestamps: bool = False
    """Digest a response's ``provider_details['timestamp']`` too, as release 0.1.0 did (to replay its caches)."""
    scheme: KeyScheme = field(default_factory=KeyScheme)
    """The key scheme the digests are computed in (``schemes.py``)."""
    _by_id: dict[int, tuple[ModelMessage, Any, _MessageDigest]] = field(default_factory=dict)
    _prefix: list[ModelMessage] = field(default_factory=list)
    _prefix_parts: list[Any] = field(default_factory=list)
    _prefix_chains: list[Chain] = field(default_factory=list)

    def message(self, message: ModelMessage) -> _MessageDigest:
        known = self._by_id.get(id(message))
        if known is not None and known[0] is message and known[1] is message.parts:
            return known[2]
        computed = _digest_message(
            message,
            scheme=self.scheme,
            keep_response_timestamps=self.keep_response_timestamps or self.scheme.keep_response_timestamps,
        )
        self._by_id[id(message)] = (message, message.parts, computed)
        return computed

    def chain(self, messages: Sequence[ModelMessage]) -> Chain:
        """Digests of the whole conversation ``messages``."""
        remembered = len(self._prefix)
        if (
            len(messages) >= remembered
            and all(map(operator.is_, messages, self._prefix))
            and all(map(operator.is_, map(_PARTS, messages), self._prefix_parts))
        ):
            # The usual case, a conversation that grew: two identity checks per message, in C.
            shared = remembered
        else:
            shared, limit = 0, min(len(messages), remembered)
            while (
                shared < limit
                and messages[shared] is self._prefix[shared]
                and messages[shared].parts is self._prefix_parts[shared]
            ):
                shared += 1
            del self._prefix[shared:]
            del self._prefix_parts[shared:]
            del self._prefix_chains[shared:]
        current = self._prefix_chains[-1] if self._prefix_chains else Chain()
        for message in messages[shared:]:
            current = current.extend(self.message(message))
            self._prefix.append(message)
            self._prefix_parts.append(message.parts)
            self._prefix_chains.append(current)
        return current

    def conversation(self, messages: Sequence[ModelMessage]) -> str:
        """One digest of the whole conversation so far."""
        return self.chain(messages).full
