"""Canonical fingerprints of model requests and tool calls.

A fingerprint is a digest of what the provider (or the tool) would actually see, with the fields that
change on every attempt removed: timestamps, run and conversation ids, usage, response ids. It is
computed from canonical JSON (sorted keys, no ``repr()``, sets sorted), so it is the same in every
process whatever ``PYTHONHASHSEED`` is.

Besides the overall digest, a request's *components* (model, instructions, user prompt, history,
settings, each tool definition, output schema, other parameters) are digested separately so that a
mismatch can say what changed.

Each message is digested once per run and the digest of the unchanged prefix is reused, so
fingerprinting a step costs the size of what is new, not the length of the whole history.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

__all__ = [
    "COMPONENT_LABELS",
    "TRANSPORT_SETTINGS",
    "FingerprintError",
    "MessageDigests",
    "RequestFingerprint",
    "canonical_json",
    "changed_components",
    "digest",
    "digest_json",
    "fingerprint_request",
    "fingerprint_tool_call",
]

TRANSPORT_SETTINGS = frozenset({"timeout", "request_timeout", "first_event_timeout", "max_retries", "extra_headers"})
"""Model settings that change how a request travels, not what it asks: never part of a fingerprint."""

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
# Tool definition fields that stay on our side: the provider never sees them.
_LOCAL_TOOL_FIELDS = frozenset({"metadata", "timeout", "toolset_id", "capability_id"})
_OUTPUT_PARAMS = (
    "output_mode",
    "output_object",
    "output_tools",
    "prompted_output_template",
    "allow_text_output",
    "allow_image_output",
)
_INSTRUCTION_PARAMS = ("instruction_parts", "instruction_visibility")

_MESSAGE_ADAPTER: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_PARTS = operator.attrgetter("parts")


class FingerprintError(ValueError):
    """A request or call could not be reduced to canonical JSON; it must be neither replayed nor recorded."""


def _jsonable(value: Any) -> Any:
    """Plain JSON data for ``value``, with sets sorted; raises FingerprintError when impossible."""
    if isinstance(value, (set, frozenset)):
        items = [_jsonable(item) for item in value]
        return sorted(items, key=canonical_json)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        converted = to_jsonable_python(value)
    except Exception as error:  # pydantic raises several types here
        raise FingerprintError(f"cannot serialize a {type(value).__name__}: {error}") from error
    if converted is value:
        raise FingerprintError(f"cannot serialize a {type(value).__name__}")
    return _jsonable(converted)


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, compact separators, UTF-8 kept as is."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise FingerprintError(str(error)) from error


def digest(*chunks: str | bytes) -> str:
    """Hex sha256 of the chunks, each length-prefixed so that ("ab", "c") != ("a", "bc")."""
    hasher = hashlib.sha256()
    for chunk in chunks:
        data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()


def digest_json(value: Any) -> str:
    """Digest of the canonical JSON of ``value`` (converted with :func:`_jsonable` first)."""
    return digest(canonical_json(_jsonable(value)))


def _strip(data: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in fields}


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


def _digest_message(message: ModelMessage, *, keep_response_timestamps: bool = False) -> _MessageDigest:
    try:
        data = _MESSAGE_ADAPTER.dump_python(message, mode="json")
    except Exception as error:
        raise FingerprintError(f"cannot serialize a {type(message).__name__}: {error}") from error
    run_id = data.get("run_id")
    data = _strip(data, _VOLATILE_MESSAGE_FIELDS)
    details = data.get("provider_details")
    if isinstance(details, dict) and not keep_response_timestamps and _VOLATILE_PROVIDER_DETAILS & details.keys():
        data["provider_details"] = _strip(details, _VOLATILE_PROVIDER_DETAILS)
    parts = [_strip(part, _VOLATILE_PART_FIELDS) for part in data.get("parts", [])]
    data["parts"] = parts
    system: list[Any] = []
    user_prompt: list[Any] = []
    other_parts: list[Any] = []
    for original, part in zip(message.parts, parts, strict=True):
        if isinstance(original, SystemPromptPart):
            system.append(part)
        elif isinstance(original, UserPromptPart):
            user_prompt.append(part)
        else:
            other_parts.append(part)
    other = {key: value for key, value in data.items() if key not in ("parts", "instructions")}
    other["parts"] = other_parts
    return _MessageDigest(
        full=digest(canonical_json(data)),
        request_run_id=run_id if isinstance(run_id, str) and isinstance(message, ModelRequest) else None,
        system=digest(canonical_json(system)) if system else "",
        instructions=digest(canonical_json(data.get("instructions"))),
        user_prompt=digest(canonical_json(user_prompt)),
        other=digest(canonical_json(other)),
    )


@dataclass(frozen=True)
class _Chain:
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

    def extend(self, message: _MessageDigest) -> _Chain:
        opens_a_run = self.messages == 0 or (
            message.request_run_id is not None and message.request_run_id != self.run_id
        )
        return _Chain(
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
    _by_id: dict[int, tuple[ModelMessage, Any, _MessageDigest]] = field(default_factory=dict)
    _prefix: list[ModelMessage] = field(default_factory=list)
    _prefix_parts: list[Any] = field(default_factory=list)
    _prefix_chains: list[_Chain] = field(default_factory=list)

    def message(self, message: ModelMessage) -> _MessageDigest:
        known = self._by_id.get(id(message))
        if known is not None and known[0] is message and known[1] is message.parts:
            return known[2]
        computed = _digest_message(message, keep_response_timestamps=self.keep_response_timestamps)
        self._by_id[id(message)] = (message, message.parts, computed)
        return computed

    def chain(self, messages: Sequence[ModelMessage]) -> _Chain:
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
        current = self._prefix_chains[-1] if self._prefix_chains else _Chain()
        for message in messages[shared:]:
            current = current.extend(self.message(message))
            self._prefix.append(message)
            self._prefix_parts.append(message.parts)
            self._prefix_chains.append(current)
        return current

    def conversation(self, messages: Sequence[ModelMessage]) -> str:
        """One digest of the whole conversation so far."""
        return self.chain(messages).full


# Human-readable names of request components, in the order a warning lists them.
COMPONENT_LABELS: dict[str, str] = {
    "model": "model",
    "instructions": "instructions/system prompt",
    "user_prompt": "user prompt",
    "history": "message history",
    "settings": "model settings",
    "tools": "tool definitions",
    "output_schema": "output schema",
    "parameters": "other request parameters",
}


@dataclass(frozen=True)
class RequestFingerprint:
    """The digest that keys a model request, and the digests of its components."""

    digest: str
    components: dict[str, Any]
    conversation: str = ""
    """The digest of the conversation the request carries (what :meth:`MessageDigests.conversation` gives)."""


def _settings_json(settings: Mapping[str, Any] | None) -> Any:
    if not settings:
        return {}
    return _jsonable({key: value for key, value in settings.items() if key not in TRANSPORT_SETTINGS})


def _tool_json(tool: Any) -> Any:
    data = _jsonable(tool)
    if isinstance(data, dict):
        return _strip(data, _LOCAL_TOOL_FIELDS)
    return data


def _parameter_fields(parameters: Any) -> dict[str, Any]:
    if not dataclasses.is_dataclass(parameters):
        raise FingerprintError(f"unexpected request parameters type {type(parameters).__name__}")
    return {
        item.name: getattr(parameters, item.name)
        for item in dataclasses.fields(parameters)
        if not item.name.startswith("_")
    }


def fingerprint_request(
    *,
    model_identity: str,
    messages: Sequence[ModelMessage],
    settings: Mapping[str, Any] | None,
    parameters: Any,
    memo: MessageDigests,
) -> RequestFingerprint:
    """Fingerprint a model request as the provider will see it.

    ``settings`` and ``parameters`` should be what ``model.prepare_request(...)`` returned, so that
    the model's own settings and its customisation of the parameters are covered.
    Raises :class:`FingerprintError` when any part cannot be reduced to canonical JSON.
    """
    chain = memo.chain(messages)
    fields = _parameter_fields(parameters)
    tools = {
        str(getattr(tool, "name", index)): digest(canonical_json(_tool_json(tool)))
        for index, tool in enumerate(fields.pop("function_tools", []) or [])
    }
    output = {name: _jsonable(fields.pop(name, None)) for name in _OUTPUT_PARAMS}
    if isinstance(output.get("output_tools"), list):
        output["output_tools"] = [
            _strip(tool, _LOCAL_TOOL_FIELDS) if isinstance(tool, dict) else tool for tool in output["output_tools"]
        ]
    instruction_params = {name: _jsonable(fields.pop(name, None)) for name in _INSTRUCTION_PARAMS}
    other = _jsonable(fields)
    components: dict[str, Any] = {
        "model": digest(model_identity),
        "instructions": digest(chain.system, chain.run_instructions, canonical_json(instruction_params)),
        "user_prompt": chain.run_prompt,
        "history": chain.history,
        "settings": digest(canonical_json(_settings_json(settings))),
        "tools": tools,
        "output_schema": digest(canonical_json(output)),
        "parameters": digest(canonical_json(other)),
        "message_count": len(messages),
    }
    overall = digest(
        "model-request/v1",
        model_identity,
        chain.full,
        canonical_json({key: value for key, value in components.items() if key != "message_count"}),
    )
    return RequestFingerprint(digest=overall, components=components, conversation=chain.full)


def changed_components(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Readable names of the components that differ between two fingerprints, in a stable order."""
    changes: list[str] = []
    for name, label in COMPONENT_LABELS.items():
        before, after = recorded.get(name), current.get(name)
        if before == after:
            continue
        if name == "tools" and isinstance(before, dict) and isinstance(after, dict):
            added = sorted(set(after) - set(before))
            removed = sorted(set(before) - set(after))
            edited = sorted(tool for tool in set(before) & set(after) if before[tool] != after[tool])
            details = [f"+{tool}" for tool in added] + [f"-{tool}" for tool in removed]
            details += [f"~{tool}" for tool in edited]
            changes.append(f"{label} ({', '.join(details)})")
        elif name == "history":
            count_before, count_after = recorded.get("message_count"), current.get("message_count")
            if count_before != count_after:
                changes.append(f"{label} ({count_after} messages, was {count_before})")
            else:
                changes.append(label)
        else:
            changes.append(label)
    return changes


def fingerprint_tool_call(
    *,
    tool_name: str,
    raw_arguments: Any,
    tool_call_id: str | None,
    conversation: str,
    lineage: str,
) -> str:
    """Digest of one tool call: the tool, its arguments as the model sent them, and where it happened."""
    if isinstance(raw_arguments, str):
        # The model's JSON text; parse it so that whitespace or key order does not matter.
        try:
            arguments: Any = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except ValueError:
            arguments = {"__raw__": raw_arguments}
    else:
        arguments = raw_arguments
    return digest(
        "tool-call/v1",
        tool_name,
        canonical_json(_jsonable(arguments)),
        tool_call_id or "",
        conversation,
        lineage,
    )
