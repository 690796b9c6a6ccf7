"""The Airflow plugin that adds the "Durable cache" view to every task instance page.

A FastAPI app mounted on the api-server (:mod:`airflow_pydantic_ai.ui.app`) and an external view whose
destination is the task instance: the UI shows it as a tab and fills in the task instance's ids.
``[pydantic_ai] cache_view = False`` registers neither (the tab and every endpoint are gone).

Workers import plugins too: this module imports FastAPI and nothing heavy from Airflow.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin

from airflow_pydantic_ai.ui.app import MOUNT_PATH, create_app

__all__ = ["DurableCacheViewPlugin", "entry_point_plugin", "view_enabled"]


def view_enabled() -> bool:
    """``[pydantic_ai] cache_view`` (on unless set to False), read where every ``[pydantic_ai]`` option is."""
    from airflow_pydantic_ai.tries.settings import cache_view_enabled  # light: no pydantic-ai

    return cache_view_enabled()


def _href() -> str:
    base_path = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base_path}{MOUNT_PATH}/?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}&map_index={{MAP_INDEX}}"


def _fastapi_apps() -> list[dict[str, Any]]:
    if not view_enabled():
        return []
    return [{"app": create_app(), "url_prefix": MOUNT_PATH, "name": "Durable cache"}]


def _external_views() -> list[dict[str, Any]]:
    if not view_enabled():
        return []
    return [
        {
            "name": "Durable cache",
            "href": _href(),
            "destination": "task_instance",
            "url_route": "pydantic_ai_durable_cache",
        }
    ]


class DurableCacheViewPlugin(AirflowPlugin):
    """Registered by the provider's metadata (``plugins``) and the ``airflow.plugins`` entry point."""

    name = "pydantic_ai_durable_cache"
    fastapi_apps = _fastapi_apps()
    external_views = _external_views()


def _entry_point_plugin() -> type[DurableCacheViewPlugin] | None:
    """What the ``airflow.plugins`` entry point hands Airflow.

    Airflow reads a provider's ``plugins`` metadata only with ``[core] lazy_discover_providers = False``
    (default True), and entry points in every mode. With lazy discovery off the metadata registers the
    view, so the entry point gives Airflow nothing (not a plugin class: skipped without a word) instead
    of the same plugin twice, which Airflow would list as a plugin import error.
    """
    if conf.getboolean("core", "lazy_discover_providers", fallback=True):
        return DurableCacheViewPlugin
    return None


entry_point_plugin = _entry_point_plugin()
