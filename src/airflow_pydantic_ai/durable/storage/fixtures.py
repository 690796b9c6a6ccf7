"""Test fixtures: a task's recorded steps as one readable JSON file that any DAG run of that task can replay.

Layout: a fixture folder holds one DAG's tasks, one file each: ``{folder}/{task_id}.json`` (a mapped task
instance: ``{task_id}.{map_index}.json``, ids encoded as in the cache prefix). A file is indented JSON:
``format``, ``version``, ``dag_id``, ``task_id``, ``map_index`` and the ``steps`` in recorded order, each
with its kind, key, metadata (a nested agent run's ``scope`` too), component digests and payload.

Guarantees: a fixture holds no run id, no owner, no write time and no checksum, so it replays under
any run of the same DAG and task and a refresh of an unchanged agent rewrites it byte for byte; every
string in it goes through the caller's secrets masker before it is written; a file is written whole
(temporary file and rename) or not at all; a file that is not a fixture of this DAG and task is a
:class:`FixtureError` naming it, never a replay. The ``result`` entry (a task's output) is never kept:
a replay rebuilds the output from the steps. Knows nothing of pydantic-ai.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_pydantic_ai.durable.errors import FixtureError
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.identity import TaskIdentity, id_segment

__all__ = ["FIXTURE_FORMAT", "Fixture", "FixtureError", "fixture_path", "read_fixture", "write_fixture"]

FIXTURE_FORMAT = "airflow-pydantic-ai/fixture"
FIXTURE_VERSION = 1
_STEP_FIELDS = (
    "kind",
    "key",
    "step",
    "attempt",
    "label",
    "role",
    "call_id",
    "scope",
    "recorded_with",
    "usage",
    "components",
    "payload",
)
_OPTIONAL_FIELDS = ("scope", "recorded_with")
"""Written only when set, so that a fixture recorded without them stays as it was."""


def _written(entry: StepEntry, name: str) -> bool:
    return name not in _OPTIONAL_FIELDS or bool(getattr(entry, name))


@dataclass(frozen=True)
class Fixture:
    """The steps of one task's fixture, by entry name, as the attempt looks them up."""

    path: Path
    entries: dict[str, StepEntry]


def _folder(folder: str | os.PathLike[str]) -> Path:
    text = os.fspath(folder)
    if text.startswith("file://"):
        text = text[len("file://") :]
    return Path(text)


def fixture_path(folder: str | os.PathLike[str], task_id: str, map_index: int = -1) -> Path:
    """The file of task ``task_id`` (map index ``map_index``) in fixture folder ``folder``."""
    name = id_segment(task_id) if map_index == -1 else f"{id_segment(task_id)}.{map_index}"
    return _folder(folder) / f"{name}.json"


def _masked(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return str(mask(value))
    if isinstance(value, dict):
        return {key: _masked(item, mask) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, mask) for item in value]
    return value


def write_fixture(
    folder: str | os.PathLike[str],
    identity: TaskIdentity,
    entries: Iterable[StepEntry],
    *,
    mask: Callable[[str], str] = str,
) -> Path:
    """Write ``entries`` (in recorded order) as the fixture of ``identity``'s task; returns the file."""
    steps = [
        _masked(
            {
                name: getattr(entry, name)
                for name in _STEP_FIELDS
                if name not in _OPTIONAL_FIELDS or getattr(entry, name)
            },
            mask,
        )
        for entry in entries
        if entry.is_step
    ]
    body = {
        "format": FIXTURE_FORMAT,
        "version": FIXTURE_VERSION,
        "dag_id": identity.dag_id,
        "task_id": identity.task_id,
        "map_index": identity.map_index,
        "steps": steps,
    }
    path = fixture_path(folder, identity.task_id, identity.map_index)
    path.parent.mkdir(parents=True, exist_ok=True)  # committed with the tests: not private like a cache
    data = (json.dumps(body, indent=1, ensure_ascii=False) + "\n").encode()
    handle, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)  # a fixture is committed and read by CI: not private like a cache entry
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


def read_fixture(folder: str | os.PathLike[str], dag_id: str, task_id: str, map_index: int = -1) -> Fixture:
    """The steps of task ``task_id``'s fixture in ``folder``; :class:`FixtureError` when there is none usable."""
    path = fixture_path(folder, task_id, map_index)
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise FixtureError(
            f"no fixture for task {task_id!r} at {path} (record one: pytest --durable-record, or "
            "airflow pydantic-ai cache export)"
        ) from None
    except (OSError, ValueError) as error:
        raise FixtureError(f"the fixture {path} cannot be read: {error}") from None
    if not isinstance(body, dict) or body.get("format") != FIXTURE_FORMAT:
        raise FixtureError(f"{path} is not an airflow-pydantic-ai fixture")
    if body.get("version") != FIXTURE_VERSION:
        raise FixtureError(f"{path} has fixture version {body.get('version')!r}, this release reads {FIXTURE_VERSION}")
    found = (body.get("dag_id"), body.get("task_id"), body.get("map_index"))
    if found != (dag_id, task_id, map_index):
        raise FixtureError(f"{path} was recorded for {found!r}, not for {(dag_id, task_id, map_index)!r}")
    entries: dict[str, StepEntry] = {}
    try:
        for step in body["steps"]:
            entry = StepEntry(
                kind=step["kind"],
                key=str(step["key"]),
                step=int(step["step"]),
                attempt=int(step["attempt"]),
                label=str(step["label"]),
                role=step.get("role"),
                call_id=step.get("call_id"),
                scope=None if step.get("scope") is None else dict(step["scope"]),
                recorded_with=None if step.get("recorded_with") is None else dict(step["recorded_with"]),
                usage=dict(step.get("usage") or {}),
                components=dict(step.get("components") or {}),
                payload=dict(step["payload"]),
            )
            entries[entry.name] = entry
    except (KeyError, TypeError, ValueError) as error:
        raise FixtureError(f"{path}: a step is missing a field or malformed ({error})") from None
    return Fixture(path=path, entries=entries)
