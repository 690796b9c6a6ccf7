"""The key chain of one attempt: the one place where model, tool and decision keys are made.

Keys chain: each model step's key covers the key of the model step before it (its *lineage*), and
each tool call's key covers the model step that asked for it. A step that runs live because its
request changed therefore makes every later step run live too, even where a model reuses tool call
ids or gives the same answer to a changed request. An identical request (or call) made twice in one
attempt gets an occurrence index, so both are kept apart.

Guarantees: once a request cannot be fingerprinted the chain *fails closed*: no later step gets a key,
so nothing after it is looked up or recorded. Predicting which calls of a replayed answer are cached
(:meth:`KeyChain.predicted_tool_keys`) uses the same formula as the calls themselves, on a copy of
the occurrence counts, so usage-limit prediction cannot drift from lookup.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import Model

from airflow_pydantic_ai.durable.keys.fingerprint import (
    FingerprintError,
    MessageDigests,
    RequestFingerprint,
    digest,
    fingerprint_request,
    fingerprint_tool_call,
)
from airflow_pydantic_ai.durable.keys.releases import installed_release, nearest_known
from airflow_pydantic_ai.durable.keys.request_text import ConversationScan
from airflow_pydantic_ai.durable.keys.schemes import LEGACY, KeyScheme, candidates, recorded_with
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

__all__ = [
    "IDEMPOTENCY_KEY_PREFIX",
    "Fingerprinter",
    "KeyChain",
    "ModelKey",
    "checkpoint_key",
    "idempotency_key_of_call",
    "idempotency_key_of_run",
]

_MODEL_KEY = "model-step/v1"
_TOOL_KEY = "tool-step/v1"
_DECISION_KEY = "decision-step/v1"
_CHECKPOINT_KEY = "checkpoint/v1"
_IDEMPOTENCY_KEY = "idempotency-key/v1"
_UNBOUND_IDEMPOTENCY_KEY = "idempotency-key/outside-an-attempt/v1"
IDEMPOTENCY_KEY_PREFIX = "apai-"
"""What every key ``idempotency_key()`` returns starts with; 32 hex digits of a SHA-256 follow."""
_START = "start"


@dataclass
class Fingerprinter:
    """The fingerprint functions a key chain calls, with the run's message memo.

    A benchmark passes a subclass that times each call; nothing else needs to. It also holds the attempt's key
    scheme (``schemes.py``): the one its cache was recorded with, or, for a cache written before entries named
    theirs, the ones to try at the first model step (:attr:`candidates`).
    """

    digests: MessageDigests = field(default_factory=MessageDigests)
    candidates: list[KeyScheme] = field(default_factory=list)
    """Schemes to try at the attempt's first model step (empty: :attr:`scheme` is decided)."""
    known: Collection[str] = ()
    """The names of the entries the attempt may replay (what a candidate's key is looked for in)."""
    release_0_1_0: bool = False
    """The cache was written by release 0.1.0: its legacy keys keep response timestamps."""

    @property
    def scheme(self) -> KeyScheme:
        return self.digests.scheme

    def use(self, scheme: KeyScheme) -> None:
        """Key with ``scheme`` from now on (a fresh message memo: digests differ between schemes)."""
        if scheme != self.digests.scheme:
            self.digests = MessageDigests(scheme=scheme)

    def expect(self, entries: Mapping[str, StepEntry]) -> None:
        """The attempt may replay ``entries``: key as they were keyed (or try each scheme they may have been)."""
        schemes = candidates(entries.values(), release_0_1_0=self.release_0_1_0)
        self.use(schemes[0])
        self.candidates = schemes if len(schemes) > 1 else []
        self.known = entries

    def request(self, **request: Any) -> RequestFingerprint:
        return fingerprint_request(memo=self.digests, **request)

    def conversation(self, messages: Sequence[ModelMessage]) -> str:
        return self.digests.conversation(messages)

    def tool_call(self, **call: Any) -> str:
        return fingerprint_tool_call(**call)


@dataclass(frozen=True)
class ModelKey:
    """A model step's place in the chain; ``key`` is None when the step cannot be fingerprinted."""

    number: int
    label: str
    key: str | None
    components: dict[str, Any] = field(default_factory=dict)
    conversation: str = ""
    lineage: str = ""
    aliases: tuple[str, ...] = ()
    """Keys of earlier tries of this step in this attempt that raised (a fallback chain)."""
    failure: str | None = None
    """Why the request could not be fingerprinted, when that happened at this step."""
    compared: dict[str, Any] | None = None
    """The components to compare with the recorded step's, when they were keyed with another scheme than this
    attempt's (a cache written before entries named their scheme, none of whose keys matched): the components
    of the request in that scheme, so that the warning names what changed and not every component."""


@dataclass(frozen=True)
class _FailedRequest:
    conversation: str
    number: int
    lineage: str
    keys: tuple[str, ...]


@dataclass
class KeyChain:
    """Lineage, occurrence counts and fallback aliases of one attempt, and the key formulas."""

    fingerprinter: Fingerprinter = field(default_factory=Fingerprinter)
    lineage: str = _START
    model_steps: int = 0
    """Model steps so far in this attempt (a fallback's retry of a step does not count twice)."""
    failed_closed: bool = False
    """A request could not be fingerprinted: nothing after it gets a key."""
    _occurrences: Counter[str] = field(default_factory=Counter)
    _failed_request: _FailedRequest | None = None
    _scan: ConversationScan = field(default_factory=ConversationScan, repr=False)

    def compacted(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether the conversation holds a compaction (walking only the messages new since the last step)."""
        return self._scan.compacted(messages)

    def use_release_0_1_0_keys(self) -> None:
        """Key model steps as release 0.1.0 did (its caches keep response timestamps in the digest)."""
        self.fingerprinter.release_0_1_0 = True
        self.fingerprinter.use(KeyScheme(LEGACY, nearest_known(installed_release()), keep_response_timestamps=True))

    def recorded_with(self) -> dict[str, str]:
        """What an entry recorded now in this attempt says recorded it: the pydantic-ai release and key scheme."""
        return recorded_with(self.fingerprinter.scheme)

    # --- model steps ---------------------------------------------------------------------------

    def next_model_key(
        self, model: Model, messages: Sequence[ModelMessage], settings: Any, parameters: Any
    ) -> ModelKey:
        """The key of the next model request, and its place in the chain."""
        self.model_steps += 1
        number = self.model_steps
        label = f"{model.system}:{model.model_name}"
        failed, self._failed_request = self._failed_request, None
        if self.failed_closed:
            return ModelKey(number=number, label=label, key=None)
        compared: dict[str, Any] | None = None
        try:
            prepared_settings, prepared_parameters = model.prepare_request(settings, parameters)
            request = {
                "model_identity": label,
                "messages": messages,
                "settings": prepared_settings,
                "parameters": prepared_parameters,
            }
            if self.fingerprinter.candidates:
                fingerprint, compared = self._choose_scheme(request)
            else:
                fingerprint = self.fingerprinter.request(**request)
        except FingerprintError as error:
            self.failed_closed = True
            return ModelKey(number=number, label=label, key=None, failure=str(error))
        lineage = self.lineage
        aliases: tuple[str, ...] = ()
        conversation = fingerprint.conversation
        if failed is not None and failed.conversation == conversation:
            # The same conversation asked again right after a request that raised: another try of the same
            # step (a fallback model, a retrying capability). It takes that step's place in the chain, and
            # its answer is also stored under the failed requests' keys, so that a retry replays it whichever
            # model is asked first; the chain continues from the first key, whichever model answered.
            self.model_steps -= 1
            number, lineage, aliases = failed.number, failed.lineage, failed.keys
        key = self._take(_MODEL_KEY, fingerprint.digest, self._occurrences, lineage)
        self.lineage = aliases[0] if aliases else key
        return ModelKey(
            number=number,
            label=label,
            key=key,
            components=fingerprint.components,
            conversation=conversation,
            lineage=lineage,
            aliases=aliases,
            compared=compared,
        )

    def _choose_scheme(self, request: dict[str, Any]) -> tuple[RequestFingerprint, dict[str, Any] | None]:
        """The first model step of an attempt whose cache may have been keyed with several schemes: the first
        candidate whose key is in the cache is the attempt's scheme. When none is, the request is keyed with
        the current scheme (always a candidate), compared with the recording in the likeliest one."""
        fingerprinter = self.fingerprinter
        tried: list[tuple[KeyScheme, MessageDigests, RequestFingerprint]] = []
        try:
            for scheme in fingerprinter.candidates:
                fingerprinter.use(scheme)
                fingerprint = fingerprinter.request(**request)
                occurrence = self._occurrences[fingerprint.digest]
                key = digest(_MODEL_KEY, fingerprint.digest, str(occurrence), self.lineage)
                if entry_name("model", key) in fingerprinter.known:
                    return fingerprint, None
                tried.append((scheme, fingerprinter.digests, fingerprint))
        finally:
            fingerprinter.candidates = []
        current = next(index for index, (scheme, _, _) in enumerate(tried) if scheme.is_wire)
        _, memo, fingerprint = tried.pop(current)
        fingerprinter.digests = memo
        return fingerprint, tried[0][2].components if tried else None

    def model_request_failed(self, step: ModelKey) -> None:
        """The request was sent and raised: if the same conversation is asked next (a fallback), it is this step."""
        if step.key is not None:
            self._failed_request = _FailedRequest(
                step.conversation, step.number, step.lineage, (*step.aliases, step.key)
            )

    # --- tool calls and decisions --------------------------------------------------------------

    def tool_key(self, name: str, raw_arguments: Any, call_id: str | None, messages: Sequence[ModelMessage]) -> str:
        """The key of a tool (or ``"kind:name"`` output function) call; raises ``FingerprintError``."""
        base = self._tool_base(name, raw_arguments, call_id, self.fingerprinter.conversation(messages))
        return self._take(_TOOL_KEY, base, self._occurrences)

    def predicted_tool_keys(self, messages: Sequence[ModelMessage], response: ModelResponse) -> list[str]:
        """The keys the tool calls of ``response`` will have, without using up any occurrence.

        A call that cannot be fingerprinted is left out (it will run live).
        """
        calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
        if not calls:
            return []
        conversation = self.fingerprinter.conversation([*messages, response])
        occurrences = Counter(self._occurrences)
        keys: list[str] = []
        for call in calls:
            try:
                base = self._tool_base(call.tool_name, call.args, call.tool_call_id, conversation)
            except FingerprintError:
                continue
            keys.append(self._take(_TOOL_KEY, base, occurrences))
        return keys

    def decision_key(self, call: ToolCallPart, messages: Sequence[ModelMessage]) -> str:
        """The key of the decision on ``call``: the tool formula over the conversation up to the answer that
        made the call; raises ``FingerprintError``."""
        asked_at = len(messages)
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, ModelResponse) and any(
                isinstance(part, ToolCallPart) and part.tool_call_id == call.tool_call_id for part in message.parts
            ):
                asked_at = index + 1
                break
        conversation = self.fingerprinter.conversation(list(messages[:asked_at]))
        base = self._tool_base(f"decision:{call.tool_name}", call.args, call.tool_call_id, conversation)
        return self._take(_DECISION_KEY, base, self._occurrences)

    def _tool_base(self, name: str, raw_arguments: Any, call_id: str | None, conversation: str) -> str:
        return self.fingerprinter.tool_call(
            tool_name=name,
            raw_arguments=raw_arguments,
            tool_call_id=call_id,
            conversation=conversation,
            lineage=self.lineage,
        )

    @staticmethod
    def _take(namespace: str, base: str, occurrences: Counter[str], *chain: str) -> str:
        occurrence = occurrences[base]
        occurrences[base] += 1
        return digest(namespace, base, str(occurrence), *chain)


# --- the keys of a call's side effects: derived from the call's step key, never part of the chain ----------


def checkpoint_key(call_key: str, name: str) -> str:
    """The key of the checkpoint ``name`` saved by the tool call whose step key is ``call_key``."""
    return digest(_CHECKPOINT_KEY, call_key, name)


def idempotency_key_of_call(task_instance: Sequence[Any], call_key: str, scope: str) -> str:
    """The idempotency key of a call in a durable attempt: the task instance (``StepStore.owner``), the call's
    step key (the agent run's place, the conversation, the call's name, arguments and id) and ``scope``. The
    same on every try for the same call; a digest, so nothing of its inputs can be read back from it."""
    identity = json.dumps(list(task_instance), default=str, separators=(",", ":"))
    return IDEMPOTENCY_KEY_PREFIX + digest(_IDEMPOTENCY_KEY, identity, call_key, scope)[:32]


def idempotency_key_of_run(run_id: str, call_id: str, tool_name: str, scope: str, *, within: str = "") -> str:
    """The idempotency key of a call that has no step key: pydantic-ai's run id, the call's id and name, ``scope``,
    and ``within`` (in a durable attempt, whose run ids are the same on every try: the try and the model step
    whose answer asked for the call, since a model may reuse call ids from one answer to the next)."""
    return IDEMPOTENCY_KEY_PREFIX + digest(_UNBOUND_IDEMPOTENCY_KEY, run_id, call_id, tool_name, scope, within)[:32]
