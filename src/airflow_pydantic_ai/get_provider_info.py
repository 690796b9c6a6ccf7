"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

The content mirrors ``provider.yaml`` at the repository root; a unit test keeps the two equal.
Airflow imports this module whenever it discovers providers, and an import error here breaks
every Airflow command in the environment, so it imports nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_provider_info"]

_INTEGRATION = "Pydantic AI"


def get_provider_info() -> dict[str, Any]:
    """Return the provider metadata as Airflow's ``provider_info.schema.json`` describes it.

    A new dict is built on every call because Airflow adds keys (``documentation-url``) to the
    dict it receives.

    :return: The provider metadata.
    """
    return {
        "package-name": "airflow-pydantic-ai",
        "name": "Pydantic AI",
        "description": (
            "Run `pydantic-ai <https://ai.pydantic.dev/>`__ agents in Airflow tasks. With "
            "``durable=True`` the model responses and tool results of a run are cached, so a "
            "retried task replays the unchanged steps instead of repeating them.\n"
        ),
        "state": "ready",
        "source-date-epoch": 1795335511,
        "versions": ["0.2.0", "0.1.0"],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://ai.pydantic.dev/",
                "how-to-guide": ["/docs/operators.rst"],
                "tags": ["ai", "llm"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_pydantic_ai.hooks.pydantic_ai"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_pydantic_ai.operators.agent"],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_pydantic_ai.triggers.pending_request"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "pydantic_ai",
                "hook-class-name": "airflow_pydantic_ai.hooks.pydantic_ai.PydanticAIHook",
                "hook-name": "Pydantic AI",
                "conn-fields": {
                    "model": {
                        "label": "Model",
                        "description": (
                            "pydantic-ai model id, provider:model, e.g. openai:gpt-4o or "
                            "anthropic:claude-sonnet-4-5. An operator's model_id overrides it."
                        ),
                        "schema": {"type": ["string", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port", "login"],
                    "relabeling": {"host": "Base URL", "password": "API key"},
                    "placeholders": {
                        "host": "optional, e.g. http://localhost:11434/v1",
                        "password": "optional; the provider's environment variable is used if empty",
                    },
                },
            }
        ],
        "plugins": [
            {
                "name": "pydantic_ai_durable_cache",
                "plugin-class": "airflow_pydantic_ai.ui.plugin.DurableCacheViewPlugin",
            }
        ],
        "cli": ["airflow_pydantic_ai.cli.definition.get_cli_commands"],
        "task-decorators": [
            {
                "class-name": "airflow_pydantic_ai.decorators.agent.agent_task",
                "name": "pydantic_ai",
            }
        ],
        "config": {
            "pydantic_ai": {
                "description": "Settings of the airflow-pydantic-ai provider.",
                "options": {
                    "durable_cache_path": {
                        "description": (
                            "Base location of the durable agent cache, as an ObjectStoragePath URL "
                            "(file:///path, s3://conn_id@bucket/prefix, gs://conn_id@bucket/prefix, ...). "
                            "Each task instance writes under "
                            "{base}/{dag_id}/{run_id}/{task_id}/{map_index}/ (inside an Airflow 3.4 loop, "
                            "{map_index}.loop{iteration}.{region_id}/); delete that folder to "
                            "force a fresh run. Empty means the local folder "
                            "{AIRFLOW_HOME}/pydantic_ai/durable_cache, which only helps when the retry "
                            "runs on the same machine as the failed attempt."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "s3://aws_default@my-bucket/airflow/agent-cache",
                        "default": "",
                    },
                    "durable_cache_shared": {
                        "description": (
                            "Declare that a local durable_cache_path (file://, or the default folder under "
                            "AIRFLOW_HOME) is on a volume every worker mounts (NFS, a shared persistent volume). "
                            "Under an executor that runs tasks on several hosts (Celery, Kubernetes, Edge...), a "
                            "durable task with a local cache logs a WARNING at its start, because a retry that runs "
                            "on another worker would not see the cache and would run every step again; True "
                            "silences that warning. It changes nothing else."
                        ),
                        "version_added": "0.3.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "on_clear": {
                        "description": (
                            "What a durable task cleared by a person does with its cache on Airflow 3.1-3.3: "
                            "resume replays the recorded steps, fresh discards them and runs every step live. "
                            "Retries are never affected. On Airflow 3.4 the person who clears decides "
                            "(keep_task_state) and this option applies only when the task-state store cannot "
                            "be read. A task's on_clear= argument overrides it. One of: resume, fresh."
                        ),
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "fresh",
                        "default": "resume",
                    },
                    "durable_storage_errors": {
                        "description": (
                            "What a durable run does when writing a cache entry fails: warn logs the "
                            "error and the run goes on (a retry runs that step live again); fail fails "
                            "the task. One of: warn, fail."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "fail",
                        "default": "warn",
                    },
                    "durable_mode": {
                        "description": (
                            "How durable agent tasks use their recorded steps, unless a task sets durable_mode=. "
                            "auto replays what was recorded and runs the rest live; replay runs nothing live and "
                            "fails a task at the first step with no recorded entry, naming what changed (for tests "
                            "in CI); record runs every step live and records it, replacing what was recorded; off "
                            "runs durable tasks as if durable=False. One of: auto, replay, record, off."
                        ),
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "replay",
                        "default": "auto",
                    },
                    "durable_storage_timeout": {
                        "description": (
                            "Seconds one cache request may take (the write of one step, the listing, a batch "
                            "of reads). On object stores (S3, GCS, Azure) it is a hard deadline: without it "
                            "their clients retry an unreachable endpoint for many minutes per write. A request "
                            "that times out counts as a storage error (see durable_storage_errors); after two "
                            "failed writes in a row, steps are not stored for a minute, then writing is tried "
                            "again."
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "20",
                        "default": "60",
                    },
                    "durable_max_entry_bytes": {
                        "description": (
                            "The largest cache entry a durable task stores, in bytes. A step whose stored form "
                            "is larger (a tool that returns 50 MB) is not cached, with a WARNING naming the "
                            "step: it runs again on a retry. Bounds the memory a worker needs to record and "
                            "replay a step."
                        ),
                        "version_added": "0.3.0",
                        "type": "integer",
                        "example": "1048576",
                        "default": "16777216",
                    },
                    "durable_encrypt": {
                        "description": (
                            "Encrypt and authenticate every durable cache entry with Airflow's Fernet key "
                            "([core] fernet_key). An entry that was edited, injected or written with another "
                            "key is then rejected and never replayed. Off, entries carry a checksum that "
                            "catches damage but not a deliberate edit by someone with write access."
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "durable_budget_across_tries": {
                        "description": (
                            "Make a durable task's usage_limits count the live usage of every try of the task "
                            "instance, not of each try alone: what each try spent live is kept in the cache beside "
                            "the steps, and a try that would go past a limit fails before the request, naming the "
                            "limit and what earlier tries spent. Replayed steps never count twice. "
                            "AgentOperator(budget_across_tries=...) overrides it per task; deleting the cache "
                            "starts a new budget."
                        ),
                        "version_added": "0.3.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "durable_on_unknown_outcome": {
                        "description": (
                            "What a durable task does with an at_most_once() tool call that an earlier try started "
                            "and never finished (the try was cut off while it ran), unless a task sets "
                            "on_unknown_outcome=. ask stops and asks a person on the task's Required Actions page "
                            "whether it happened (no worker slot is held; where nobody can be asked it behaves as "
                            "fail); fail fails the task, naming the call and the airflow pydantic-ai cache resolve "
                            "command; rerun runs the call again with a WARNING. One of: ask, fail, rerun."
                        ),
                        "version_added": "0.3.0",
                        "type": "string",
                        "example": "fail",
                        "default": "ask",
                    },
                    "cache_view": {
                        "description": (
                            'Show the "Durable cache" view on task instance pages of the Airflow UI (and '
                            "serve its endpoints on the api-server under /pydantic-ai/cache). False removes "
                            "the view and its endpoints; restart the api-server after changing it."
                        ),
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                },
            }
        },
    }
