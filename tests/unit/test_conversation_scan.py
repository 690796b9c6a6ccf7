"""ConversationScan (issue 37): a step reads the conversation's texts and its compactions from the messages new
since the last step, and gives what a walk over the whole conversation gives, also when history is rewritten."""

from __future__ import annotations

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from airflow_pydantic_ai.durable.keys.request_text import ConversationScan


def _walked(messages: list[ModelMessage]) -> tuple[dict[str, str], bool]:
    """The whole-conversation walk the scan replaces (request_texts before issue 37, lookup.compacted)."""
    system: list[str] = []
    prompt = instructions = ""
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    system.append(part.content)
                elif isinstance(part, UserPromptPart):
                    prompt = str(part.content)
            instructions = message.instructions or ""
    texts = {"instructions": "\n".join([*system, instructions]).strip("\n"), "user_prompt": prompt.upper()}
    texts["instructions"] = texts["instructions"].upper()
    compacted = any(isinstance(part, CompactionPart) for message in messages for part in message.parts)
    return texts, compacted


def test_scan_gives_what_the_whole_walk_gives_step_by_step() -> None:
    scan = ConversationScan()
    conversation: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Fetch.")], instructions="Use tools.")
    ]
    seen = []
    for step in range(4):
        # pydantic-ai hands each request a new list holding the same message objects, one response and request more.
        messages = list(conversation)
        seen.append((scan.texts(messages, str.upper), scan.compacted(messages)))
        assert seen[-1] == _walked(messages)
        conversation.append(ModelResponse(parts=[ToolCallPart("fetch", {"step": step}, tool_call_id=f"c{step}")]))
        conversation.append(
            ModelRequest(
                parts=[ToolReturnPart("fetch", "page", tool_call_id=f"c{step}"), UserPromptPart(f"Next {step}")],
                instructions=f"Step {step}.",
            )
        )
    assert seen[0][0]["user_prompt"] == "FETCH." and seen[-1][0]["user_prompt"] == "NEXT 2"
    assert not any(compacted for _, compacted in seen)

    # History compacted: a new conversation that does not extend the last is walked from its start.
    compacted = [ModelResponse(parts=[CompactionPart(content="summary")]), conversation[-1]]
    assert (scan.texts(compacted, str.upper), scan.compacted(compacted)) == _walked(compacted)
    assert scan.compacted(compacted)
    # A processor that reassigns a message's parts in place is seen too.
    conversation[0].parts = [UserPromptPart("Rewritten.")]
    assert (scan.texts(conversation, str.upper), scan.compacted(conversation)) == _walked(conversation)
    assert not scan.compacted(conversation)
    # A shorter conversation (a retry from an earlier point) as well.
    assert (scan.texts(conversation[:1], str.upper), scan.compacted(conversation[:1])) == _walked(conversation[:1])
    assert scan.texts([ModelResponse(parts=[TextPart("hi")])], str.upper) == {"instructions": "", "user_prompt": ""}
