"""Request and tool-call fingerprints: sensitive to content only.

That they are stable across processes: tests/system/test_fingerprint_across_processes.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition

from airflow_pydantic_ai.durable.keys.fingerprint import (
    FingerprintError,
    MessageDigests,
    changed_components,
    fingerprint_request,
    fingerprint_tool_call,
)

T1 = datetime(2026, 1, 1, tzinfo=UTC)
T2 = datetime(2026, 6, 1, tzinfo=UTC)


def conversation(prompt: str = "hello", when: datetime = T1, run_id: str = "run-1") -> list:
    return [
        ModelRequest(
            parts=[SystemPromptPart("be nice", timestamp=when), UserPromptPart(prompt, timestamp=when)],
            instructions="triage",
            timestamp=when,
            run_id=run_id,
        ),
        ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")], timestamp=when, run_id=run_id),
        ModelRequest(parts=[ToolReturnPart("lookup", "found", tool_call_id="c1", timestamp=when)], run_id=run_id),
    ]


def params(tools: tuple[str, ...] = ("lookup",), **overrides) -> ModelRequestParameters:
    return ModelRequestParameters(
        function_tools=[ToolDefinition(name=name, parameters_json_schema={"type": "object"}) for name in tools],
        **overrides,
    )


def fp(messages=None, settings=None, parameters=None, model="openai:gpt-4o"):
    return fingerprint_request(
        model_identity=model,
        messages=messages if messages is not None else conversation(),
        settings=settings,
        parameters=parameters if parameters is not None else params(),
        memo=MessageDigests(),
    )


def test_volatile_fields_do_not_change_the_fingerprint():
    assert fp(conversation(when=T1, run_id="a")).digest == fp(conversation(when=T2, run_id="b")).digest


def test_transport_settings_do_not_change_the_fingerprint():
    assert fp(settings={"temperature": 0.2}).digest == fp(settings={"temperature": 0.2, "timeout": 3}).digest


@pytest.mark.parametrize(
    ("change", "component"),
    [
        ({"messages": conversation("bye")}, "user prompt"),
        ({"settings": {"temperature": 0.9}}, "model settings"),
        ({"parameters": params(("lookup", "other"))}, "tool definitions (+other)"),
        ({"parameters": params(allow_text_output=False)}, "output schema"),
        ({"model": "openai:gpt-5"}, "model"),
    ],
)
def test_each_content_change_changes_the_fingerprint_and_is_named(change, component):
    before, after = fp(), fp(**change)
    assert before.digest != after.digest
    assert component in changed_components(before.components, after.components)


def test_history_change_is_named_with_counts():
    shorter = conversation()[:2]
    before, after = fp(), fp(messages=shorter)
    assert "message history (2 messages, was 3)" in changed_components(before.components, after.components)


def test_tool_call_fingerprint_ignores_json_whitespace_and_key_order():
    common = {"tool_name": "t", "tool_call_id": "c", "conversation": "x", "lineage": "l"}
    a = fingerprint_tool_call(raw_arguments='{"a": 1, "b": [1, 2]}', **common)
    b = fingerprint_tool_call(raw_arguments='{"b":[1,2],"a":1}', **common)
    c = fingerprint_tool_call(raw_arguments={"b": [1, 2], "a": 1}, **common)
    assert a == b == c
    assert a != fingerprint_tool_call(raw_arguments='{"a": 2, "b": [1, 2]}', **common)
    assert a != fingerprint_tool_call(raw_arguments='{"a": 1, "b": [1, 2]}', **{**common, "conversation": "y"})


def test_unserializable_settings_fail_closed():
    with pytest.raises(FingerprintError):
        fp(settings={"extra_body": object()})


def test_prefix_digests_are_reused():
    memo = MessageDigests()
    messages = conversation()
    memo.chain(messages[:2])
    computed_before = len(memo._by_id)
    memo.chain(messages)
    assert len(memo._by_id) == computed_before + 1, "only the new message was digested"


def test_response_text_in_history_matters():
    messages = conversation()
    changed = [*messages[:1], ModelResponse(parts=[TextPart("other")]), messages[2]]
    assert fp(messages).digest != fp(changed).digest


def _answered(created: datetime, **details: object) -> list:
    """The conversation after an answer stamped by the provider as OpenAI's client stamps it."""
    messages = conversation()
    answer = messages[1]
    stamped = ModelResponse(
        parts=answer.parts,
        timestamp=created,
        provider_response_id=f"chatcmpl-{created.timestamp()}",
        provider_details={"finish_reason": "tool_calls", "timestamp": created, **details},
    )
    return [messages[0], stamped, messages[2]]


def test_the_providers_creation_second_does_not_change_the_fingerprint():
    """OpenAI's ``created`` (``provider_details['timestamp']``) changes every second; an answer asked again
    that is otherwise identical must key the same steps, or its other tool calls would run twice."""
    assert fp(_answered(T1)).digest == fp(_answered(T2)).digest
    memo_a, memo_b = MessageDigests(), MessageDigests()
    assert memo_a.conversation(_answered(T1)[:2]) == memo_b.conversation(_answered(T2)[:2])
    # Other provider details can reach the provider again (a container id...): they still count.
    assert fp(_answered(T1, container_id="a")).digest != fp(_answered(T1, container_id="b")).digest


def test_caches_of_0_1_0_are_keyed_with_the_creation_second_as_they_were_written():
    legacy = MessageDigests(keep_response_timestamps=True)
    assert legacy.conversation(_answered(T1)) != MessageDigests(keep_response_timestamps=True).conversation(
        _answered(T2)
    )
