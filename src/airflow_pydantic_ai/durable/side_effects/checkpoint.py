"""Resumable tools: values a tool call saves while it runs, read back by the same call on a later try.

A tool that starts something long (a job submitted to a cluster, an upload in parts, a report requested
from an API) saves what it needs to reconnect (``tool_checkpoint().save("job_id", job_id)``) as soon as it
has it. If the try is cut off while the tool waits, the retry replays the steps before the call, runs the
same call again, and ``tool_checkpoint().get("job_id")`` gives the id back: the tool reconnects instead of
submitting again.

Each name is one ``checkpoint`` entry under the call's key (``checkpoint-{digest(call key, name)}.json``, a
companion of the call: no step number), written at once through the attempt's writer: the same codec as tool
results (type-exact), the secrets check, encryption, the storage-errors policy. Saving a name again replaces
it (the newest copy wins on load). A failed try's pack carries checkpoints; the cache deleted after success
deletes them with everything else. Outside a durable attempt (a test, a notebook, an agent without
``DurableCapability``) the values live in memory for the call, so the same tool code runs there unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from airflow_pydantic_ai.durable.encoding.allowed_types import UNDECLARED, AllowedTypes
from airflow_pydantic_ai.durable.encoding.codec import UnsupportedValue, decode_value, encode_value
from airflow_pydantic_ai.durable.errors import DurableError
from airflow_pydantic_ai.durable.keys.chain import checkpoint_key
from airflow_pydantic_ai.durable.side_effects.in_flight import CallInFlight, current_call
from airflow_pydantic_ai.durable.storage.entry import StepEntry, entry_name

__all__ = ["CheckpointRefused", "ToolCheckpoint", "tool_checkpoint"]

_CHECKPOINT: Final = "checkpoint"
_SAVE_INSTEAD = (
    "save what the tool needs to reconnect instead: an id, a URL, a dict of plain values (str, int, float, "
    "bool, None, lists and dicts of them), a dataclass or a pydantic model of those"
)


class CheckpointRefused(DurableError, ValueError):
    """``tool_checkpoint().save`` was given a value it cannot keep: one that does not come back identical from
    its stored form, or one holding a value registered as secret. Nothing was saved; the message says what to
    save instead."""


@dataclass
class ToolCheckpoint:
    """The checkpoints of one tool call: :meth:`save` a value under a name as soon as the tool has it, and
    :meth:`get` it back on a later try of the same call. Get one with :func:`tool_checkpoint`."""

    call: CallInFlight | None = None
    """The call the values belong to (None: called outside any tool call; the values live in this object)."""
    _unbound: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)

    @property
    def _saved(self) -> dict[str, dict[str, Any]]:
        return self.call.checkpoints if self.call is not None else self._unbound

    @property
    def _allowed(self) -> AllowedTypes:
        return self.call.allowed if self.call is not None else UNDECLARED

    @property
    def _shown(self) -> str:
        if self.call is None:
            return "outside a tool call"
        call_id = f" (call {self.call.call_id})" if self.call.call_id else ""
        return f"tool {self.call.tool_name}{call_id}"

    def get(self, name: str, default: Any = None) -> Any:
        """The value saved under ``name`` by this call, in this try or an earlier one (an earlier try's copy as it
        was saved, type for type); ``default`` when there is none."""
        encoded = self._saved.get(name)
        if encoded is not None:
            return decode_value(encoded, self._allowed)
        entry = self._recorded(name)
        if entry is None:
            return default
        run = self.call.run if self.call is not None else None
        assert run is not None
        try:
            if entry.payload.get("name") != name:
                raise ValueError(f"it holds checkpoint {entry.payload.get('name')!r}, not {name!r}")
            value = decode_value(entry.payload["value"], self._allowed)
        except Exception as error:  # a damaged checkpoint: the tool starts that part over
            run.attempt.entry_unusable(entry, error, f"checkpoint {name!r} of {self._shown} counts as not saved")
            return default
        run.attempt.log.info(
            "Durable: %s resumes from checkpoint %r, saved by try %d", self._shown, name, entry.attempt
        )
        return value

    def save(self, name: str, value: Any) -> bool:
        """Save ``value`` under ``name`` now, replacing what was saved under it before.

        Returns True once it is stored in the cache (a later try of this call gets it back), False when it is kept
        for this try only: outside a durable attempt, for a call that has no key, or when the store could not
        take it (the log says why, at ERROR; a try that dies now starts this part over). With
        ``durable_storage_errors = "fail"`` a store that fails raises ``DurableStorageError`` instead.

        Raises :class:`CheckpointRefused` (nothing saved) when ``value`` does not come back identical from JSON,
        or holds a value registered as secret: a resumable tool must not lose its checkpoint without knowing.
        """
        try:
            encoded = encode_value(value, self._allowed)
        except UnsupportedValue as error:
            raise CheckpointRefused(
                f"tool_checkpoint().save({name!r}, ...) in {self._shown}: {error}; {_SAVE_INSTEAD}"
            ) from None
        call = self.call
        run = call.run if call is not None else None
        key = call.key if call is not None else None
        if call is None or run is None or key is None:
            self._saved[name] = encoded
            return False
        payload = {"tool": call.tool_name, "call": key, "name": name, "value": encoded}
        if run.attempt.holds_secret(payload):
            raise CheckpointRefused(
                f"tool_checkpoint().save({name!r}, ...) in {self._shown}: it holds a value registered as secret, "
                "and checkpoints are stored in the cache; save a reference instead (a connection id, a variable "
                "or secret's name) and read the secret again when the tool resumes"
            )
        self._saved[name] = encoded
        entry = StepEntry(
            kind=_CHECKPOINT,
            key=checkpoint_key(key, name),
            step=call.answer_number,
            attempt=run.attempt.try_number,
            label=call.tool_name,
            payload=payload,
            call_id=call.call_id,
            role=_CHECKPOINT,
            recorded_at=time.time(),
            scope=run.entry_scope,
        )
        if run.attempt.record(entry, f"checkpoint {name!r} of {self._shown}"):
            run.attempt.log.debug("Durable: saved checkpoint %r of %s", name, self._shown)
            return True
        run.attempt.log.warning(
            "Durable: checkpoint %r of %s is kept for this try only (see above): if the try is cut off now, the "
            "call starts over on a retry",
            name,
            self._shown,
        )
        return False

    def _recorded(self, name: str) -> StepEntry | None:
        """The entry an earlier try saved ``name`` in, if the attempt loaded one."""
        call = self.call
        if call is None or call.run is None or call.key is None:
            return None
        return call.run.attempt.entries.get(entry_name(_CHECKPOINT, checkpoint_key(call.key, name)))


def tool_checkpoint() -> ToolCheckpoint:
    """The checkpoints of the tool call running now: ``.save(name, value)`` as soon as the tool has something
    it needs to resume (a job id), ``.get(name, default=None)`` to find it on a later try of the same call.

    ``tool_checkpoint().save("job_id", job_id)`` is stored at once in the task's durable cache (encrypted when
    the cache is), keyed by the call: a retry that runs the same call again reads it back with
    ``tool_checkpoint().get("job_id")``, and any other call starts empty. Values are stored as tool results are
    (type-exact JSON, no pickle); one that cannot be, or that holds a value registered as secret, is refused
    with :class:`CheckpointRefused`. Checkpoints go with the cache when the task succeeds.

    Outside a durable attempt (a test, a notebook, an agent without ``DurableCapability``) the values are kept
    in memory for the call. Called outside any tool call it returns a checkpoint of its own, in memory, that no
    later call sees.
    """
    return ToolCheckpoint(current_call())
