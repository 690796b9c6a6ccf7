"""``RateLimitRetryPolicy``: wait out a rate-limited or overloaded model, without using a retry on Airflow 3.4.

A retry policy (Airflow 3.3+) decides, from the exception, what Airflow does with a failed try. This one
acts when :func:`~airflow_pydantic_ai.rate_limits.worth_waiting_for` finds a rate limit or an overloaded
provider, waiting the provider's ``Retry-After`` when it sent one, and leaves every other failure to the
task's ``retries``:

- Airflow 3.4: it reschedules the task (``RetryAction.RESCHEDULE``: the same try runs again later,
  ``retries`` untouched). Bounded: after ``max_reschedules`` reschedules of one try, or
  ``reschedule_timeout`` after its first, the standard retry logic applies (Airflow stores the reason as
  the task instance's ``retry_reason``).
- Airflow 3.3 has retry policies but no reschedule: it retries after that wait (a retry is used).

Either way the next run replays the steps recorded before the failure. Importing this module on Airflow
3.1 or 3.2 (no retry policies) fails with an ImportError saying what to use instead (docs/rate_limits.rst).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.rate_limits import worth_waiting_for

if TYPE_CHECKING:
    from airflow.sdk import RetryAction, RetryDecision, RetryPolicy
else:  # an ImportError that says what to use instead on Airflow 3.1-3.2
    RetryAction, RetryDecision, RetryPolicy = _compat.retry_policy_api()

__all__ = ["CAN_RESCHEDULE", "RateLimitRetryPolicy"]

CAN_RESCHEDULE = _compat.retry_can_reschedule()
"""Airflow 3.4's ``RetryAction.RESCHEDULE``: run the try again later without using a retry."""


class RateLimitRetryPolicy(RetryPolicy):
    """Reschedule (3.4; retry on 3.3) on a rate limit or an overloaded provider; anything else goes to ``retries``.

    :param delay: How long to wait when the provider did not say (``Retry-After``).
    :param max_delay: The longest wait, whatever the provider asked for.
    :param max_reschedules: Reschedules of one try before the standard retry logic applies (3.4).
    :param reschedule_timeout: How long after a try's first reschedule the standard retry logic applies (3.4).
    """

    def __init__(
        self,
        *,
        delay: timedelta = timedelta(minutes=1),
        max_delay: timedelta = timedelta(minutes=30),
        max_reschedules: int | None = 20,
        reschedule_timeout: timedelta | None = timedelta(hours=6),
    ) -> None:
        if delay < timedelta(0) or max_delay < delay:
            raise ValueError(f"RateLimitRetryPolicy needs 0 <= delay <= max_delay, got {delay} and {max_delay}")
        if max_reschedules is None and reschedule_timeout is None:
            raise ValueError("RateLimitRetryPolicy needs max_reschedules, reschedule_timeout, or both")
        self.delay, self.max_delay = delay, max_delay
        self.max_reschedules, self.reschedule_timeout = max_reschedules, reschedule_timeout

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> RetryDecision:
        found = worth_waiting_for(exception)
        if found is None:
            return RetryDecision.default()
        asked = getattr(found, "retry_after", None)
        wait = min(timedelta(seconds=asked) if asked is not None else self.delay, self.max_delay)
        status = getattr(found, "status_code", None)
        what = f"{type(found).__name__}{f' (HTTP {status})' if status else ''} from {found.model_name}"
        if not CAN_RESCHEDULE:
            return RetryDecision.retry(wait, reason=f"{what}: retried in {wait.total_seconds():g} s"[:500])
        reason = f"{what}: rescheduled in {wait.total_seconds():g} s without using a retry"
        return RetryDecision.reschedule(  # type: ignore[attr-defined,no-any-return,unused-ignore]
            wait,
            max_reschedules=self.max_reschedules,
            reschedule_timeout=self.reschedule_timeout,
            reason=reason[:500],
        )

    def serialize(self) -> dict[str, Any]:
        """The policy's settings as plain JSON values (seconds for durations)."""
        return {
            "delay": self.delay.total_seconds(),
            "max_delay": self.max_delay.total_seconds(),
            "max_reschedules": self.max_reschedules,
            "reschedule_timeout": None if self.reschedule_timeout is None else self.reschedule_timeout.total_seconds(),
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> RateLimitRetryPolicy:
        """The policy :meth:`serialize` described."""
        timeout = data.get("reschedule_timeout")
        return cls(
            delay=timedelta(seconds=data["delay"]),
            max_delay=timedelta(seconds=data["max_delay"]),
            max_reschedules=data.get("max_reschedules"),
            reschedule_timeout=None if timeout is None else timedelta(seconds=timeout),
        )
