"""What the ``airflow`` CLI (a process of its own) makes of the provider: providers list, config, plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distribution, distributions
from pathlib import Path
from typing import Any

from tests.helpers.airflow_cli import AIRFLOW_BIN

PACKAGE = "airflow-pydantic-ai"


def _airflow_cli(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(AIRFLOW_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_airflow_providers_list_shows_the_provider() -> None:
    stdout = _airflow_cli("providers", "list", "--output", "json")

    # Unit-test mode logs a line to stdout before the JSON document.
    document = stdout[stdout.index("[{") :]
    providers = {p["package_name"]: p for p in json.loads(document)}
    assert providers[PACKAGE]["version"] == distribution(PACKAGE).version


def test_airflow_config_get_value_uses_provider_default_and_env_override() -> None:
    env_name = "AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS"
    clean_env = {k: v for k, v in os.environ.items() if k != env_name}

    default = subprocess.run(
        [str(AIRFLOW_BIN), "config", "get-value", "pydantic_ai", "durable_storage_errors"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env,
    )
    overridden = _airflow_cli("config", "get-value", "pydantic_ai", "durable_storage_errors", env={env_name: "fail"})

    assert default.returncode == 0, default.stderr
    assert default.stdout.strip().splitlines()[-1] == "warn"
    assert overridden.strip().splitlines()[-1] == "fail"


def _plugins_json(extra_env: dict[str, str]) -> list[dict[str, Any]]:
    env = {**os.environ, **extra_env}
    result = subprocess.run(
        [str(AIRFLOW_BIN), "plugins", "--output", "json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Registered once in every mode: never reported as a duplicate (a plugin import error in the UI).
    assert "already registered" not in result.stdout + result.stderr
    # Warnings may be logged to stdout before the JSON document.
    document = result.stdout[result.stdout.index("[{") :]
    plugins = json.JSONDecoder().raw_decode(document)[0]
    return [plugin for plugin in plugins if plugin["name"] == "pydantic_ai_durable_cache"]


def _plugin_import_errors(extra_env: dict[str, str]) -> dict[str, str]:
    """What the api-server's ``/api/v2/plugins/importErrors`` (the Home page's banner) would list."""
    # Airflow 3.2+ has get_import_errors(); 3.1 keeps the dict as a module attribute, filled on loading.
    script = (
        "import json; from airflow import plugins_manager as m\n"
        "if hasattr(m, 'get_import_errors'):\n    errors = m.get_import_errors()\n"
        "else:\n    m.ensure_plugins_loaded(); errors = m.import_errors\n"
        "print(json.dumps(errors))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **extra_env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent,  # not the checkout's root: only what is installed is on the path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_installed_provider_is_one_distribution_and_no_plugin_import_error() -> None:
    # A setuptools build left src/airflow_pydantic_ai.egg-info beside the editable install's metadata;
    # the path hook made it a second distribution and Airflow loaded the plugin entry point twice.
    copies = [
        str(dist._path)  # type: ignore[attr-defined]
        for dist in distributions()
        if dist.metadata["Name"] and dist.metadata["Name"].lower().replace("_", "-") == PACKAGE
    ]
    assert len(copies) == 1, f"{PACKAGE} is installed {len(copies)} times: {copies} (delete the stale ones)"
    for lazy in ("True", "False"):
        errors = _plugin_import_errors({"AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": lazy})
        assert errors == {}, f"lazy_discover_providers={lazy}: {errors}"


def test_the_cache_view_plugin_is_loaded_with_its_task_instance_tab_and_can_be_turned_off() -> None:
    # Airflow 3.3 finds it through the airflow.plugins entry point (the browser tests run that default)
    # and, with lazy provider discovery off, through the provider's "plugins" metadata too: still one plugin.
    [plugin] = _plugins_json({"AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "True"})
    assert plugin["external_views"][0]["destination"] == "task_instance"
    [plugin] = _plugins_json({"AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": "False"})
    [view] = plugin["external_views"]
    assert view["destination"] == "task_instance"
    assert view["href"].startswith("/pydantic-ai/cache/?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}")
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/pydantic-ai/cache"]

    [plugin] = _plugins_json({"AIRFLOW__PYDANTIC_AI__CACHE_VIEW": "False"})
    assert plugin["external_views"] == [] and plugin["fastapi_apps"] == []
