"""The engine's face for side effects: tools whose calls must happen once, keys stable across tries, resumable tools.

For a DAG author (also ``from airflow_pydantic_ai import ...``):

- :func:`at_most_once`: tool metadata; a call cut off mid-run is never run again silently (``once.py``, a tool
  policy of the table in ``policies.py``);
- :func:`idempotency_key`: inside a tool, a key the same on every try for the same call (``idempotency.py``);
- :func:`tool_checkpoint`: inside a tool, values saved at once and read back by the same call on a retry
  (``checkpoint.py``: :class:`ToolCheckpoint`, and :class:`CheckpointRefused` for a value it cannot keep).

For the Airflow side (asking a person, the ``cache resolve`` command, the view): :class:`OutcomeRules`,
:class:`CallInDoubt`, :class:`Resolution` (``records.py``), :class:`AskAboutOutcome` and :class:`OutcomeUnknown` (built
with :func:`unknown_outcome_error`, ``unknown_outcome.py``); whether a call is in doubt is decided once
(``doubt.py``).

``docs/side_effects.rst`` says, for each kind of tool, what happens at each point a try can be cut off.
Names are imported on first use, as on the other faces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.faces import load_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.side_effects.checkpoint import CheckpointRefused, ToolCheckpoint, tool_checkpoint
    from airflow_pydantic_ai.durable.side_effects.idempotency import idempotency_key
    from airflow_pydantic_ai.durable.side_effects.once import at_most_once
    from airflow_pydantic_ai.durable.side_effects.records import (
        ANSWERS,
        UNKNOWN_OUTCOME_CHOICES,
        Answer,
        CallInDoubt,
        Resolution,
        StartedCall,
        UnknownOutcome,
        parse_result,
        resolution_entry,
    )
    from airflow_pydantic_ai.durable.side_effects.unknown_outcome import (
        AskAboutOutcome,
        OutcomeRules,
        OutcomeUnknown,
        unknown_outcome_error,
    )

__all__ = [
    "ANSWERS",
    "UNKNOWN_OUTCOME_CHOICES",
    "Answer",
    "AskAboutOutcome",
    "CallInDoubt",
    "CheckpointRefused",
    "OutcomeRules",
    "OutcomeUnknown",
    "Resolution",
    "StartedCall",
    "ToolCheckpoint",
    "UnknownOutcome",
    "at_most_once",
    "idempotency_key",
    "parse_result",
    "resolution_entry",
    "tool_checkpoint",
    "unknown_outcome_error",
]

_HOMES = {
    "at_most_once": "side_effects.once",
    "idempotency_key": "side_effects.idempotency",
    **dict.fromkeys(("CheckpointRefused", "ToolCheckpoint", "tool_checkpoint"), "side_effects.checkpoint"),
    **dict.fromkeys(
        (
            "ANSWERS",
            "UNKNOWN_OUTCOME_CHOICES",
            "Answer",
            "CallInDoubt",
            "Resolution",
            "StartedCall",
            "UnknownOutcome",
            "parse_result",
            "resolution_entry",
        ),
        "side_effects.records",
    ),
    **dict.fromkeys(
        ("AskAboutOutcome", "OutcomeRules", "OutcomeUnknown", "unknown_outcome_error"), "side_effects.unknown_outcome"
    ),
}


def __getattr__(name: str) -> Any:
    return load_name(globals(), name, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)
