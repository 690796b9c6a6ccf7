"""Turn a ``pydantic_ai`` Airflow connection into a pydantic-ai :class:`~pydantic_ai.models.Model`.

A connection holds what a model needs that should not live in DAG code: the API key
(``password``), an optional base URL (``host``), and in its ``extra`` JSON the model id
(``model``, e.g. ``"openai:gpt-4o"``), keyword arguments for the pydantic-ai provider
(``provider_options``), default model settings (``model_settings``) and connections to fail over to
(``fallback_conn_ids``).

Connections of type ``pydanticai`` (the generic type of ``apache-airflow-providers-common-ai``) keep
their key, base URL, model and fallback list in the same places and are read the same way, so a DAG
that names one in ``llm_conn_id`` runs unchanged here. common.ai's vendor types
(``pydanticai_azure``, ``pydanticai_bedrock``, ``pydanticai_vertex``) store credentials in extras
this hook does not read; they are refused with the equivalent ``pydantic_ai`` connection to create.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_pydantic_ai import _compat

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from pydantic_ai.models import Model
    from pydantic_ai.providers import Provider

__all__ = ["PydanticAIHook"]

# The parameter under which each provider takes its base URL, in order of preference; most call it
# ``base_url``, LiteLLM ``api_base``, Azure ``azure_endpoint``.
_BASE_URL_PARAMETERS = ("base_url", "api_base", "azure_endpoint")
_MODEL_EXAMPLE = "openai:gpt-4o"
# Connection types whose fields mean what ``pydantic_ai``'s mean: ours, and common.ai's generic type.
_READABLE_CONN_TYPES = ("pydantic_ai", "pydanticai")
# common.ai's vendor connection types keep credentials in extras of their own (region, project...).
_VENDOR_TYPE_PREFIX = "pydanticai_"
_MODELS_DOC = "https://ai.pydantic.dev/models/overview/"


@dataclass(frozen=True)
class _ConnectionSettings:
    """What a ``pydantic_ai`` connection says about the model to build, read and type-checked."""

    conn_id: str
    model_id: str | None
    api_key: str | None
    base_url: str | None
    provider_options: dict[str, Any] = field(default_factory=dict)
    model_settings: dict[str, Any] | None = None
    fallback_conn_ids: tuple[str, ...] = ()


class PydanticAIHook(BaseHook):
    """Build pydantic-ai models from an Airflow connection of type ``pydantic_ai``.

    Connection fields:

    * ``password``: the API key, passed to the provider as ``api_key``. When empty the provider
      falls back to its own environment variable (e.g. ``OPENAI_API_KEY``).
    * ``host``: an optional base URL (e.g. ``http://localhost:11434/v1`` for a local
      OpenAI-compatible server), passed as ``base_url`` (``api_base`` for LiteLLM,
      ``azure_endpoint`` for Azure).
    * ``extra``: a JSON object with ``model`` (a pydantic-ai model id, ``provider:model``),
      optionally ``provider_options`` (more keyword arguments for the provider class),
      ``model_settings`` (default :class:`~pydantic_ai.settings.ModelSettings` of the model) and
      ``fallback_conn_ids`` (connections to fail over to, in order, when the model's API fails).

    Connections of type ``pydanticai`` (common.ai's) are read the same way.

    :param llm_conn_id: The id of the ``pydantic_ai`` connection to use.
    """

    conn_name_attr = "llm_conn_id"
    default_conn_name = "pydantic_ai_default"
    conn_type = "pydantic_ai"
    hook_name = "Pydantic AI"

    def __init__(self, llm_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.llm_conn_id = llm_conn_id

    @cached_property
    def connection(self) -> Connection:
        """The Airflow connection named by ``llm_conn_id`` (looked up once per hook)."""
        return self.get_connection(self.llm_conn_id)

    def get_conn(self) -> Model:
        """Return the connection's model; the same as :meth:`get_model` without arguments."""
        return self.get_model()

    def get_model(self, model_id: str | None = None) -> Model:
        """Build the pydantic-ai model this connection describes.

        No request is sent: building a model only creates its provider and client.

        :param model_id: A pydantic-ai model id (``provider:model``, or ``test`` for
            :class:`~pydantic_ai.models.test.TestModel`) that overrides the connection's ``model``.
        :return: The model, with the connection's ``model_settings`` as its default settings; with
            ``fallback_conn_ids``, a :class:`~pydantic_ai.models.fallback.FallbackModel` that tries
            this model first, then each fallback connection's own model in order.
        :raises ValueError: If no model id is given anywhere, the provider is unknown, the
            connection sets an option the provider does not take, or the fallback list is invalid.
        :raises ImportError: If the provider needs a package that is not installed.
        """
        settings = _read_connection(self.connection)
        resolved_id = _resolve_model_id(model_id, settings)
        self.log.debug("Building model %r from connection %r", resolved_id, settings.conn_id)
        model = _build_model(resolved_id, settings)
        if not settings.fallback_conn_ids:
            return model
        from pydantic_ai.models.fallback import FallbackModel

        fallbacks = [self._fallback_model(conn_id, settings) for conn_id in settings.fallback_conn_ids]
        return FallbackModel(model, *fallbacks)

    def _fallback_model(self, conn_id: str, primary: _ConnectionSettings) -> Model:
        """The model of one fallback connection: its own model id, key and URL; no chain of its own."""
        settings = _read_connection(self.get_connection(conn_id))
        if settings.fallback_conn_ids:
            raise ValueError(
                f"Fallback connection {conn_id!r} of {primary.conn_id!r} has its own 'fallback_conn_ids'; "
                f"chains are not followed. List every connection in {primary.conn_id!r}'s 'fallback_conn_ids'."
            )
        if not settings.model_id:
            raise ValueError(
                f'Fallback connection {conn_id!r} of {primary.conn_id!r} names no model; set "model" in its '
                f'extra (e.g. {{"model": "{_MODEL_EXAMPLE}"}}).'
            )
        return _build_model(settings.model_id, settings)

    def test_connection(self) -> tuple[bool, str]:
        """Check that the connection builds a model, without sending a request to it.

        This catches a missing or misspelled model id, an unknown provider, options the provider
        does not take and a missing provider package. It cannot check that the API key is valid.

        :return: ``(True, description of the model)`` or ``(False, what is wrong)``.
        """
        try:
            model = self.get_model()
        except Exception as error:
            return False, str(error)
        return True, (
            f"Connection {self.llm_conn_id!r} builds {type(model).__name__} {model.model_name!r} "
            f"(system {model.system!r}); no request was sent."
        )

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Return the extra fields of the connection form (read by Airflow before 3.2).

        Airflow 3.2 and later read the same fields from the ``conn-fields`` entry of the provider
        metadata instead and never call this method.
        """
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        widgets: dict[str, Any] = {}
        for name, spec in _connection_type_metadata()["conn-fields"].items():
            widgets[name] = StringField(
                lazy_gettext(spec["label"]),
                widget=BS3TextFieldWidget(),
                description=spec.get("description", ""),
            )
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Return how the connection form shows the standard fields (read by Airflow before 3.2).

        Airflow 3.2 and later read the ``ui-field-behaviour`` entry of the provider metadata, from
        which this is derived.
        """
        behaviour = _connection_type_metadata()["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }


def _connection_type_metadata() -> dict[str, Any]:
    """The ``pydantic_ai`` entry of the provider metadata, the single source of the form layout."""
    from airflow_pydantic_ai.get_provider_info import get_provider_info

    for entry in get_provider_info()["connection-types"]:
        if entry["connection-type"] == PydanticAIHook.conn_type:
            return entry
    raise LookupError(f"get_provider_info() lists no connection type {PydanticAIHook.conn_type!r}")


def _read_connection(conn: Connection) -> _ConnectionSettings:
    """Read the connection's fields and check the types of its extras."""
    conn_id = conn.conn_id
    _check_conn_type(conn)
    extra = conn.extra_dejson

    def extra_value(key: str) -> Any:
        # Older connection forms stored custom fields as ``extra__<conn_type>__<name>``.
        value = extra.get(key)
        for conn_type in _READABLE_CONN_TYPES:
            if value is None:
                value = extra.get(f"extra__{conn_type}__{key}")
        return value

    def optional_mapping(key: str) -> dict[str, Any] | None:
        value = extra_value(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError(
                f"Connection {conn_id!r}: extra {key!r} must be a JSON object, got {type(value).__name__} {value!r}."
            )
        return dict(value)

    model_id = extra_value("model")
    if model_id is not None and not isinstance(model_id, str):
        raise ValueError(
            f"Connection {conn_id!r}: extra 'model' must be a string such as {_MODEL_EXAMPLE!r}, got {model_id!r}."
        )
    base_url = (conn.host or "").strip() or None
    if base_url is not None and "://" not in base_url:
        raise ValueError(
            f"Connection {conn_id!r}: the Base URL (host) {base_url!r} has no scheme; write it in full, "
            "e.g. 'https://api.example.com/v1' or 'http://localhost:11434/v1'."
        )
    return _ConnectionSettings(
        conn_id=conn_id,
        model_id=(model_id or "").strip() or None,
        api_key=conn.password or None,
        base_url=base_url,
        provider_options=optional_mapping("provider_options") or {},
        model_settings=optional_mapping("model_settings"),
        fallback_conn_ids=_fallback_conn_ids(conn_id, extra_value("fallback_conn_ids")),
    )


def _check_conn_type(conn: Connection) -> None:
    """Refuse common.ai's vendor connection types: their credentials live in extras read nowhere here."""
    conn_type = conn.conn_type or ""
    if conn_type.startswith(_VENDOR_TYPE_PREFIX):
        vendor = conn_type.removeprefix(_VENDOR_TYPE_PREFIX)
        raise ValueError(
            f"Connection {conn.conn_id!r} has type {conn_type!r} (apache-airflow-providers-common-ai's {vendor} "
            "connection), whose credentials this provider does not read. Create a 'pydantic_ai' (or common.ai "
            f"'pydanticai') connection instead, with the model id prefixed by its provider (e.g. '{vendor}:...') "
            "and the provider's other arguments in extra 'provider_options'."
        )


def _fallback_conn_ids(conn_id: str, value: Any) -> tuple[str, ...]:
    """The fallback connection ids: a list of strings, blanks dropped, each once, never the connection itself."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"Connection {conn_id!r}: extra 'fallback_conn_ids' must be a JSON list of connection ids, "
            f'e.g. ["backup_llm"], got {value!r}.'
        )
    ids = tuple(stripped for item in value if (stripped := item.strip()))
    if conn_id in ids:
        raise ValueError(f"Connection {conn_id!r} lists itself in extra 'fallback_conn_ids'; remove it.")
    repeated = sorted({item for item in ids if ids.count(item) > 1})
    if repeated:
        raise ValueError(
            f"Connection {conn_id!r}: extra 'fallback_conn_ids' lists {', '.join(repeated)} more than once; keep one."
        )
    return ids


def _resolve_model_id(model_id: str | None, settings: _ConnectionSettings) -> str:
    """The explicit model id, else the connection's; an error that names both places otherwise."""
    resolved = (model_id or "").strip() or settings.model_id
    if not resolved:
        raise ValueError(
            f"No model for connection {settings.conn_id!r}: pass model_id (e.g. model_id={_MODEL_EXAMPLE!r}) "
            f'or set "model" in the connection\'s extra (e.g. {{"model": "{_MODEL_EXAMPLE}"}}).'
        )
    return resolved


def _build_model(model_id: str, settings: _ConnectionSettings) -> Model:
    """Build ``model_id`` with a provider configured from the connection."""
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model, parse_model_id
    from pydantic_ai.settings import merge_model_settings

    if model_id == "test":
        # TestModel talks to no provider; the connection's key and URL do not apply.
        model = infer_model(model_id)
    else:
        provider_name, _ = parse_model_id(model_id)
        if not provider_name:
            raise ValueError(
                f"Model id {model_id!r} (connection {settings.conn_id!r}) names no provider; write it as "
                f"provider:model, e.g. {_MODEL_EXAMPLE!r}, or use 'test' for TestModel. See {_MODELS_DOC}"
            )
        provider_factory = _provider_factory(model_id, provider_name, settings)
        try:
            model = infer_model(model_id, provider_factory=lambda _name: provider_factory())
        except UserError as error:
            raise ValueError(
                f"Cannot build model {model_id!r} from connection {settings.conn_id!r}: {error}"
            ) from error

    if settings.model_settings:
        _compat.set_model_settings(model, merge_model_settings(model.settings, settings.model_settings))  # type: ignore[arg-type]
    return model


def _provider_factory(model_id: str, provider_name: str, settings: _ConnectionSettings) -> Callable[[], Provider[Any]]:
    """Check that the provider exists and takes the connection's options; return its constructor."""
    from pydantic_ai.providers import infer_provider_class

    try:
        provider_class = infer_provider_class(provider_name)
    except ValueError:
        raise ValueError(
            f"Unknown pydantic-ai provider {provider_name!r} in model id {model_id!r} "
            f"(connection {settings.conn_id!r}). The part before ':' names the provider, e.g. 'openai', "
            f"'openai-chat' (any OpenAI-compatible server), 'anthropic', 'google', 'ollama'. See {_MODELS_DOC}"
        ) from None
    except ImportError as error:
        raise ImportError(
            f"Model {model_id!r} (connection {settings.conn_id!r}) needs a package that is not installed: {error}"
        ) from error

    target: Callable[..., Provider[Any]]
    if provider_name.startswith("gateway/"):
        # Gateway providers are built by a function that routes to the upstream provider class.
        from functools import partial

        from pydantic_ai.providers.gateway import gateway_provider

        target = partial(gateway_provider, provider_name.removeprefix("gateway/"))
    else:
        target = provider_class
    kwargs = _provider_kwargs(target, provider_name, settings)
    return lambda: target(**kwargs)


def _provider_kwargs(target: Callable[..., Any], provider_name: str, settings: _ConnectionSettings) -> dict[str, Any]:
    """The keyword arguments for the provider, each checked against what it accepts."""
    parameters = inspect.signature(target).parameters.values()
    accepted = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    described = f"Provider {provider_name!r} (connection {settings.conn_id!r})"

    kwargs: dict[str, Any] = {}
    if settings.api_key is not None:
        if "api_key" not in accepted and not takes_any:
            raise ValueError(
                f"{described} takes no API key; clear the API key (password) field of the connection "
                "and configure the provider's credentials as its documentation describes."
            )
        kwargs["api_key"] = settings.api_key
    if settings.base_url is not None:
        name = next((n for n in _BASE_URL_PARAMETERS if n in accepted), "base_url" if takes_any else None)
        if name is None:
            raise ValueError(
                f"{described} takes no base URL; clear the Base URL (host) field of the connection, or use "
                "'openai-chat:<model>' for an OpenAI-compatible server at that URL."
            )
        kwargs[name] = settings.base_url

    for key, value in settings.provider_options.items():
        if key in kwargs:
            raise ValueError(
                f"{described} sets {key!r} twice: in a connection field and in extra 'provider_options'; keep one."
            )
        if key not in accepted and not takes_any:
            raise ValueError(
                f"{described}: extra 'provider_options' has {key!r}, which the provider does not take. "
                f"It takes: {', '.join(sorted(accepted)) or 'nothing'}."
            )
        kwargs[key] = value
    return kwargs
