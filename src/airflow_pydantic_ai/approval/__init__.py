"""Asking a person in a durable agent run, through Airflow's human-in-the-loop machinery: the approval of tool
calls, and what happened to a call whose outcome is unknown (``on_unknown_outcome='ask'``).

Rooms: :mod:`.request` (what a person is asked), :mod:`.answer` (reading the answer into decisions or a
resolution), :mod:`.wait` (the version gate: park on Airflow 3.3+, defer on 3.1/3.2), :mod:`.flow` (one round:
ask, then record the answer). The durable side (decisions recorded like steps, the run that stops and
goes on) lives in :mod:`airflow_pydantic_ai.durable.interception.approvals` and
:mod:`airflow_pydantic_ai.durable.steps.decision`.
"""

from __future__ import annotations

from airflow_pydantic_ai.approval.answer import ApprovalTimedOut
from airflow_pydantic_ai.approval.flow import ApprovalSettings, Resume, ask, ask_about_outcome, record_answer
from airflow_pydantic_ai.approval.request import APPROVE_ALL, DECIDE_PER_CALL, REASON_FIELD, REJECT_ALL, call_field
from airflow_pydantic_ai.approval.wait import RESUME_METHOD

__all__ = [
    "APPROVE_ALL",
    "DECIDE_PER_CALL",
    "REASON_FIELD",
    "REJECT_ALL",
    "RESUME_METHOD",
    "ApprovalSettings",
    "ApprovalTimedOut",
    "Resume",
    "ask",
    "ask_about_outcome",
    "call_field",
    "record_answer",
]
