"""Hypothesis strategies for fingerprint specs (see :mod:`tests.helpers.fingerprint_specs`).

Shared by the property tests (tests/unit/test_fingerprint_properties.py) and the cross-process check
(tests/system/test_fingerprint_across_processes.py), which sends the same specs to other processes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**12), max_value=10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=16)
)


json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)


string_sets = st.sets(st.text(min_size=1, max_size=8), min_size=2, max_size=8).map(lambda s: {"__set__": sorted(s)})


timestamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 1, 1), timezones=st.just(UTC)).map(
    lambda moment: moment.isoformat()
)


volatiles = st.fixed_dictionaries(
    {
        "timestamp": timestamps,
        "run_id": st.uuids().map(str),
        "conversation_id": st.uuids().map(str),
        "provider_response_id": st.text(min_size=1, max_size=20),
        "input_tokens": st.integers(min_value=0, max_value=10**6),
        "output_tokens": st.integers(min_value=0, max_value=10**6),
    }
)


turns = st.fixed_dictionaries(
    {
        "tool": names,
        "args": st.dictionaries(names, json_values, min_size=1, max_size=4),
        "call_id": st.text(min_size=1, max_size=10),
        "result": st.text(max_size=40),
    }
)


tool_definitions = st.lists(
    st.fixed_dictionaries(
        {
            "name": names,
            "description": st.text(max_size=40),
            "schema": st.fixed_dictionaries(
                {
                    "type": st.just("object"),
                    "properties": st.dictionaries(
                        names, st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "array"}]), max_size=3
                    ),
                }
            ),
        }
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda tool: tool["name"],
)


model_settings = st.fixed_dictionaries(
    {"temperature": st.floats(min_value=0, max_value=2)},
    optional={
        "max_tokens": st.integers(min_value=1, max_value=10**5),
        "top_p": st.floats(min_value=0, max_value=1),
        "extra_body": st.fixed_dictionaries({"tags": string_sets, "meta": json_values}),
        "timeout": st.floats(min_value=1, max_value=600),
    },
)


specs = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["openai:gpt-4o", "anthropic:claude-sonnet-4-5", "test:test", "function:f:"]),
        "instructions": st.none() | st.text(max_size=60),
        "system": st.none() | st.text(max_size=60),
        "prompt": st.text(max_size=80),
        "turns": st.lists(turns, max_size=3),
        "settings": model_settings,
        "tools": tool_definitions,
        "revealed": st.none() | string_sets,
        "volatile": volatiles,
    }
)


def collect(strategy: Any, count: int) -> list[Any]:
    """``count`` deterministic examples of ``strategy`` (hypothesis's own generation, shrinking off)."""
    found: list[Any] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=["generate"])
    @given(strategy)
    def gather(value: Any) -> None:
        found.append(value)

    gather()
    return found
