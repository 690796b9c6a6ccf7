"""The "Durable cache" view's app in this process, called as a signed-in admin (dags tier)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from airflow_pydantic_ai.durable import TaskIdentity

__all__ = ["view_client", "view_query"]


def view_client() -> Any:
    """FastAPI's test client on the view's app; the caller is an admin of Airflow's simple auth manager
    (given through FastAPI's dependency override), and Airflow's auth manager decides as it does."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from airflow_pydantic_ai.ui import app as view_app

    app = view_app.create_app()
    app.dependency_overrides[view_app._user] = lambda: SimpleAuthManagerUser(username="admin", role="admin")
    return TestClient(app)


def view_query(identity: TaskIdentity) -> str:
    """The query string of the view's pages for one task instance."""
    return urlencode(
        {
            "dag_id": identity.dag_id,
            "run_id": identity.run_id,
            "task_id": identity.task_id,
            "map_index": identity.map_index,
        }
    )
