"""Whether the next try of a task can reach its durable cache: which hosts Airflow's executor runs tasks on.

A cache on a worker's own disk (``file://``; the default when ``[pydantic_ai] durable_cache_path`` is empty
is ``file://$AIRFLOW_HOME/pydantic_ai/durable_cache``) is read only by tries that run on that worker. Under an
executor that runs tasks on several hosts (Celery, Kubernetes, Edge, AWS ECS / Batch / Lambda...), a retry
may land on another worker, find no step, and pay for every one again (model calls billed twice, tool side
effects repeated), while the failed try's cache stays on the first worker's disk. A durable try says so at
its start, in one WARNING (:func:`warn_when_a_retry_may_miss_the_cache`), unless ``[pydantic_ai]
durable_cache_shared`` declares the folder a volume every worker mounts (read with the other options, in
``settings.py``).

Which executors run tasks on several hosts is decided from Airflow's configuration alone
(:func:`executor_on_several_hosts`): ``[core] executor`` is read as text and never imported, since the
provider that defines an executor (celery, cncf.kubernetes, edge3) need not be installed where a task runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_pydantic_ai.durable import StepStore, TaskLogger

__all__ = [
    "SINGLE_HOST_EXECUTORS",
    "ConfiguredExecutor",
    "configured_executors",
    "executor_on_several_hosts",
    "warn_when_a_retry_may_miss_the_cache",
]

SINGLE_HOST_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor", "MockExecutor"})
"""Executors that run every task on the host of the scheduler that started it, by class name (Sequential and
Debug are Airflow 2's; Mock is Airflow's test executor). Every other executor counts as running tasks on
several hosts: see :func:`executor_on_several_hosts`. (Several schedulers on several hosts, each with its
``LocalExecutor``, spread tries across hosts too; the configuration does not say how many run, so that case
draws no warning.)"""

_AIRFLOW_DEFAULT_EXECUTOR = "LocalExecutor"


@dataclass(frozen=True)
class ConfiguredExecutor:
    """One entry of ``[core] executor``: ``CeleryExecutor``, ``module.path.ClassName``, or ``Alias:either``."""

    spelling: str
    """The entry as written (without a team prefix)."""
    target: str
    """A core executor's name or a class's module path."""
    alias: str | None = None
    default: bool = False
    """The first entry of its list (the global list, or a team's): Airflow sends it the tasks that name no
    executor."""

    @property
    def class_name(self) -> str:
        return self.target.rsplit(".", 1)[-1]

    @property
    def single_host(self) -> bool:
        """Whether it runs tasks on the scheduler's host only (by its class name, without importing it)."""
        return self.class_name in SINGLE_HOST_EXECUTORS

    def is_called(self, name: str) -> bool:
        """Whether a task's ``executor=`` argument names this entry (its alias, class name or module path)."""
        return name.strip() in {self.spelling, self.target, self.class_name, self.alias}


def configured_executors(config: str) -> list[ConfiguredExecutor]:
    """The entries of a ``[core] executor`` value, in order.

    Reads every spelling Airflow accepts: one name, a comma-separated list (Airflow 2.10+; the first is the
    default), ``Alias:module.path.ClassName`` or ``Alias:CoreName``, and Airflow 3's team lists
    (``CeleryExecutor;team_a=LocalExecutor,KubernetesExecutor``), whose first entry is that team's default.
    An empty value is Airflow's own default, ``LocalExecutor``.
    """
    executors: list[ConfiguredExecutor] = []
    for team_list in (config or "").split(";"):
        names = team_list.split("=", 1)[1] if "=" in team_list.lstrip("=") else team_list.lstrip("=")
        entries = [entry.strip() for entry in names.split(",") if entry.strip()]
        for position, entry in enumerate(entries):
            alias, _, target = entry.rpartition(":")
            executors.append(
                ConfiguredExecutor(
                    spelling=entry, target=target.strip(), alias=alias.strip() or None, default=position == 0
                )
            )
    return executors or [ConfiguredExecutor(_AIRFLOW_DEFAULT_EXECUTOR, _AIRFLOW_DEFAULT_EXECUTOR, default=True)]


def executor_on_several_hosts(config: str, task_executor: str | None = None) -> str | None:
    """The configured executor (as written) that may run a task's next try on another host, or None.

    ``config`` is ``[core] executor``; ``task_executor`` the task's own ``executor=`` argument (None: it
    names none). The executors that may run the task are the one it names, else the defaults (the first
    entry of the global list and of each team's list: Airflow sends a task that names no executor to its
    default); a name that matches no entry (Airflow would refuse it) counts every entry.

    An executor runs tasks on several hosts unless its class is one of :data:`SINGLE_HOST_EXECUTORS`:
    Celery, Kubernetes, Edge (edge3), CeleryKubernetes and LocalKubernetes (hybrids with a distributed
    half), and **an executor this module does not know** all count as distributed. An unknown executor is
    in practice a remote one (the executors that ship outside Airflow's core, such as AWS ECS, Batch and
    Lambda, all run tasks on other hosts), and the two mistakes cost differently: a needless warning is one
    line, silenced by ``[pydantic_ai] durable_cache_shared``; a missing one is a retry that pays for every
    step again without a word.
    """
    executors = configured_executors(config)
    named = [executor for executor in executors if task_executor and executor.is_called(task_executor)]
    if named:
        candidates = named
    elif task_executor:
        candidates = executors
    else:
        candidates = [executor for executor in executors if executor.default]
    return next((executor.spelling for executor in candidates if not executor.single_host), None)


def warn_when_a_retry_may_miss_the_cache(store: StepStore, *, shared: bool, task: Any, log: TaskLogger) -> str | None:
    """Log one WARNING when the cache is on this worker's disk and the executor may run the next try elsewhere.

    ``shared``: ``[pydantic_ai] durable_cache_shared`` (read with the other options, in ``DurableSettings``).
    ``task``: the running task (its ``executor=`` argument says which configured executor runs it).
    Returns the executor that made it warn (None: no warning).
    """
    from airflow.configuration import conf

    from airflow_pydantic_ai.tries.settings import CONFIG_SECTION, SHARED_OPTION

    if shared or not store.is_local:
        return None
    config = str(conf.get("core", "executor", fallback=_AIRFLOW_DEFAULT_EXECUTOR) or "")
    executor = executor_on_several_hosts(config, getattr(task, "executor", None))
    if executor is None:
        return None
    log.warning(
        "Durable: the cache %s is on this worker's local disk, and the executor %s runs tasks on several hosts: "
        "a retry that runs on another worker will not see this cache and will run every step again (model calls "
        "billed again, tool side effects repeated). Set [%s] durable_cache_path to storage every worker reaches "
        "(s3://conn_id@bucket/prefix, gs://conn_id@bucket/prefix, abfs://...); if this folder is a volume every "
        "worker mounts, set [%s] %s = True to silence this warning",
        store.location,
        executor,
        CONFIG_SECTION,
        CONFIG_SECTION,
        SHARED_OPTION,
    )
    return executor
