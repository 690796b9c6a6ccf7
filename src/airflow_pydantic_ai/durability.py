"""Airflow side of durability: where a task instance's cache lives, and opening it for an attempt.

Reads ``[pydantic_ai] durable_cache_path`` and ``durable_storage_errors``, builds the
``ObjectStoragePath`` at execution time (a path that names a connection looks it up in its
constructor), checks it, and opens a :class:`~airflow_pydantic_ai.durable.DurableRun` for the
current try. Every misconfiguration fails here, before any model call, with a message naming the
option to fix.
"""

from __future__ import annotations

import errno
import os
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_pydantic_ai.durable import DurableRun, StepStore, TaskIdentity
from airflow_pydantic_ai.durable.codec import iter_text
from airflow_pydantic_ai.durable.run import describe_error
from airflow_pydantic_ai.durable.store import make_private_folders

__all__ = [
    "CONFIG_SECTION",
    "CacheBase",
    "DurableConfigError",
    "cache_rm_command",
    "default_cache_path",
    "open_cache_base",
    "resolve_cache_path",
    "start_durable_run",
]

CONFIG_SECTION = "pydantic_ai"
_STORAGE_ERROR_MODES = ("warn", "fail")
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az"})
_READ_ONLY_SCHEMES = frozenset({"http", "https", "zip", "tar", "github", "git", "libarchive", "reference", "data"})
_HINT = "use file:///absolute/folder, s3://conn_id@bucket/prefix, gs://conn_id@bucket/prefix or abfs://..."


class DurableConfigError(ValueError):
    """The durable cache is misconfigured; the message names the option and the fix."""


def default_cache_path() -> str:
    """The local folder used when ``durable_cache_path`` is empty."""
    from airflow.configuration import AIRFLOW_HOME

    return os.path.join(AIRFLOW_HOME, "pydantic_ai", "durable_cache")


def _configured(option: str, fallback: str) -> str:
    from airflow.configuration import conf

    return str(conf.get(CONFIG_SECTION, option, fallback=fallback) or "").strip()


def resolve_cache_path(override: str | None = None) -> Any:
    """The ``ObjectStoragePath`` of the cache base, checked; raises :class:`DurableConfigError`."""
    import fsspec
    from airflow.sdk import ObjectStoragePath

    option = "durable_cache_path" if override is None else "AgentOperator(durable_cache_path=...)"
    url = (override if override is not None else _configured("durable_cache_path", "")).strip()
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
    conn_id = getattr(path, "conn_id", None)
    if conn_id:
        _check_connection(option, url, conn_id)
    try:
        path.fs  # noqa: B018 - resolving the filesystem surfaces a missing provider or bad credentials now
    except Exception as error:
        raise DurableConfigError(f"{option} {url!r}: cannot open its filesystem: {error}") from error
    if scheme in ("file", "local"):
        folder = path.path
        try:
            make_private_folders(folder)
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
    mode = _configured("durable_storage_errors", "warn").lower() or "warn"
    if mode not in _STORAGE_ERROR_MODES:
        raise DurableConfigError(
            f"[{CONFIG_SECTION}] durable_storage_errors {mode!r} is not one of {', '.join(_STORAGE_ERROR_MODES)}"
        )
    return mode


# Errors that mean the location itself is wrong (permissions, missing bucket, a file in the way), as
# opposed to a store that is down for a while.
_CONFIGURATION_ERRORS = (PermissionError, FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError)
_DEFAULT_TIMEOUT = 60.0


def _is_configuration_error(error: BaseException) -> bool:
    if isinstance(error, _CONFIGURATION_ERRORS):
        return True
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
        return True
    # botocore's ParamValidationError (a malformed bucket name...), without importing botocore.
    return any(cls.__name__ == "ParamValidationError" for cls in type(error).__mro__)


def _check_writable(store: StepStore, storage_errors: str, log: Any) -> bool:
    """Write and delete a probe; False when the store is unreachable (and ``durable_storage_errors = warn``)."""
    try:
        store.probe()
    except Exception as error:
        described = describe_error(error)
        if _is_configuration_error(error):
            raise DurableConfigError(
                f"durable_cache_path: cannot write to {store.location} ({described}). The workers need list, get, "
                "put and delete permission under the prefix; check the path, the bucket name and the connection."
            ) from error
        if storage_errors == "fail":
            raise DurableConfigError(
                f"durable_cache_path: the cache at {store.location} is unreachable ({described}); "
                "[pydantic_ai] durable_storage_errors = fail stops here."
            ) from error
        log.error("Durable: the cache at %s is unreachable (%s); steps will run live", store.location, described)
        return False
    return True


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


def _cipher() -> Any:
    """Airflow's Fernet object when ``durable_encrypt`` is on, else None."""
    from airflow.configuration import conf

    try:
        enabled = conf.getboolean(CONFIG_SECTION, "durable_encrypt", fallback=False)
    except Exception as error:
        raise DurableConfigError(f"[{CONFIG_SECTION}] durable_encrypt must be True or False: {error}") from error
    if not enabled:
        return None
    from airflow.sdk.crypto import get_fernet

    try:
        fernet = get_fernet()
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


def _secret_finder() -> Any:
    """A check for values registered with Airflow's secrets masker (connection passwords, ``mask_secret``...).

    Only registered *values* count: a key that merely sounds sensitive (``tokens``, ``password_hint``)
    does not stop a step from being cached. The masker's pattern is read at every check, since secrets
    are registered while the task runs.
    """
    try:
        from airflow.sdk._shared.secrets_masker import _secrets_masker
    except ImportError:  # pragma: no cover - older task SDKs
        from airflow.sdk.execution_time.secrets_masker import _secrets_masker  # type: ignore[no-redef]
    masker = _secrets_masker()

    def contains_secret(payload: Any) -> bool:
        pattern = masker.replacer
        return pattern is not None and any(pattern.search(text) for text in iter_text(payload))

    return contains_secret


@dataclass(frozen=True)
class CacheBase:
    """The configured cache location, opened as a task opens it: its path, the cipher and the timeout.

    The task (:func:`start_durable_run`) and the ``airflow pydantic-ai cache`` commands build a task
    instance's :class:`StepStore` through :meth:`store_for`, so both read the same prefix the same
    way, and a misconfiguration gives both the same error.
    """

    path: Any
    """The ``ObjectStoragePath`` of the base, checked by :func:`resolve_cache_path`."""
    cipher: Any
    timeout: float

    @property
    def fs(self) -> Any:
        return self.path.fs

    @property
    def root(self) -> str:
        """The base as a path on :attr:`fs`."""
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


def cache_rm_command(identity: TaskIdentity) -> str:
    """The command that deletes ``identity``'s cache, ready to paste into a shell."""
    words = ["airflow", "pydantic-ai", "cache", "rm", identity.dag_id, identity.run_id, identity.task_id]
    if identity.map_index != -1:
        words += ["--map-index", str(identity.map_index)]
    return shlex.join(words)


def start_durable_run(context: Any, *, log: Any, cache_path: str | None = None) -> DurableRun:
    """Open the durable cache of the running task instance and start this try."""
    ti = context["ti"]
    base = open_cache_base(cache_path)
    storage_errors = _storage_error_mode()
    map_index = getattr(ti, "map_index", None)
    identity = TaskIdentity(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=-1 if map_index is None else int(map_index),
    )
    base_url = base.url
    store = base.store_for(identity, warn=log.warning)
    log.info(
        "Durable: the cache of this task instance is %s (delete it to force a fresh run: %s)",
        store.location,
        cache_rm_command(identity),
    )
    if not getattr(base.path, "conn_id", None) and not store.is_local:
        log.info(
            "Durable: %s names no connection, so the worker's default credentials are used (environment, "
            "instance profile...); every worker must reach the same location with them",
            base_url,
        )
    reachable = _check_writable(store, storage_errors, log)
    return DurableRun.open(
        store,
        attempt=int(getattr(ti, "try_number", 1) or 1),
        log=log,
        contains_secret=_secret_finder(),
        storage_errors=storage_errors,  # type: ignore[arg-type]
        reachable=reachable,
    )
