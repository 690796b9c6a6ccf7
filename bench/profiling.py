"""``--profile``: where a recording run and a replay spend their time (cProfile), for the target cell."""

from __future__ import annotations

import cProfile
import io
import pstats
from typing import Any

from airflow_pydantic_ai.durable import Attempt, TaskIdentity, run_agent
from bench.runner import quiet_logger
from bench.storage import Backend
from bench.workload import NO_LIMITS, PROMPT, Workload

__all__ = ["profile_cell"]


def _top(profile: cProfile.Profile, sort: str, limit: int, pattern: str | None = None) -> str:
    stream = io.StringIO()
    stats = pstats.Stats(profile, stream=stream)
    if pattern is None:
        stats.strip_dirs()
    stats.sort_stats(sort)
    if pattern:
        stats.print_stats(pattern, limit)
    else:
        stats.print_stats(limit)
    text = stream.getvalue()
    # Drop pstats' preamble up to the column header.
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text


def _durable_share(profile: cProfile.Profile) -> tuple[float, float]:
    """Own time spent in the durable package, and the whole run's own time, in seconds."""
    stats: Any = pstats.Stats(profile)
    total = 0.0
    durable = 0.0
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        total += tottime
        if "airflow_pydantic_ai" in filename:
            durable += tottime
    return durable, total


def profile_cell(backend: Backend, workload: Workload, limit: int = 25) -> str:
    log, _ = quiet_logger()
    identity = TaskIdentity("bench_durable", "manual__profile", "agent", -1)
    store = backend.store_for(identity, warn=log.warning)
    sections: list[str] = []
    plain_total = 0.0
    for attempt, phase in ((0, "plain run"), (1, "recording (attempt 1)"), (2, "replay (attempt 2)")):
        agent = workload.build_agent()
        profile = cProfile.Profile()

        profile.enable()
        if attempt:
            run_agent(Attempt.open(store, attempt=attempt, log=log), agent, PROMPT, usage_limits=NO_LIMITS)
        else:
            agent.run_sync(PROMPT, usage_limits=NO_LIMITS)
        profile.disable()
        durable, total = _durable_share(profile)
        if not attempt:
            plain_total = total
            sections.append(f"--- {phase}: {total:.2f} s under the profiler")
        else:
            sections.append(
                f"--- {phase}: {total:.2f} s under the profiler ({total - plain_total:+.2f} s vs the plain run); "
                f"{durable:.2f} s in Python functions of airflow_pydantic_ai (not counting the builtins they "
                "call: fsync, json, hashing)"
            )
        sections.append("Top by own time:")
        sections.append(_top(profile, "tottime", limit))
        if attempt:
            sections.append("airflow_pydantic_ai functions by cumulative time:")
            sections.append(_top(profile, "cumulative", limit, "airflow_pydantic_ai"))
    store.clear()
    return "\n".join(sections)
