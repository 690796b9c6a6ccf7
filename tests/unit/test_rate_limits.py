"""Which failures are worth waiting out, and what RateLimitRetryPolicy decides for them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from packaging.version import Version
from pydantic_ai.exceptions import (
    ModelAuthenticationError,
    ModelOverloadedError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelUnavailableError,
)
from tests.helpers.compat import airflow_version

from airflow_pydantic_ai.rate_limits import worth_waiting_for

needs_retry_policies = pytest.mark.skipif(
    airflow_version() < Version("3.3"), reason=f"retry policies are new in Airflow 3.3 (installed: {airflow_version()})"
)


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as error:
            raise RuntimeError("the agent run failed") from error
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    "error",
    [
        ModelRateLimitError("gpt", "429"),
        ModelUnavailableError("gpt", "503"),
        ModelOverloadedError("claude", "529 overloaded"),
        _wrapped(ModelRateLimitError("gpt", "429")),
        ExceptionGroup("every model failed", [ValueError("x"), ModelOverloadedError("claude", "529")]),
    ],
    ids=repr,
)
def test_rate_limits_and_overload_are_worth_waiting_for(error: BaseException) -> None:
    assert worth_waiting_for(error) is not None


@pytest.mark.parametrize(
    "error",
    [
        ModelQuotaExceededError("gpt", "insufficient_quota"),  # waiting does not refill a quota
        ModelAuthenticationError("gpt", "401"),
        ConnectionError("chat API down"),
        _wrapped(ValueError("bad output")),
    ],
    ids=repr,
)
def test_other_failures_are_not(error: BaseException) -> None:
    assert worth_waiting_for(error) is None


@needs_retry_policies
def test_the_policy_waits_what_the_provider_asked_capped_and_leaves_the_rest_to_retries() -> None:
    from airflow.sdk import RetryAction

    from airflow_pydantic_ai.retry_policy import CAN_RESCHEDULE, RateLimitRetryPolicy

    policy = RateLimitRetryPolicy(delay=timedelta(seconds=30), max_delay=timedelta(minutes=5), max_reschedules=4)
    asked = policy.evaluate(ModelRateLimitError("gpt", "429", retry_after=12.5), 1, 2)
    unsaid = policy.evaluate(ModelOverloadedError("claude", "529"), 1, 2)
    too_long = policy.evaluate(ModelRateLimitError("gpt", "429", retry_after=86400), 1, 2)

    expected = RetryAction.RESCHEDULE if CAN_RESCHEDULE else RetryAction.RETRY
    assert {asked.action, unsaid.action, too_long.action} == {expected}
    assert (asked.retry_delay, unsaid.retry_delay, too_long.retry_delay) == (
        timedelta(seconds=12.5),
        timedelta(seconds=30),
        timedelta(minutes=5),
    )
    assert "ModelRateLimitError from gpt" in (asked.reason or "")
    if CAN_RESCHEDULE:
        assert asked.max_reschedules == 4
    assert policy.evaluate(ConnectionError("down"), 1, 2).action is RetryAction.DEFAULT
    assert RateLimitRetryPolicy.deserialize(policy.serialize()).serialize() == policy.serialize()


@needs_retry_policies
def test_a_policy_without_bounds_is_refused() -> None:
    from airflow_pydantic_ai.retry_policy import RateLimitRetryPolicy

    with pytest.raises(ValueError, match="max_reschedules, reschedule_timeout, or both"):
        RateLimitRetryPolicy(max_reschedules=None, reschedule_timeout=None)
