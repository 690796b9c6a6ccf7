"""PydanticAIHook: from a ``pydantic_ai`` connection to a pydantic-ai model.

A real client against a local OpenAI-compatible server: tests/system/test_hook_http.py.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.models.test import TestModel
from tests.helpers.connections import (
    CONN_ID,
    no_provider_env,  # noqa: F401 - an autouse fixture: imported, it applies here
    set_common_ai_connection,
    set_connection,
)

from airflow_pydantic_ai.get_provider_info import get_provider_info
from airflow_pydantic_ai.hooks.pydantic_ai import PydanticAIHook

# --- building models -------------------------------------------------------------------------


def test_extra_model_test_gives_test_model(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "test"})

    assert isinstance(PydanticAIHook(llm_conn_id=CONN_ID).get_model(), TestModel)


def test_openai_compatible_model_gets_base_url_and_api_key_from_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_connection(
        monkeypatch,
        host="http://llm.internal:8000/v1",
        password="sk-from-connection",
        extra={"model": "openai-chat:my-model"},
    )

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "my-model"
    assert str(model.client.base_url) == "http://llm.internal:8000/v1/"
    assert model.client.api_key == "sk-from-connection"


def test_openai_prefix_gives_the_responses_model_with_connection_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pydantic-ai maps 'openai:' to the Responses API; 'openai-chat:' is Chat Completions.
    set_connection(monkeypatch, host="https://gw.example.com/v1", password="sk-1", extra={"model": "openai:my-model"})

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert isinstance(model, OpenAIResponsesModel)
    assert str(model.client.base_url) == "https://gw.example.com/v1/"
    assert model.client.api_key == "sk-1"


def test_model_id_argument_overrides_the_connection_model(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, password="sk-1", extra={"model": "test"})

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model("openai-chat:other-model")

    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "other-model"


def test_default_connection_id_is_pydantic_ai_default(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, conn_id="pydantic_ai_default", extra={"model": "test"})

    hook = PydanticAIHook()

    assert hook.llm_conn_id == "pydantic_ai_default"
    assert isinstance(hook.get_model(), TestModel)


def test_model_settings_from_extra_become_the_model_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "test", "model_settings": {"temperature": 0.2, "max_tokens": 50}})

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert model.settings == {"temperature": 0.2, "max_tokens": 50}


def test_provider_options_reach_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(
        monkeypatch,
        password="sk-1",
        extra={"model": "openai-chat:m", "provider_options": {"base_url": "http://opts.example/v9"}},
    )

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert isinstance(model, OpenAIChatModel)
    assert str(model.client.base_url) == "http://opts.example/v9/"


def test_custom_field_saved_with_legacy_prefix_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"extra__pydantic_ai__model": "test"})

    assert isinstance(PydanticAIHook(llm_conn_id=CONN_ID).get_model(), TestModel)


@pytest.mark.parametrize(
    ("uri", "base_url", "api_key"),
    [
        (
            "pydantic-ai://https://:sk-abc@api.example.com%2Fv1/?model=openai-chat%3Amy-model",
            "https://api.example.com/v1/",
            "sk-abc",
        ),
        (
            "pydantic-ai://http://localhost%3A11434%2Fv1/?model=openai-chat%3Amy-model",
            "http://localhost:11434/v1/",
            "api-key-not-set",  # pydantic-ai's placeholder for keyless local servers
        ),
    ],
)
def test_uri_forms_from_the_docs_build_the_model(
    monkeypatch: pytest.MonkeyPatch, uri: str, base_url: str, api_key: str
) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", uri)

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "my-model"
    assert str(model.client.base_url) == base_url
    assert model.client.api_key == api_key


# --- errors that say what to fix ---------------------------------------------------------------


def test_missing_model_names_model_id_and_the_extra_model(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, password="sk-1")

    with pytest.raises(ValueError, match="model_id") as raised:
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    message = str(raised.value)
    assert CONN_ID in message
    assert "extra" in message
    assert '"model"' in message


def test_unknown_provider_is_named_with_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "openaj:gpt-4o"})

    with pytest.raises(ValueError, match=r"Unknown pydantic-ai provider 'openaj'") as raised:
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert "openai-chat" in str(raised.value)


def test_model_id_without_provider_prefix_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "gpt-4o"})

    with pytest.raises(ValueError, match="provider:model"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


def test_base_url_for_a_provider_without_one_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    # DeepSeekProvider takes an API key, and on 2.62-2.68 no base URL: the Base URL field is refused. 2.78 gives
    # every provider of an OpenAI-compatible API a base_url: there it reaches the client. (The refusal stays
    # tested on the 2.62 and 2.68 matrix sessions.)
    import inspect

    from pydantic_ai.providers.deepseek import DeepSeekProvider

    set_connection(monkeypatch, host="http://x.example/v1", password="sk-1", extra={"model": "deepseek:chat"})
    if "base_url" in inspect.signature(DeepSeekProvider).parameters:
        model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()
        assert isinstance(model, OpenAIChatModel)
        assert str(model.client.base_url) == "http://x.example/v1/"
        return
    with pytest.raises(ValueError, match=r"takes no base URL.*Base URL \(host\)"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


def test_unknown_provider_option_lists_what_the_provider_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, password="sk-1", extra={"model": "openai-chat:m", "provider_options": {"region": "x"}})

    with pytest.raises(ValueError, match=r"'region'.*It takes: api_key, base_url"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


def test_option_set_in_field_and_provider_options_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, password="sk-1", extra={"model": "openai-chat:m", "provider_options": {"api_key": "k"}})

    with pytest.raises(ValueError, match="'api_key' twice"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


def test_base_url_without_scheme_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, host="localhost:8000/v1", extra={"model": "openai-chat:m"})

    with pytest.raises(ValueError, match="has no scheme"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


def test_model_settings_must_be_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "test", "model_settings": "temperature=0"})

    with pytest.raises(ValueError, match="extra 'model_settings' must be a JSON object"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


# --- test_connection and the connection form --------------------------------------------------


def test_test_connection_reports_the_model_it_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, password="sk-1", extra={"model": "openai-chat:my-model"})

    ok, message = PydanticAIHook(llm_conn_id=CONN_ID).test_connection()

    assert ok, message
    assert "OpenAIChatModel 'my-model'" in message


def test_test_connection_reports_a_missing_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    set_connection(monkeypatch, extra={"model": "openai-chat:my-model"})

    ok, message = PydanticAIHook(llm_conn_id=CONN_ID).test_connection()

    assert not ok
    assert "OPENAI_API_KEY" in message


def test_ui_field_behaviour_matches_the_provider_metadata() -> None:
    behaviour = PydanticAIHook.get_ui_field_behaviour()

    assert behaviour["hidden_fields"] == ["schema", "port", "login"]
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "API key"}
    [metadata] = get_provider_info()["connection-types"]
    assert behaviour["placeholders"] == metadata["ui-field-behaviour"]["placeholders"]


@dataclass
class _RecordedField:
    label: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def test_connection_form_widgets_offer_the_model_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flask-AppBuilder and WTForms are not installed with Airflow 3; stand-ins record the calls.
    wtforms = types.ModuleType("wtforms")
    wtforms.StringField = lambda label, **kwargs: _RecordedField(label, kwargs)  # type: ignore[attr-defined]
    babel = types.ModuleType("flask_babel")
    babel.lazy_gettext = lambda text: text  # type: ignore[attr-defined]
    fieldwidgets = types.ModuleType("flask_appbuilder.fieldwidgets")
    fieldwidgets.BS3TextFieldWidget = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wtforms", wtforms)
    monkeypatch.setitem(sys.modules, "flask_babel", babel)
    monkeypatch.setitem(sys.modules, "flask_appbuilder", types.ModuleType("flask_appbuilder"))
    monkeypatch.setitem(sys.modules, "flask_appbuilder.fieldwidgets", fieldwidgets)

    widgets = PydanticAIHook.get_connection_form_widgets()

    assert list(widgets) == ["model"]
    assert widgets["model"].label == "Model"
    assert "openai:gpt-4o" in widgets["model"].kwargs["description"]


# --- connections of common.ai's type (pydanticai) ----------------------------------------------


def test_common_ai_connection_without_fallbacks_builds_the_plain_model(monkeypatch: pytest.MonkeyPatch) -> None:
    set_common_ai_connection(
        monkeypatch, CONN_ID, host="http://llm.internal:8000/v1", password="sk-1", extra={"model": "openai-chat:m"}
    )

    model = PydanticAIHook(llm_conn_id=CONN_ID).get_model()

    assert isinstance(model, OpenAIChatModel)
    assert str(model.client.base_url) == "http://llm.internal:8000/v1/"
    assert model.client.api_key == "sk-1"


def test_common_ai_model_field_saved_with_its_legacy_prefix_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    set_common_ai_connection(monkeypatch, CONN_ID, extra={"extra__pydanticai__model": "test"})

    assert isinstance(PydanticAIHook(llm_conn_id=CONN_ID).get_model(), TestModel)


def test_common_ai_vendor_connection_type_is_refused_with_the_connection_to_create(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "pydanticai_bedrock", "extra": {"model": "bedrock:m", "region_name": "eu-west-1"}}),
    )

    with pytest.raises(ValueError, match=r"'pydanticai_bedrock'.*'pydantic_ai'.*provider_options"):
        PydanticAIHook(llm_conn_id=CONN_ID).get_model()


@pytest.mark.parametrize(
    ("primary_extra", "backup_extra", "message"),
    [
        ({"fallback_conn_ids": "backup_llm"}, {"model": "test"}, "must be a JSON list of connection ids"),
        ({"fallback_conn_ids": ["primary_llm"]}, {"model": "test"}, "lists itself"),
        ({"fallback_conn_ids": ["backup_llm", "backup_llm"]}, {"model": "test"}, "more than once"),
        ({"fallback_conn_ids": ["backup_llm"]}, {}, "'backup_llm' of 'primary_llm' names no model"),
        (
            {"fallback_conn_ids": ["backup_llm"]},
            {"model": "test", "fallback_conn_ids": ["other"]},
            "chains are not followed",
        ),
    ],
)
def test_invalid_fallback_chain_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, primary_extra: dict[str, Any], backup_extra: dict[str, Any], message: str
) -> None:
    set_common_ai_connection(monkeypatch, "primary_llm", extra={"model": "test", **primary_extra})
    set_common_ai_connection(monkeypatch, "backup_llm", extra=backup_extra)

    with pytest.raises(ValueError, match=message):
        PydanticAIHook(llm_conn_id="primary_llm").get_model()
