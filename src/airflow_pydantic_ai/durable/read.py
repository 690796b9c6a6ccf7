"""The read side's face: what the ``cache`` and ``fixture`` commands, the UI view and the pytest plugin use to
find, read, price and copy a task instance's cache, without opening an attempt.

The names are imported on first use, and none of the read side's own imports pydantic-ai
(``airflow pydantic-ai cache list`` stays light); :func:`marked_calls` loads it only for a cache that holds the
start mark of an ``at_most_once()`` call, to read the answers about it as a retry does. The engine's main face,
``airflow_pydantic_ai.durable``, is for running attempts; the errors are in ``durable/errors.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai.durable.faces import load_name

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.keys.releases import installed_release
    from airflow_pydantic_ai.durable.keys.schemes import recorded_release
    from airflow_pydantic_ai.durable.side_effects.marked_calls import MarkedCall, marked_calls
    from airflow_pydantic_ai.durable.storage.catalog import CacheSummary, list_caches
    from airflow_pydantic_ai.durable.storage.entry import StepEntry
    from airflow_pydantic_ai.durable.storage.fixtures import read_fixture, write_fixture
    from airflow_pydantic_ai.durable.storage.identity import id_segment, is_shortened, parse_place
    from airflow_pydantic_ai.durable.storage.notes import AttemptRecord, latest_attempt
    from airflow_pydantic_ai.durable.storage.reader import CacheReader, StepDetail, StepInfo
    from airflow_pydantic_ai.durable.storage.step_costs import StepCost, replay_total
    from airflow_pydantic_ai.durable.wording import plural

__all__ = [
    "AttemptRecord",
    "CacheReader",
    "CacheSummary",
    "MarkedCall",
    "StepCost",
    "StepDetail",
    "StepEntry",
    "StepInfo",
    "id_segment",
    "installed_release",
    "is_shortened",
    "latest_attempt",
    "list_caches",
    "marked_calls",
    "parse_place",
    "plural",
    "read_fixture",
    "recorded_release",
    "replay_total",
    "write_fixture",
]

_HOMES = {
    "AttemptRecord": "storage.notes",
    "CacheReader": "storage.reader",
    "CacheSummary": "storage.catalog",
    "MarkedCall": "side_effects.marked_calls",
    "StepCost": "storage.step_costs",
    "StepDetail": "storage.reader",
    "StepEntry": "storage.entry",
    "StepInfo": "storage.reader",
    "id_segment": "storage.identity",
    "installed_release": "keys.releases",
    "is_shortened": "storage.identity",
    "latest_attempt": "storage.notes",
    "list_caches": "storage.catalog",
    "marked_calls": "side_effects.marked_calls",
    "parse_place": "storage.identity",
    "plural": "wording",
    "read_fixture": "storage.fixtures",
    "recorded_release": "keys.schemes",
    "replay_total": "storage.step_costs",
    "write_fixture": "storage.fixtures",
}


# Names this face listed before it was held to 20 (issue 37): users' code keeps importing them from here. Not part
# of the face: the report's XCom key is ``DurableReport.xcom_key``, a step's formatted cost ``StepCost.price``.
_LISTED_BEFORE = {
    "REPORT_SCHEMA_VERSION": "reporting.report",
    "REPORT_XCOM_KEY": "reporting.report",
    "format_usd": "storage.step_costs",
}


def __getattr__(name: str) -> Any:
    return load_name(globals(), name, {**_LISTED_BEFORE, **_HOMES})


def __dir__() -> list[str]:
    return sorted(__all__)
