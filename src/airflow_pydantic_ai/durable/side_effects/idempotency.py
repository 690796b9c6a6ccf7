"""Idempotency keys: inside a tool, a key that is the same on every try for the same call.

A service that deduplicates by key (an ``Idempotency-Key`` header, a unique column written with ``INSERT ... ON
CONFLICT DO NOTHING``, a message id) then applies a call's side effect once, however many tries run the call:
a retry after the worker died mid-call, a call an at-most-once tool runs again after a person said so. The
formulas are in ``keys/chain.py``.
"""

from __future__ import annotations

import uuid

from airflow_pydantic_ai.durable.keys.chain import (
    IDEMPOTENCY_KEY_PREFIX,
    idempotency_key_of_call,
    idempotency_key_of_run,
)
from airflow_pydantic_ai.durable.side_effects.in_flight import current_call

__all__ = ["idempotency_key"]


def idempotency_key(scope: str = "") -> str:
    """A key for the side effect of the tool call running now: the same on every try for the same call.

    Call it inside a tool (plain or with a context, sync or async; a delegate agent's tool too) and send it
    with the side effect: ``headers={"Idempotency-Key": idempotency_key()}``, a unique column, a message id.
    In a durable task it is derived from the task instance (DAG, run, task, map index, loop iteration) and
    the call (the agent run it belongs to, the conversation that led to it, the tool's name, arguments and
    call id), so a retry that runs the same call again sends the same key, and every other call (another
    call of the same tool, the same call in another task instance or DAG run) gets another one.

    ``scope`` gives several distinct keys within one call, each stable too: one per request the tool sends
    (``idempotency_key("create")``, ``idempotency_key(f"line-{n}")``).

    The key is ``apai-`` followed by 32 hex digits (128 bits of a SHA-256): short, safe in a header, a URL or a
    file name, and nothing of what it was derived from can be read back from it.

    Outside a durable attempt (an agent with ``DurableCapability`` run in a notebook or a test) the key is unique
    to the call, derived from pydantic-ai's run id and the call's id: the same within the call, another in every
    other run. A live tool's call (``live_tool()``: it runs on every try by design, each try's call a new one)
    and a call that could not be fingerprinted (its WARNING says so) have no step key: their key is unique to
    the call in this try, another on a retry. Where no tool call is known (outside any tool, or in a tool of an
    agent without ``DurableCapability``) it is a fresh random key, unique per invocation: ask once per side
    effect and keep it.
    """
    call = current_call()
    if call is None:
        return IDEMPOTENCY_KEY_PREFIX + uuid.uuid4().hex
    if call.key is not None and call.run is not None:
        return idempotency_key_of_call(call.run.attempt.task_instance, call.key, scope)
    if call.run is not None and not call.live:
        call.run.attempt.log.warning(
            "Durable: idempotency_key() in tool %s (call %s): the call has no key (see the warning above), so its "
            "idempotency key is not the same on a retry",
            call.tool_name,
            call.call_id,
        )
    if call.run_id is None and call.call_id is None:
        return IDEMPOTENCY_KEY_PREFIX + uuid.uuid4().hex
    # In an attempt the run id is the same on every try: the try and the answer keep each call's key its own.
    within = "" if call.run is None else f"try {call.run.attempt.try_number}, answer {call.answer_number}"
    return idempotency_key_of_run(call.run_id or "", call.call_id or "", call.tool_name, scope, within=within)
