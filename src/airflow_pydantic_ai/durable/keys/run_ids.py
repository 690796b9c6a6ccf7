"""The ``run_id`` and ``conversation_id`` an agent run of a durable attempt gets on every try.

pydantic-ai gives each run a fresh UUID7 unless a capability supplies a replay-stable one
(``get_default_run_id``), as its Temporal, DBOS and Prefect engines do from the workflow. A durable task's
equivalent of the workflow is the task instance (its cache's owner: dag, run, task, map index and, inside an
Airflow 3.4 loop, the region and iteration) and the agent run's scope within the attempt (``nesting.py``):
the same inputs on a retry give the same ids, so a tool or capability keyed by ``ctx.run_id`` or
``ctx.conversation_id`` sees the same values.

The ids are never part of a step's key (``message_digests.py`` drops them from every message), so caches
recorded with random ids replay unchanged. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

from airflow_pydantic_ai.durable.keys.canonical import canonical_json

__all__ = ["stable_conversation_id", "stable_run_id"]

_NAMESPACE = "airflow-pydantic-ai/run-id/v1"


def stable_run_id(owner: Sequence[Any], parent: str, index: int, continuation: int = 0) -> str:
    """The ``run_id`` of the agent run at ``(parent, index)`` of the task instance ``owner``'s attempts.

    :param owner: The task instance's identity as its cache stores it (``TaskIdentity.owner()``).
    :param parent: The key of the step that started the run (``nesting.TOP`` at the attempt's top level).
    :param index: The run's index among the runs ``parent`` started.
    :param continuation: How many times the run stopped for approval and went on before this part of it (each
        continuation is an agent run of its own to pydantic-ai, which refuses a ``run_id`` already in the
        history it continues from).

    A UUID version 8 (RFC 9562's custom layout, its SHA-256 example): the first 128 bits of the SHA-256 of the
    canonical JSON of the inputs, with the version and variant bits set.
    """
    payload = canonical_json([_NAMESPACE, list(owner), parent, index, continuation])
    value = int.from_bytes(hashlib.sha256(payload.encode()).digest()[:16], "big")
    value &= ~(0xF << 76)  # version: bits 48-51 from the left
    value |= 0x8 << 76
    value &= ~(0x3 << 62)  # variant: bits 64-65, RFC 9562's "10"
    value |= 0x2 << 62
    return str(uuid.UUID(int=value))


def stable_conversation_id(run_id: str) -> str:
    """The ``conversation_id`` of a run that has none to inherit: pydantic-ai's own derivation from its ``run_id``
    (a UUID5), as its durable engines return it, so it is stable whenever the ``run_id`` is."""
    from pydantic_ai.durable_exec import conversation_id_from_run_id  # public since 2.62; imports the agent

    return conversation_id_from_run_id(run_id)
