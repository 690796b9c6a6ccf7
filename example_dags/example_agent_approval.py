"""
An agent that asks a person before it "sends" an e-mail: no API key needed (a FunctionModel plays the LLM).

``announce_release`` runs a durable agent whose ``send_email`` tool needs approval
(``requires_approval=True``). The model asks to send the e-mail; the task records that step, writes a
human-in-the-loop request (the tool, its arguments with secrets masked, the prompt) and waits on the
task's **Required Actions** page without holding a worker (``awaiting_input`` on Airflow 3.3, deferred
on 3.1/3.2). Approve it and the task resumes: the recorded model step replays (no second model
request), the e-mail is "sent" once, and the model writes its report. Reject it with a reason and the
model reads the reason instead of the tool's result.

``airflow dags test example_agent_approval`` waits until someone answers, in the UI or through the
REST API of an api-server that shares the metadata database (``PATCH
/api/v2/dags/example_agent_approval/dagRuns/{run_id}/taskInstances/announce_release/-1/hitlDetails``
with ``{"chosen_options": ["Approve all"]}``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow.sdk import DAG
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from airflow_pydantic_ai.operators.agent import AgentOperator

log = logging.getLogger("example_agent_approval.tools")


def _release_writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for an LLM: asks to send the announcement, then reports what the tool answered."""
    answers = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not answers:
        call = ToolCallPart(
            "send_email",
            {"to": "team@example.com", "subject": "Release 1.2 is out", "body": "Highlights: faster retries."},
            tool_call_id="announce-1",
        )
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(f"Announcement: {answers[-1]}")])


# [START howto_agent_approval]
mailer = Agent(FunctionModel(_release_writer), name="release_mailer")


@mailer.tool_plain(requires_approval=True)
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail (here: only logged)."""
    log.info("send_email to=%s subject=%s", to, subject)
    return f"sent to {to}"


with DAG(
    dag_id="example_agent_approval",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "pydantic-ai"],
):
    AgentOperator(
        task_id="announce_release",
        prompt="Announce release 1.2 to the team.",
        agent=mailer,
        durable=True,
        approval_timeout=timedelta(hours=4),
        on_approval_timeout="reject",
    )
# [END howto_agent_approval]
