"""Issue 34 item 1: a key covers what the provider receives (``model-request/v2``).

A field that never reaches a provider does not count, and a field at its default value never counts, so a
pydantic-ai release that adds a field (at its default) cannot change a key. The component diff is unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from airflow_pydantic_ai.durable.keys.fingerprint import MessageDigests, changed_components, fingerprint_request
from airflow_pydantic_ai.durable.keys.schemes import LEGACY, WIRE, KeyScheme

T1 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"ticket_id": {"type": "integer"}}}


def tool(**overrides: object) -> ToolDefinition:
    return dataclasses.replace(
        ToolDefinition(name="fetch_ticket", description="Fetch a ticket.", parameters_json_schema=SCHEMA), **overrides
    )


def conversation(metadata: object = None) -> list:
    return [
        ModelRequest(parts=[UserPromptPart("triage", timestamp=T1)], instructions="Triage.", run_id="r"),
        ModelResponse(parts=[ToolCallPart("fetch_ticket", {"ticket_id": 1}, tool_call_id="c1")], run_id="r"),
        ModelRequest(
            parts=[ToolReturnPart("fetch_ticket", "ok", tool_call_id="c1", timestamp=T1, metadata=metadata)],
            run_id="r",
        ),
    ]


def key(parameters: ModelRequestParameters, messages: list | None = None, scheme: KeyScheme | None = None):
    return fingerprint_request(
        model_identity="openai:gpt-4o",
        messages=messages if messages is not None else conversation(),
        settings=None,
        parameters=parameters,
        memo=MessageDigests(scheme=scheme or KeyScheme()),
    )


def request(*tools: ToolDefinition, **overrides: object) -> ModelRequestParameters:
    return ModelRequestParameters(function_tools=list(tools), **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "local",
    [
        {"kind": "external"},
        {"sequential": True},
        {"metadata": {"team": "support"}},
        {"timeout": 3.0},
        {"outer_typed_dict_key": "response"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_tool_field_no_provider_receives_does_not_change_the_key(local: dict[str, object]) -> None:
    assert key(request(tool(**local))).digest == key(request(tool())).digest


def test_a_field_a_release_adds_at_its_default_does_not_change_the_key() -> None:
    @dataclass(repr=False, kw_only=True)
    class NewerToolDefinition(ToolDefinition):
        shiny: bool = False

    @dataclass(repr=False, kw_only=True)
    class NewerParameters(ModelRequestParameters):
        catalog: list[str] = dataclasses.field(default_factory=list)

    newer = NewerToolDefinition(name="fetch_ticket", description="Fetch a ticket.", parameters_json_schema=SCHEMA)
    plain, upgraded = key(request(tool())), key(NewerParameters(function_tools=[newer]))

    assert upgraded.digest == plain.digest
    # ... and once the release sets it, the request changed: the key says so, and names the tool.
    changed = key(NewerParameters(function_tools=[dataclasses.replace(newer, shiny=True)]))
    assert changed.digest != plain.digest
    assert changed_components(plain.components, changed.components) == ["tool definitions (~fetch_ticket)"]


def test_what_the_provider_receives_still_changes_the_key() -> None:
    plain = key(request(tool()))
    for change in ({"description": "Another."}, {"strict": True}, {"parameters_json_schema": {"type": "object"}}):
        edited = key(request(tool(**change)))
        assert edited.digest != plain.digest, change
        assert changed_components(plain.components, edited.components) == ["tool definitions (~fetch_ticket)"]


def test_a_tool_return_metadata_is_never_sent_so_never_keyed() -> None:
    assert key(request(tool()), conversation({"rows": 3})).digest == key(request(tool())).digest


def test_the_legacy_scheme_still_digests_every_field() -> None:
    """What model-request/v1 did (and must keep doing, for the caches it keyed)."""
    legacy = KeyScheme(LEGACY, "2.68")
    assert key(request(tool(sequential=True)), scheme=legacy).digest != key(request(tool()), scheme=legacy).digest
    assert key(request(tool()), scheme=legacy).digest != key(request(tool())).digest
    assert KeyScheme().name == WIRE
