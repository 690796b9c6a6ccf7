"""pydantic-ai 2.78's capability parts (a capability's mid-conversation instruction or data) in a model step's key:
what reaches the model counts, the ``record_id`` each try mints afresh (a uuid7, never sent) does not, so the steps
after such a part replay on a retry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from tests.helpers.compat import requires_pydantic_ai

from airflow_pydantic_ai.durable.keys.fingerprint import MessageDigests, fingerprint_request
from airflow_pydantic_ai.durable.keys.schemes import KeyScheme

pytestmark = requires_pydantic_ai("2.78", "capability parts")


def _reminder(content: str) -> Any:
    from pydantic_ai.messages import InstructionCapabilityPart, OperatorSource

    @dataclass
    class Reminder(InstructionCapabilityPart, namespace="airflow_tests", name="reminder"):  # type: ignore[call-arg]
        pass

    return Reminder(source=OperatorSource(), content=content)


def _key(content: str) -> str:
    messages = [ModelRequest(parts=[UserPromptPart("go"), _reminder(content)])]
    return fingerprint_request(
        model_identity="function:f",
        messages=messages,
        settings=None,
        parameters=ModelRequestParameters(),
        memo=MessageDigests(scheme=KeyScheme()),
    ).digest


def test_a_capability_parts_record_id_is_not_keyed_its_content_is() -> None:
    # Each call builds the part again, as each try does: a new record_id (and timestamp) every time.
    assert _key("be brief") == _key("be brief")
    assert _key("be brief") != _key("be thorough")
