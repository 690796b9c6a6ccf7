"""Deleting a task instance's whole cache (:meth:`StepStore.clear`), and the check that no deletion follows a
link out of the cache root (:meth:`StepStore.refuse_links`). The store's own code, split out of ``store.py`` by
concern: only the store calls it. Every object goes through ``StepStore._remove_objects`` (one by one on local
disks, batched on object stores), which the fault tests interrupt.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_pydantic_ai.durable.errors import OutsideCacheBase
from airflow_pydantic_ai.durable.storage.entry import RESULT_ENTRY, is_entry_name
from airflow_pydantic_ai.durable.storage.pack_names import is_pack_name
from airflow_pydantic_ai.durable.storage.surveying import Holdings

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["clear", "refuse_links"]


def _written_here(path: str) -> bool:
    """A note or temporary file the store wrote ("." names), as a file or a link (never a folder)."""
    name = os.path.basename(path)
    return name.startswith(".") and name not in (".", "..") and (os.path.islink(path) or os.path.isfile(path))


def clear(store: StepStore, newest_first: Sequence[str] = ()) -> None:
    """Delete the whole prefix (and, on local disks, the parent folders it leaves empty).

    Packs go first, then the single entries (those named in ``newest_first`` in that order, then the
    others), then ``RESULT_ENTRY``, then whatever is left (notes, temporary files). On local disks one
    by one; on object stores in two batched requests (packs and steps, then the result entry with the
    rest). A deletion cut short therefore leaves the result entry, or nothing that was not there before.
    """
    listed = {str(path).rsplit("/", 1)[-1] for path in store.fresh_listing(detail=False)}
    ordered = sorted(name for name in listed if is_pack_name(name))
    ordered += [name for name in newest_first if name in listed and name != RESULT_ENTRY]
    known = set(ordered)
    ordered += sorted(name for name in listed if is_entry_name(name) and name not in known and name != RESULT_ENTRY)
    store.held = Holdings()
    if not store.is_local:
        rest = sorted(listed - set(ordered) - {RESULT_ENTRY})
        store._remove_objects(ordered)
        store._remove_objects([RESULT_ENTRY, *rest] if RESULT_ENTRY in listed else rest)
        return
    if RESULT_ENTRY in listed:
        ordered.append(RESULT_ENTRY)
    refuse_links(store)
    store._remove_objects(ordered)
    # Then the notes and temporary files it wrote (names starting with "."), file by file: never a folder,
    # never through a link (unlinking a link removes the link), never a name the store does not write.
    store._remove_objects(sorted(name for name in listed - set(ordered) if _written_here(f"{store.root}/{name}")))
    try:
        os.rmdir(store.root)
    except FileNotFoundError:
        return
    except OSError:  # something the store never wrote is left: it stays, and so does the folder
        store.warn(f"Durable: kept {store.location}: it holds files the cache never wrote")
        return
    if store.is_local:
        parent = os.path.dirname(store.root)
        for _ in range(3):  # task_id, run_id, dag_id folders; never the configured base itself
            try:
                os.rmdir(parent)
            except OSError:
                break
            parent = os.path.dirname(parent)


def refuse_links(store: StepStore) -> None:
    """Before deleting on a local disk: the cache's folder and the three above it (task, run, dag; never the
    configured base) must be real folders, so that no deletion follows a link out of the cache root (the whole
    cache in ``clear``, steps from N on in ``CacheReader.delete_from``). Object stores have no links."""
    if not store.is_local:
        return
    folder = store.root
    for _ in range(4):
        if os.path.islink(folder):
            raise OutsideCacheBase(
                f"the durable cache folder {folder} is a symbolic link (to {os.readlink(folder)}), and deleting "
                "a cache never follows a link out of the cache root; nothing was deleted: remove the link (or "
                "replace it with the folder it points to), then delete the cache again"
            )
        folder = os.path.dirname(folder)
