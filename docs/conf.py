"""Sphinx configuration of the airflow-pydantic-ai documentation (``make docs``).

The build is offline and strict: ``-W --keep-going -n`` turns every warning, including a
reference to a page, label or object of this project that does not exist, into an error.
References to other projects (Airflow, pydantic-ai, the standard library) are not resolved,
because resolving them would need their inventories from the network.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

from airflow_pydantic_ai import __version__  # noqa: E402

project = "airflow-pydantic-ai"
author = "airflow-pydantic-ai developers"
copyright = "airflow-pydantic-ai developers"
release = __version__
version = __version__

extensions = [
    "sphinx.ext.autodoc",
    "provider_metadata",
]

exclude_patterns = ["_build"]
root_doc = "index"
language = "en"

html_theme = "furo"
html_title = f"airflow-pydantic-ai {release}"
html_static_path: list[str] = []

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_class_signature = "separated"

# Nitpicky mode checks every cross-reference. Objects of this project must resolve; those of other
# projects cannot without network access to their inventories, so they are let through by name.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(airflow|pydantic_ai|pydantic|pydantic_core|fsspec|structlog|typing|typing_extensions)(\..*)?"),
    (r"py:.*", r"(collections|concurrent|contextlib|dataclasses|datetime|enum|pathlib|types|asyncio|_asyncio)\..*"),
    (
        r"py:.*",
        r"(str|int|float|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|Any|Callable|Exception|"
        r"BaseException|ValueError|TypeError|KeyError|LookupError|ImportError|RuntimeError|TimeoutError|"
        r"OSError|NotImplementedError|Mapping|Sequence|Iterable|Iterator|AsyncIterator|Awaitable|Literal|"
        r"Self|TaskLogger|Context|BaseOperator|BaseHook|Connection|Model|Agent|AbstractToolset|UsageLimits|"
        r"ModelMessage|ModelResponse|ModelSettings|ModelRequestParameters|RunContext|ToolsetTool|ObjectStoragePath|"
        r"DurableRun|AgentRun|Collection|AgentRunResult|WaitingForDecisions|(airflow_pydantic_ai\.durable\.(attempt\.)?writer\.)?TryOutlook|"
        r"(airflow_pydantic_ai\.durable\.(storage\.)?identity\.)?Region|RetryDecision|RetryPolicy|"
        r"(airflow_pydantic_ai\.durable\.attempt\.replay_policy\.)?ReplayPolicy|"
        r"(airflow_pydantic_ai\.durable\.reporting\.budget\.)?RetryBudget|(airflow_pydantic_ai\.durable\.storage\.step_costs\.)?StepCost)",
    ),
    # Attempt's fields name the attempt's internal rooms (documented in architecture.rst, not in the API).
    (
        r"py:class",
        r"airflow_pydantic_ai\.durable\.attempt\.(nesting\.(RunScope|AttemptFamily|Place)|agent_run\.AgentRun|"
        r"attempt\.StepsFound|ending\.AttemptEnd)",
    ),
    # The side-effects face documents these under airflow_pydantic_ai.durable.side_effects; type hints name
    # their home module.
    (
        r"py:class",
        r"airflow_pydantic_ai\.durable\.side_effects\.(once|records|unknown_outcome)\."
        r"(OutcomeRules|CallInDoubt|Resolution|StartedCall)",
    ),
    # DurableCapability keeps one Responses chain per agent run (internal: architecture.rst).
    (r"py:class", r"airflow_pydantic_ai\.durable\.interception\.response_chain\.ResponseChain"),
    # StepStore's pack bookkeeping (storage/surveying.py, internal: architecture.rst).
    (r"py:class", r"airflow_pydantic_ai\.durable\.storage\.surveying\.Holdings"),
    # A ToolCheckpoint belongs to the tool call running now (internal: architecture.rst).
    (r"py:class", r"airflow_pydantic_ai\.durable\.side_effects\.in_flight\.CallInFlight"),
]
