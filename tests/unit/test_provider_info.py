"""Provider metadata: provider.yaml, get_provider_info(), and what Airflow makes of them in this process.

What the ``airflow`` CLI makes of them: tests/system/test_provider_cli.py.
"""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.helpers.compat import (
    skip_strict_provider_schema_before_3_2,
    skip_without_connection_form_metadata,
    task_runtime_providers_manager,
)

from airflow_pydantic_ai.get_provider_info import get_provider_info

PACKAGE = "airflow-pydantic-ai"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _airflow_schema(name: str) -> dict[str, Any]:
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text())


@pytest.fixture(scope="module")
def provider_yaml() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "provider.yaml").read_text())


def test_get_provider_info_equals_provider_yaml(provider_yaml: dict[str, Any]) -> None:
    assert get_provider_info() == provider_yaml


def test_get_provider_info_returns_a_fresh_dict_each_call() -> None:
    # Airflow adds "documentation-url" to the dict it receives; that must not leak into later calls.
    first = get_provider_info()
    first["documentation-url"] = "x"
    first["config"]["pydantic_ai"]["options"].clear()

    second = get_provider_info()

    assert "documentation-url" not in second
    assert "durable_cache_path" in second["config"]["pydantic_ai"]["options"]


def test_provider_info_validates_against_airflows_runtime_schema() -> None:
    jsonschema.validate(get_provider_info(), _airflow_schema("provider_info.schema.json"))


def test_provider_yaml_validates_against_airflows_strict_schema(provider_yaml: dict[str, Any]) -> None:
    # The schema Airflow's own providers are held to: no unknown top-level keys, integrations with
    # external-doc-url and tags from a fixed list, hooks/operators that name their integration.
    skip_strict_provider_schema_before_3_2()
    jsonschema.validate(provider_yaml, _airflow_schema("provider.yaml.schema.json"))


def test_package_name_matches_the_distribution() -> None:
    # Airflow refuses the provider (and `airflow providers list` crashes) when these differ.
    assert get_provider_info()["package-name"] == distribution(PACKAGE).metadata["Name"]


def test_versions_lists_the_distribution_version_first() -> None:
    assert get_provider_info()["versions"][0] == distribution(PACKAGE).version


def test_entry_point_resolves_to_get_provider_info() -> None:
    [entry_point] = [ep for ep in distribution(PACKAGE).entry_points if ep.group == "apache_airflow_provider"]

    assert entry_point.load() is get_provider_info


OPTIONS = {
    "cache_view",
    "durable_cache_path",
    "durable_mode",
    "durable_storage_errors",
    "durable_storage_timeout",
    "durable_max_entry_bytes",
    "durable_encrypt",
    "on_clear",
    "durable_budget_across_tries",
    "durable_cache_shared",
    "durable_on_unknown_outcome",
}
"""The [pydantic_ai] options, as get_provider_info() declares them and Airflow's ProvidersManager registers them."""


def test_every_config_option_has_what_airflow_requires() -> None:
    options = get_provider_info()["config"]["pydantic_ai"]["options"]

    assert set(options) == OPTIONS
    for name, option in options.items():
        missing = {"description", "version_added", "type", "example", "default"} - set(option)
        assert not missing, f"{name} lacks {missing}"
    assert options["durable_cache_path"]["default"] == ""
    assert options["durable_storage_errors"]["default"] == "warn"
    assert float(options["durable_storage_timeout"]["default"]) == 60
    assert options["on_clear"]["default"] == "resume"
    assert options["durable_budget_across_tries"]["default"] == "False"
    assert options["durable_cache_shared"]["default"] == "False"
    assert options["durable_on_unknown_outcome"]["default"] == "ask"


def test_providers_manager_registers_the_provider_and_its_config() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()

    assert manager.providers[PACKAGE].version == distribution(PACKAGE).version
    configs = dict(manager.provider_configs)
    assert set(configs[PACKAGE]["pydantic_ai"]["options"]) == OPTIONS
    skip_without_connection_form_metadata()
    assert manager.field_behaviours["pydantic_ai"]["relabeling"] == {"host": "Base URL", "password": "API key"}


def test_task_runtime_registers_the_hook_and_the_agent_decorator() -> None:
    # Airflow 3.2+ serves hooks and task decorators from the task SDK's providers manager, 3.1 from core's.
    from airflow.sdk import task

    manager = task_runtime_providers_manager()

    hook_info = manager.hooks["pydantic_ai"]
    assert hook_info is not None
    assert hook_info.hook_class_name == "airflow_pydantic_ai.hooks.pydantic_ai.PydanticAIHook"
    assert hook_info.connection_id_attribute_name == "llm_conn_id"
    assert hook_info.hook_name == "Pydantic AI"
    assert hook_info.connection_testable
    from airflow_pydantic_ai.decorators.agent import agent_task

    # A name of its own: common.ai registers @task.agent, and with both installed one would silently win.
    assert manager.taskflow_decorators["pydantic_ai"] is agent_task
    assert task.pydantic_ai is agent_task
    assert manager.taskflow_decorators.get("agent") is not agent_task


def test_task_pydantic_ai_builds_our_operator() -> None:
    from airflow.sdk import DAG, task

    from airflow_pydantic_ai.operators.agent import AgentOperator

    with DAG(dag_id="decorator_name_dag", schedule=None):

        @task.pydantic_ai(model_id="test", durable=True)
        def ask() -> str:
            return "hello"

        built = ask()

    operator = built.operator
    assert isinstance(operator, AgentOperator)
    assert operator.durable is True
    assert operator.custom_operator_name == "@task.pydantic_ai"


def test_connection_form_metadata_reaches_the_ui_api() -> None:
    skip_without_connection_form_metadata()
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    [meta] = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "pydantic_ai"]

    assert meta.hook_name == "Pydantic AI"
    assert meta.standard_fields is not None
    assert meta.standard_fields.host is not None
    assert meta.standard_fields.host.title == "Base URL"
    assert meta.standard_fields.password is not None
    assert meta.standard_fields.password.title == "API key"
    for hidden in ("url_schema", "port", "login"):
        behaviour = getattr(meta.standard_fields, hidden)
        assert behaviour is not None and behaviour.hidden, hidden
    assert meta.extra_fields is not None
    assert meta.extra_fields["model"]["schema"]["title"] == "Model"


def test_provider_config_defaults_are_readable_through_airflow_conf(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.configuration import conf

    monkeypatch.delenv("AIRFLOW__PYDANTIC_AI__DURABLE_STORAGE_ERRORS", raising=False)
    monkeypatch.delenv("AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH", raising=False)

    assert conf.get("pydantic_ai", "durable_storage_errors") == "warn"
    assert conf.get("pydantic_ai", "durable_cache_path") == ""
    assert conf.getfloat("pydantic_ai", "durable_storage_timeout") == 60.0


def test_durable_max_entry_bytes_is_read_once_with_the_settings(monkeypatch):
    from airflow_pydantic_ai.durable.errors import DurableConfigError
    from airflow_pydantic_ai.tries.settings import _max_entry_bytes

    assert _max_entry_bytes() == 16 * 1024 * 1024
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_MAX_ENTRY_BYTES", "1048576")
    assert _max_entry_bytes() == 1024 * 1024
    monkeypatch.setenv("AIRFLOW__PYDANTIC_AI__DURABLE_MAX_ENTRY_BYTES", "0")
    with pytest.raises(DurableConfigError, match="durable_max_entry_bytes must be a positive number of bytes"):
        _max_entry_bytes()
