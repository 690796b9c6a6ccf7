"""Issue 35 (6, 7): what a person reads on the approval page shows model- and user-supplied text, never renders it,
and hides a registered secret wherever it sat in a tool's arguments."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_it import MarkdownIt
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from tests.helpers.durable import DurableHarness

from airflow_pydantic_ai import _compat, at_most_once
from airflow_pydantic_ai.approval.request import PendingCall, build_outcome_request, build_request
from airflow_pydantic_ai.durable.read import CacheReader
from airflow_pydantic_ai.durable.side_effects import OutcomeRules, OutcomeUnknown

PIXEL = "![pixel](https://tracker.example/p.png)"
LINK = "[approve here](https://phish.example/)"
HOSTILE_ID = "c1` " + PIXEL + " ``" + LINK + "```"
"""A model-supplied tool call id that tries to close its code span and place an image and a link."""


def _param(default: Any, **schema: Any) -> dict[str, Any]:
    return {"value": default, **schema}


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


def _approval_body(arguments: Any, *, prompt: str = "Pay the invoice", redact: Any = _compat.redact) -> str:
    return build_request(
        [PendingCall("aaaa", "pay`" + PIXEL, HOSTILE_ID, arguments), PendingCall("bbbb", "pay", "c2", {})],
        task_label="billing.pay",
        prompt=prompt,
        redact=redact,
        reject_on_timeout=False,
        param=_param,
    ).body


def _question_body(arguments: Any) -> str:
    return build_outcome_request(
        tool="pay`" + PIXEL,
        ref="3f9a1c0b2e",
        call_id=HOSTILE_ID,
        arguments=arguments,
        started="try 1 at 2026-11-28 10:00:00 UTC",
        task_label="billing.pay",
        redact=_compat.redact,
        timeout="",
        param=_param,
    ).body


def test_only_our_own_markdown_renders_on_the_approval_page() -> None:
    """An image (a tracking pixel) or a link in the prompt, a call id, a tool name or the arguments is shown as text."""
    arguments = {"memo": "```\n" + PIXEL + "\n" + LINK, "to": "````"}
    for body in (_approval_body(arguments, prompt=f"Pay it. {PIXEL} {LINK}"), _question_body(arguments)):
        html = _html(body)
        assert "<img" not in html and "<a " not in html, html
        assert "tracker.example" in html and "phish.example" in html, "shown, as text"
        assert "<h3>" in html or "<strong>" in html, "our own Markdown still renders"


def test_a_backtick_in_a_call_id_cannot_break_out_of_its_code_span() -> None:
    html = _html(_approval_body({}))
    heading = next(line for line in html.splitlines() if line.startswith("<h3>1."))
    assert heading.count("<code>") == 3, heading  # tool, ref, call id: each one code span
    assert "c1` ![pixel](https://tracker.example/p.png)" in heading


def _nested(depth: int, leaf: Any) -> Any:
    for level in range(depth):
        leaf = {f"level{level}": leaf}
    return leaf


@pytest.fixture
def registered_secret() -> str:
    from airflow.sdk.log import mask_secret

    secret = "sk-deep-registered-7d1e9c"
    mask_secret(secret)
    return secret


def test_a_registered_secret_six_levels_deep_is_masked_in_every_text_a_person_reads(registered_secret: str) -> None:
    arguments = {"order": _nested(6, registered_secret)}
    assert registered_secret not in _approval_body(arguments)
    assert registered_secret not in _approval_body(str(arguments).replace("'", '"'))  # as JSON text
    assert registered_secret not in _question_body(arguments)
    assert registered_secret not in str(_compat.redact(_nested(9, [registered_secret])))


def test_a_deep_secret_in_an_at_most_once_calls_arguments_is_masked_in_its_start_mark_and_the_call_stays_guarded(
    harness: DurableHarness, registered_secret: str
) -> None:
    arguments = {"amount": 42, "order": _nested(6, registered_secret)}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, ToolReturnPart) for message in messages for part in message.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("charge_card", arguments, tool_call_id="c1")])

    charges: list[int] = []
    agent: Agent[Any, str] = Agent(FunctionModel(model))

    class CutOff(BaseException):
        pass

    @agent.tool_plain(metadata=at_most_once())
    def charge_card(amount: int, order: dict[str, Any]) -> str:
        charges.append(amount)
        raise CutOff

    with pytest.raises(CutOff):
        harness.run(agent, "charge it", killed=True, run_options={"redact": _compat.redact})
    [mark] = CacheReader(harness.store()).companions()
    assert mark.payload["arguments"]["amount"] == 42, "the start mark is written, with the arguments masked"
    assert not any(registered_secret in path.read_text(errors="replace") for path in harness.root.rglob("*.json"))
    with pytest.raises(OutcomeUnknown) as raised:
        harness.run(agent, "charge it", run_options={"redact": _compat.redact, "unknown_outcome": OutcomeRules("fail")})
    assert charges == [42], "the call kept its guard: not run again"
    assert registered_secret not in str(raised.value)
