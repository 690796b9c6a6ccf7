"""Fingerprints are the same in other processes, whatever their ``PYTHONHASHSEED`` (sets in the settings and
request parameters iterate in hash-seed order): each test starts Python child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.fingerprint_specs import fingerprint
from tests.helpers.fingerprint_strategies import collect, specs

REPO_ROOT = Path(__file__).resolve().parents[2]


SCRIPT = textwrap.dedent(
    """
    import json
    from datetime import datetime, timezone
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition
    from airflow_pydantic_ai.durable.keys.fingerprint import MessageDigests, fingerprint_request
    params = ModelRequestParameters(
        function_tools=[ToolDefinition(name=n, parameters_json_schema={"type": "object"}) for n in "abc"],
    )
    params.revealed_tool_names = {"alpha", "beta", "gamma", "delta"}
    fp = fingerprint_request(
        model_identity="test:test",
        messages=[ModelRequest(parts=[UserPromptPart("hi", timestamp=datetime.now(timezone.utc))])],
        settings={"extra_body": {"tags": ["x"]}, "temperature": 0.5},
        parameters=params,
        memo=MessageDigests(),
    )
    print(json.dumps(fp.digest))
    """
)


def test_same_fingerprint_in_processes_with_different_hash_seeds():
    digests = set()
    for seed in ("1", "2", "3"):
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(json.loads(result.stdout.strip().splitlines()[-1]))
    assert len(digests) == 1


def test_same_request_same_fingerprint_across_hash_seeds():
    batch = collect(specs, 80)
    assert len(batch) >= 50
    here = [fingerprint(spec) for spec in batch]
    payload = json.dumps(batch)
    children = {}
    for seed in ("0", "31337"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        children[seed] = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.fingerprint_specs"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for seed, child in children.items():
        out, err = child.communicate(payload, timeout=120)
        assert child.returncode == 0, err
        there = json.loads(out)
        assert len(there) == len(batch)
        for spec, mine, theirs in zip(batch, here, there, strict=True):
            assert mine == theirs, f"PYTHONHASHSEED={seed} gives another fingerprint for {spec}"
    # Distinct requests (volatile fields and transport settings aside) get distinct fingerprints.
    contents = {
        json.dumps(
            {**spec, "volatile": None, "settings": {k: v for k, v in spec["settings"].items() if k != "timeout"}},
            sort_keys=True,
        )
        for spec in batch
    }
    assert len({item["digest"] for item in here}) == len(contents) > 1
