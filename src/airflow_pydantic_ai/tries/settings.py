"""Every ``[pydantic_ai]`` option a durable task reads, read and checked here, once: where the cache lives
(``durable_cache_path``, checked and opened as a :class:`CacheBase`), ``durable_storage_errors``,
``durable_storage_timeout``, ``durable_encrypt``, ``durable_budget_across_tries``, ``durable_mode``,
``durable_on_unknown_outcome`` and ``on_clear``. :class:`DurableSettings` is the one frozen value a try starts from.
The ``ObjectStoragePath`` is built at execution time (a path that names a connection looks it up in its
constructor); every misconfiguration fails here, before any model call, with a message naming the option to fix.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_pydantic_ai import _compat
from airflow_pydantic_ai.durable import StepStore, TaskIdentity
from airflow_pydantic_ai.durable.errors import DurableConfigError

if TYPE_CHECKING:
    from airflow.sdk import ObjectStoragePath

__all__ = [
    "CONFIG_SECTION",
    "ON_CLEAR_CHOICES",
    "CacheBase",
    "DurableArguments",
    "DurableSettings",
    "check_on_clear",
    "check_on_unknown_outcome",
    "configured",
    "default_cache_path",
    "on_unknown_outcome_option",
    "open_cache_base",
    "resolve_cache_path",
]

CONFIG_SECTION = "pydantic_ai"
_STORAGE_ERROR_MODES = ("warn", "fail")
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})
_READ_ONLY_SCHEMES = frozenset({"http", "https", "zip", "tar", "github", "git", "libarchive", "reference", "data"})
_HINT = "use file:///absolute/folder, s3://conn_id@bucket/prefix, gs://conn_id@bucket/prefix or abfs://..."


def default_cache_path() -> str:
    """The local folder used when ``durable_cache_path`` is empty."""
    from airflow.configuration import AIRFLOW_HOME

    return os.path.join(AIRFLOW_HOME, "pydantic_ai", "durable_cache")


def configured(option: str, fallback: str) -> str:
    """The ``[pydantic_ai]`` option ``option`` as set (stripped), else ``fallback``: the one reader of the section."""
    from airflow.configuration import conf

    return str(conf.get(CONFIG_SECTION, option, fallback=fallback) or "").strip()


def resolve_cache_path(override: str | None = None) -> ObjectStoragePath:
    """The ``ObjectStoragePath`` of the cache base, checked.

    Raises :class:`~airflow_pydantic_ai.durable.DurableConfigError` naming the option and the fix.
    """
    import fsspec
    from airflow.sdk import ObjectStoragePath

    option = "durable_cache_path" if override is None else "AgentOperator(durable_cache_path=...)"
    url = (override if override is not None else configured("durable_cache_path", "")).strip()
    if not url:
        url = "file://" + default_cache_path()
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise DurableConfigError(f"{option} {url!r} is not a valid URL ({error}); {_HINT}") from None
    scheme = parts.scheme if "://" in url else ""
    if scheme in ("file", "local") and parts.netloc:
        # file://folder/x reads as host "folder": the cache would land under each worker's current directory.
        raise DurableConfigError(
            f"{option} {url!r} is not an absolute local path (a file URL needs three slashes: "
            f"file:///absolute/folder); {_HINT}"
        )
    if scheme in _BUCKET_SCHEMES and not parts.hostname:
        raise DurableConfigError(
            f"{option} {url!r} names no bucket; write it as {scheme}://conn_id@bucket/prefix "
            f"(or {scheme}://bucket/prefix to use the worker's default credentials)"
        )
    if not scheme:
        if not url.startswith("/"):
            raise DurableConfigError(f"{option} {url!r} is neither a URL nor an absolute path; {_HINT}")
        url = "file://" + url
        scheme = "file"
    known = set(fsspec.available_protocols()) | {"file", "local"}
    if scheme not in known:
        raise DurableConfigError(f"{option} {url!r} has an unknown scheme {scheme!r}; {_HINT}")
    if scheme in _READ_ONLY_SCHEMES:
        raise DurableConfigError(f"{option} {url!r}: {scheme!r} filesystems are read-only; {_HINT}")
    try:
        path = ObjectStoragePath(url)
    except ImportError as error:
        raise DurableConfigError(
            f"{option} {url!r} needs a filesystem that is not installed ({error}); install the provider for "
            f"{scheme!r} (for s3: apache-airflow-providers-amazon and s3fs)"
        ) from error
    except Exception as error:
        raise DurableConfigError(
            f"{option} {url!r} cannot be opened: {error}. Check the connection id in the URL "
            "(scheme://conn_id@bucket/prefix) and that the connection exists."
        ) from error
    conn_id = _compat.storage_conn_id(path)
    if conn_id:
        _check_connection(option, url, conn_id)
    from airflow.sdk.io.fs import has_fs

    if not has_fs(path.protocol or "file"):
        # fsspec knows the scheme, but no installed Airflow provider offers a filesystem for it.
        raise DurableConfigError(
            f"{option} {url!r} has an unknown scheme {scheme!r} (no installed Airflow provider registers a "
            f"filesystem for it); {_HINT}"
        )
    try:
        path.fs  # noqa: B018 - resolving the filesystem surfaces a missing provider or bad credentials now
    except Exception as error:
        raise DurableConfigError(f"{option} {url!r}: cannot open its filesystem: {error}") from error
    if scheme in ("file", "local"):
        folder = path.path
        try:
            TaskIdentity.make_private_folders(folder)
        except OSError as error:
            raise DurableConfigError(f"{option} {url!r}: cannot create the folder: {error}") from error
        if not os.access(folder, os.W_OK | os.X_OK):
            raise DurableConfigError(f"{option} {url!r}: the folder is not writable by this worker")
    return path


def _check_connection(option: str, url: str, conn_id: str) -> None:
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except Exception as error:
        raise DurableConfigError(
            f"{option} {url!r} names the connection {conn_id!r}, which cannot be found ({error}). Create it "
            f"(e.g. AIRFLOW_CONN_{conn_id.upper()}) or fix the id in scheme://conn_id@bucket/prefix."
        ) from error


def _storage_error_mode() -> str:
    mode = configured("durable_storage_errors", "warn").lower() or "warn"
    if mode not in _STORAGE_ERROR_MODES:
        raise DurableConfigError(
            f"[{CONFIG_SECTION}] durable_storage_errors {mode!r} is not one of {', '.join(_STORAGE_ERROR_MODES)}"
        )
    return mode


_DEFAULT_TIMEOUT = 60.0


def _storage_timeout() -> float:
    from airflow.configuration import conf

    option = f"[{CONFIG_SECTION}] durable_storage_timeout"
    try:
        seconds = conf.getfloat(CONFIG_SECTION, "durable_storage_timeout", fallback=_DEFAULT_TIMEOUT)
    except Exception as error:
        raise DurableConfigError(f"{option} must be a number of seconds: {error}") from error
    if not seconds > 0:
        raise DurableConfigError(f"{option} must be a positive number of seconds, got {seconds!r}")
    return seconds


DEFAULT_MAX_ENTRY_BYTES = 16 * 1024 * 1024


def _max_entry_bytes() -> int:
    from airflow.configuration import conf

    option = f"[{CONFIG_SECTION}] durable_max_entry_bytes"
    try:
        size = conf.getint(CONFIG_SECTION, "durable_max_entry_bytes", fallback=DEFAULT_MAX_ENTRY_BYTES)
    except Exception as error:
        raise DurableConfigError(f"{option} must be a whole number of bytes: {error}") from error
    if size < 1:
        raise DurableConfigError(f"{option} must be a positive number of bytes, got {size!r}")
    return size


def _cipher() -> Any:
    """Airflow's Fernet object when ``durable_encrypt`` is on, else None."""
    from airflow.configuration import conf

    try:
        enabled = conf.getboolean(CONFIG_SECTION, "durable_encrypt", fallback=False)
    except Exception as error:
        raise DurableConfigError(f"[{CONFIG_SECTION}] durable_encrypt must be True or False: {error}") from error
    if not enabled:
        return None
    try:
        fernet = _compat.get_fernet()
    except Exception as error:
        raise DurableConfigError(
            f"[{CONFIG_SECTION}] durable_encrypt is on but the Fernet key cannot be used: {error}. "
            "Fix [core] fernet_key."
        ) from error
    if not getattr(fernet, "is_encrypted", False):
        raise DurableConfigError(
            f"[{CONFIG_SECTION}] durable_encrypt is on but [core] fernet_key is empty; set it (every worker needs "
            "the same key) or turn durable_encrypt off."
        )
    return fernet


SHARED_OPTION = "durable_cache_shared"
"""The ``[pydantic_ai]`` option that declares a local cache folder shared by every worker (``cache_reach.py``)."""


def cache_declared_shared() -> bool:
    """``[pydantic_ai] durable_cache_shared``: the local ``durable_cache_path`` is on a volume every worker mounts.

    Raises :class:`~airflow_pydantic_ai.durable.errors.DurableConfigError` naming the option when it is not a
    boolean.
    """
    from airflow.configuration import conf

    try:
        return conf.getboolean(CONFIG_SECTION, SHARED_OPTION, fallback=False)
    except Exception as error:
        raise DurableConfigError(f"[{CONFIG_SECTION}] {SHARED_OPTION} must be True or False: {error}") from error


def _budget_across_tries() -> bool:
    from airflow.configuration import conf

    try:
        return conf.getboolean(CONFIG_SECTION, "durable_budget_across_tries", fallback=False)
    except Exception as error:
        raise DurableConfigError(
            f"[{CONFIG_SECTION}] durable_budget_across_tries must be True or False: {error}"
        ) from error


@dataclass(frozen=True)
class CacheBase:
    """The configured cache location, opened as a task opens it: its path, the cipher and the timeout.

    The task (:func:`~airflow_pydantic_ai.tries.lifecycle.start_durable_run`) and the
    ``airflow pydantic-ai cache`` commands build a task instance's :class:`~airflow_pydantic_ai.durable.StepStore`
    through :meth:`store_for`, so both read the same prefix the same way, and a misconfiguration gives both
    the same error.
    """

    path: ObjectStoragePath
    """The base, checked by :func:`resolve_cache_path`."""
    cipher: Any
    timeout: float

    @property
    def fs(self) -> Any:
        return self.path.fs

    @property
    def root(self) -> str:
        """The base as a path on ``fs``."""
        return str(self.path.path)

    @property
    def url(self) -> str:
        return str(self.path)

    def store_for(self, identity: TaskIdentity, *, warn: Any = print) -> StepStore:
        """The cache of one task instance under this base."""
        return StepStore.for_task(
            self.fs, self.root, self.url, identity, warn=warn, cipher=self.cipher, timeout=self.timeout
        )


def open_cache_base(cache_path: str | None = None) -> CacheBase:
    """Resolve and check ``durable_cache_path`` (or ``cache_path``), ``durable_encrypt`` and the timeout."""
    return CacheBase(path=resolve_cache_path(cache_path), cipher=_cipher(), timeout=_storage_timeout())


@dataclass(frozen=True)
class DurableSettings:
    """The ``[pydantic_ai]`` options a durable task reads, once, at its start: checked, as plain values."""

    base: CacheBase
    storage_errors: str
    """``warn`` or ``fail`` (``durable_storage_errors``)."""
    budget_across_tries: bool = False
    """``durable_budget_across_tries``: usage limits count every try of a task instance."""
    cache_shared: bool = False
    """``durable_cache_shared``: a local cache folder is a volume every worker mounts (``cache_reach.py``)."""
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    """``durable_max_entry_bytes``: a larger step is not cached."""

    @classmethod
    def read(cls, cache_path: str | None = None) -> DurableSettings:
        """Read and check every option; raises ``DurableConfigError`` naming the one to fix."""
        return cls(
            base=open_cache_base(cache_path),
            storage_errors=_storage_error_mode(),
            budget_across_tries=_budget_across_tries(),
            cache_shared=cache_declared_shared(),
            max_entry_bytes=_max_entry_bytes(),
        )


ON_CLEAR_CHOICES = ("resume", "fresh")
DEFAULT_ON_CLEAR = "resume"


def check_on_clear(value: Any, where: str, *, shown: Any = None) -> str:
    """``value`` as an ``on_clear`` choice; a ``DurableConfigError`` (a ``ValueError``) saying
    ``{where}{shown!r} is not one of resume, fresh`` otherwise. The one check of ``on_clear``, for the
    task's argument (when the DAG is parsed) and for the option (when a try starts)."""
    if value not in ON_CLEAR_CHOICES:
        raise DurableConfigError(
            f"{where}{value if shown is None else shown!r} is not one of {', '.join(ON_CLEAR_CHOICES)}"
        )
    return str(value)


def on_clear_option(override: str | None = None) -> str:
    """``on_clear=`` when given (checked when the task was built), else ``[pydantic_ai] on_clear``, checked."""
    if override is not None:
        return override
    from airflow.configuration import conf

    raw = conf.get(CONFIG_SECTION, "on_clear", fallback=DEFAULT_ON_CLEAR)
    value = str(raw or "").strip().lower() or DEFAULT_ON_CLEAR
    return check_on_clear(value, f"[{CONFIG_SECTION}] on_clear ", shown=raw)


def configured_mode() -> str:
    """``[pydantic_ai] durable_mode`` as set (``auto`` when empty); checked by the caller against the modes."""
    return configured("durable_mode", "auto") or "auto"


DEFAULT_ON_UNKNOWN_OUTCOME = "ask"


def check_on_unknown_outcome(value: Any, where: str, *, shown: Any = None) -> str:
    """``value`` as an ``on_unknown_outcome`` choice (ask, fail, rerun); a ``DurableConfigError`` (a ``ValueError``)
    saying ``{where}{shown!r} is not one of ask, fail, rerun`` and what each does otherwise. The one check, for
    the task's argument (when the DAG is parsed) and for the option (when a try starts)."""
    from airflow_pydantic_ai.durable.side_effects import UNKNOWN_OUTCOME_CHOICES

    if value not in UNKNOWN_OUTCOME_CHOICES:
        raise DurableConfigError(
            f"{where}{value if shown is None else shown!r} is not one of {', '.join(UNKNOWN_OUTCOME_CHOICES)} "
            "(what a try does with an at_most_once() call an earlier try started and never finished: ask a "
            "person, fail the task, or run it again)"
        )
    return str(value)


def on_unknown_outcome_option(override: str | None = None) -> str:
    """``on_unknown_outcome=`` when given (checked when the task was built), else ``[pydantic_ai]
    durable_on_unknown_outcome``, checked."""
    if override is not None:
        return override
    raw = configured("durable_on_unknown_outcome", DEFAULT_ON_UNKNOWN_OUTCOME)
    value = raw.lower() or DEFAULT_ON_UNKNOWN_OUTCOME
    return check_on_unknown_outcome(value, f"[{CONFIG_SECTION}] durable_on_unknown_outcome ", shown=raw)


@dataclass(frozen=True)
class DurableArguments:
    """A task's ``durable_*`` arguments, as ``AgentOperator`` (and so ``@task.pydantic_ai``) hands them to the
    start of a durable try: one value instead of loose keywords, built once per try after templates are
    rendered. None leaves the decision to the matching ``[pydantic_ai]`` option."""

    durable: bool = False
    cache_path: str | None = None
    """``durable_cache_path``: overrides the option for this task."""
    on_clear: str | None = None
    """``resume`` or ``fresh`` (checked when the task was built, :func:`check_on_clear`)."""
    mode: str | None = None
    fixtures: str | None = None
    live_tools: Collection[str] = ()
    keep_cache: bool = False
    budget_across_tries: bool | None = None
    on_unknown_outcome: str | None = None
    """``ask``, ``fail`` or ``rerun`` (checked when the task was built, :func:`check_on_unknown_outcome`)."""
