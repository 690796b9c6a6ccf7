"""Recording entries, and the one owner of the storage-errors policy (``durable_storage_errors``).

A :class:`StepWriter` takes a finished step's entry and stores it: the secret check, the encoding,
the put, and what a failure means: ``warn`` (log one ERROR line, go on live, back off for a while
once writes keep failing) or ``fail`` (raise :class:`~airflow_pydantic_ai.durable.errors.DurableStorageError`).
The start probe and a failed load follow the same policy here, so every storage fact is logged once.

Guarantees: an entry holding a value registered as secret is never written; a write that fails never
fails the attempt under ``warn``; every step that ran and is not stored is counted (the summary's
"N steps of this attempt were not persisted" line).
"""

from __future__ import annotations

import dataclasses
import errno
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_pydantic_ai.durable.encoding.codec import iter_text
from airflow_pydantic_ai.durable.errors import DurableConfigError, DurableStorageError, describe_error
from airflow_pydantic_ai.durable.reporting.stats import TaskLogger
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from airflow_pydantic_ai.durable.storage.numbering import StepNumbers
from airflow_pydantic_ai.durable.storage.store import StepStore

__all__ = ["StepWriter", "StorageErrors", "TryOutlook", "no_secrets", "secret_check"]

StorageErrors = Literal["warn", "fail"]
_FIX = "Fix the storage, or set [pydantic_ai] durable_storage_errors = warn to run on without it."
# Errors that mean the location itself is wrong (permissions, missing bucket, a file in the way), as
# opposed to a store that is down for a while.
_CONFIGURATION_ERRORS = (PermissionError, FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError)


def no_secrets(value: Any) -> bool:
    """The secret check when nothing is registered as secret (outside a task)."""
    return False


def secret_check(redact: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A check for payloads holding a value that ``redact`` (a secrets masker) would hide.

    Only registered *values* count: a key that merely sounds sensitive (``tokens``, ``password_hint``)
    does not stop a step from being recorded. ``redact`` is called at every check, since secrets are
    registered while the task runs.
    """

    def contains_secret(payload: Any) -> bool:
        return any(redact(text) != text for text in iter_text(payload))

    return contains_secret


@dataclass(frozen=True)
class TryOutlook:
    """What Airflow says about this try's place: whether a retry follows, whether it may take a recorded output."""

    retry_coming: bool = True
    """Whether Airflow retries the task if this try fails (False on the last try)."""
    takes_recorded_output: bool = True
    """False on the first try of a DAG run or after a clear: an output recorded earlier is never returned."""
    delete_hint: str = ""
    """How a person deletes this cache (the Airflow side passes the ``cache rm`` command); empty: say how by hand."""

    def what_next(self, on_retry: str = "runs again on a retry") -> str:
        """What happens to a step that was not cached: ``on_retry``, unless this is the last try."""
        return on_retry if self.retry_coming else "no retry is coming (this is the last try)"


@dataclass
class _Backoff:
    """Once writes keep failing (or the start probe failed), skip them for a while, then try again."""

    retry_after: float = 60.0
    failed_in_a_row: int = 0
    skip_until: float = 0.0
    reason: str = ""

    @property
    def active(self) -> bool:
        return time.monotonic() < self.skip_until


def is_configuration_error(error: BaseException) -> bool:
    """Whether a storage error means the location is wrong (not a store that is down for a while)."""
    if isinstance(error, _CONFIGURATION_ERRORS):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
        return True
    # botocore's ParamValidationError (a malformed bucket name...), by type but without importing botocore:
    # only a botocore that is imported already can have raised it.
    botocore_errors = sys.modules.get("botocore.exceptions")
    param_error = getattr(botocore_errors, "ParamValidationError", None)
    return isinstance(param_error, type) and isinstance(error, param_error)


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"


@dataclass
class StepWriter:
    """Stores the entries of one attempt under its storage-errors policy, and counts what it could not."""

    store: StepStore
    log: TaskLogger
    contains_secret: Callable[[Any], bool] = no_secrets
    """Whether a payload holds a value registered as secret (Airflow's secrets masker, in a task)."""
    storage_errors: StorageErrors = "warn"
    outlook: TryOutlook = field(default_factory=TryOutlook)
    not_persisted: int = 0
    problem: str = ""
    """Why the last entry :meth:`persist` did not store was not stored (for an error that must name it)."""
    written: list[str] = field(default_factory=list)
    """Names of the entries this attempt stored, oldest first (the cache is deleted newest first)."""
    backoff: _Backoff = field(default_factory=_Backoff)
    max_entry_bytes: int | None = None
    """The largest entry stored (``durable_max_entry_bytes``); a larger one is not cached (None: no limit)."""
    numbers: StepNumbers = field(default_factory=StepNumbers, repr=False)
    """What the cache holds as this attempt knows it (what it loaded, then what it stored), numbered as the view
    and ``cache show`` number it: the step numbers of the log (``numbering.py``)."""
    recorded_with: Callable[[], dict[str, str]] | None = field(default=None, repr=False)
    """What an entry written now says recorded it (the attempt's key chain knows: ``KeyChain.recorded_with``)."""

    # --- at the start ----------------------------------------------------------------------------

    def check_at_start(self) -> bool:
        """Write and delete a probe; False when the store is unreachable (and the policy is ``warn``).

        A store that refuses because it is misconfigured raises ``DurableConfigError`` whatever the policy.
        """
        try:
            self.store.probe()
        except Exception as error:
            described = describe_error(error)
            if is_configuration_error(error):
                raise DurableConfigError(
                    f"durable_cache_path: cannot write to {self.store.location} ({described}). The workers need list, "
                    "get, put and delete permission under the prefix; check the path, the bucket name and the "
                    "connection."
                ) from error
            if self.storage_errors == "fail":
                raise DurableConfigError(
                    f"durable_cache_path: the cache at {self.store.location} is unreachable ({described}); "
                    "[pydantic_ai] durable_storage_errors = fail stops here."
                ) from error
            self.unreachable(described, at_start=True)
            return False
        return True

    def load_failed(self, error: BaseException) -> None:
        """Reading the cache failed: raise under ``fail``; under ``warn`` say the attempt runs live."""
        if self.storage_errors == "fail":
            raise DurableStorageError(
                f"could not read the durable cache at {self.store.location}: {describe_error(error)}. {_FIX}"
            ) from error
        self.log.error(
            "Durable: could not read the cache at %s (%s); this attempt runs every step live",
            self.store.location,
            describe_error(error),
        )

    # --- while the run goes ----------------------------------------------------------------------

    def skipped(self) -> None:
        """A step ran live and will not be stored (the caller logged why)."""
        self.not_persisted += 1

    def persist(self, entry: StepEntry, what: str, *, on_secret: str | None = None) -> bool:
        """Store ``entry``; False when it was not stored (the log says why). An entry that does not say what
        recorded it is stamped with :attr:`recorded_with` (the release and key scheme of this attempt)."""
        # Text already over the limit is neither scanned nor encoded (a large result's copies cost the memory).
        if self.max_entry_bytes is not None and self._too_large(what, sum(map(len, iter_text(entry.payload)))):
            return False
        if entry.recorded_with is None and self.recorded_with is not None:
            entry = dataclasses.replace(entry, recorded_with=self.recorded_with())
        if self.contains_secret(entry.payload):
            self.not_persisted += 1
            self.problem = "it contains a value registered as secret"
            self.log.warning(
                "Durable: %s contains a value registered as secret; %s",
                what,
                on_secret or f"it is not cached and {self.outlook.what_next('will run again on a retry')}",
            )
            return False
        if self.backoff.active:
            # An unreachable store would make every step wait for its timeout: skip, and say so.
            self.not_persisted += 1
            self.problem = f"the cache is unreachable ({self.backoff.reason})"
            self.log.error(
                "Durable: did not store %s: the cache at %s is unreachable (%s); %s",
                what,
                self.store.location,
                self.backoff.reason,
                self.outlook.what_next("it runs again on a retry"),
            )
            return False
        try:
            data = self.store.encode(entry)
        except (ValueError, TypeError, RecursionError) as error:  # the value, not the storage, is at fault
            self.not_persisted += 1
            self.problem = f"it cannot be written as JSON ({describe_error(error)})"
            self.log.warning(
                "Durable: %s is not cached: it cannot be written as JSON (%s)", what, describe_error(error)
            )
            return False
        if self._too_large(what, len(data)):
            return False
        try:
            self.store.write(entry.name, data, entry=entry)
        except Exception as error:
            self._write_failed(entry, what, error)
            return False
        self.backoff.failed_in_a_row = 0
        self.numbers.add(entry)
        if entry.name not in self.written:
            self.written.append(entry.name)
        return True

    def remove(self, name: str, *, if_kept: str) -> bool:
        """Remove the entry ``name`` from the store and from what this attempt wrote (the cache's numbering and the
        names deleted after success follow). A removal that fails is one WARNING whatever ``durable_storage_errors``
        says (``if_kept``: what the entry left behind means), and the entry counts as still written; False then."""
        try:
            self.store.remove(name)
        except Exception as error:
            self.log.warning(
                "Durable: could not remove %s%s (%s); %s", self.store.location, name, describe_error(error), if_kept
            )
            return False
        self.numbers.discard(name)
        if name in self.written:
            self.written.remove(name)
        return True

    def _too_large(self, what: str, size: int) -> bool:
        """Whether an entry of (at least) ``size`` bytes is over the limit: then it is not stored, with a WARNING."""
        if self.max_entry_bytes is None or size <= self.max_entry_bytes:
            return False
        self.not_persisted += 1
        self.log.warning(
            "Durable: %s is not cached: it takes %s, more than [pydantic_ai] durable_max_entry_bytes (%s); %s",
            what,
            _mib(size),
            _mib(self.max_entry_bytes),
            self.outlook.what_next("it runs again on a retry"),
        )
        return True

    def _write_failed(self, entry: StepEntry, what: str, error: Exception) -> None:
        self.not_persisted += 1
        self.problem = f"writing {entry.name} failed: {describe_error(error)}"
        self.log.error(
            "Durable: could not store %s at %s%s: %s", what, self.store.location, entry.name, describe_error(error)
        )
        if self.storage_errors == "fail":
            raise DurableStorageError(
                f"could not store {what} in the durable cache at {self.store.location}: {describe_error(error)}. {_FIX}"
            ) from error
        self.backoff.failed_in_a_row += 1
        if self.backoff.failed_in_a_row >= 2:
            self.unreachable(f"{self.backoff.failed_in_a_row} writes failed in a row: {describe_error(error)}")

    def unreachable(self, reason: str, *, at_start: bool = False) -> None:
        """Skip writes for ``backoff.retry_after`` seconds, with one ERROR line saying so."""
        self.backoff.reason = reason
        self.backoff.skip_until = time.monotonic() + self.backoff.retry_after
        if at_start:
            self.log.error(
                "Durable: the cache at %s is unreachable (%s); this attempt runs every step live, and tries to "
                "store steps again after %.0f s",
                self.store.location,
                reason,
                self.backoff.retry_after,
            )
            return
        self.log.error(
            "Durable: the cache at %s is unreachable (%s); steps are not stored for the next %.0f s",
            self.store.location,
            reason,
            self.backoff.retry_after,
        )
