"""``cache list`` over many caches on the local moto S3 server: wall time and S3 requests.

Run: ``.venv/bin/python -m bench.cache_list [--caches 1000] [--entries 10] [--repeat 3] [--no-cli]``.

It writes ``--caches`` task instance caches of ``--entries`` real entries each (a model answer and
tool results of about 1 KB, encoded as a task encodes them) under ``s3://durable-bench/cache``, then
measures, ``--repeat`` times, interleaved (the machine may be shared: compare figures of one run)

- the catalog alone (:func:`~airflow_pydantic_ai.durable.storage.catalog.list_caches`, in this process), with
  every S3 request counted by operation (botocore's ``before-call`` event): the listing must cost a
  thousand keys per ``ListObjectsV2`` and never a GET per entry;
- the floor: the same keys listed with boto3 alone (what the moto server costs; it runs in this
  process and shares its CPU);
- ``airflow version``: Airflow's own start-up, the least any ``airflow`` command costs;
- the whole command, ``airflow pydantic-ai cache list -o json`` in a subprocess against a freshly
  migrated SQLite metadata DB (interpreter start, Airflow's CLI, the listing, the task state lookups
  and the output), with the requests the server answered for it, unless ``--no-cli``.

Not a test: the figures go into the report and docs/cli.rst. The target is under 10 s for 1,000
caches of 10 entries.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.storage.entry import StepEntry
from bench.storage import BUCKET, S3Backend

PREFIX = "cache"


def _entries(identity: TaskIdentity, count: int) -> dict[str, bytes]:
    entries = {}
    for number in range(count):
        kind = "model" if number % 3 == 0 else "tool"
        entry = StepEntry(
            kind=kind,
            key=hashlib.sha256(f"{identity}/{number}".encode()).hexdigest(),
            step=number // 3 + 1,
            attempt=1,
            label="openai:gpt-4o" if kind == "model" else "fetch_ticket",
            payload={"outcome": "return", "value": "x" * 900} if kind == "tool" else {"response": {"parts": []}},
            call_id=None if kind == "model" else f"call_{number}",
            recorded_at=time.time(),
        )
        entries[entry.name] = entry.to_bytes(owner=identity.owner())
    return entries


def fill(backend: S3Backend, caches: int, entries: int) -> int:
    """Write the caches (concurrently, a few hundred objects per batch); returns the bytes stored."""
    stored = 0
    batch: dict[str, bytes] = {}
    for index in range(caches):
        identity = TaskIdentity(f"bench_dag_{index % 10}", f"manual__2026-11-{index // 10:04d}", "agent", -1)
        root = f"{BUCKET}/{PREFIX}/" + "/".join(identity.segments())
        for name, data in _entries(identity, entries).items():
            batch[f"{root}/{name}"] = data
            stored += len(data)
        if len(batch) >= 500:
            backend.fs._fs.pipe(batch)
            batch = {}
    if batch:
        backend.fs._fs.pipe(batch)
    return stored


def time_catalog(backend: S3Backend) -> tuple[float, int, dict[str, int]]:
    from airflow_pydantic_ai.durable.storage.catalog import list_caches

    backend.wire.clear()
    started = time.perf_counter()
    found = list_caches(backend.fs._fs, f"{BUCKET}/{PREFIX}", f"s3://{BUCKET}/{PREFIX}")
    elapsed = time.perf_counter() - started
    return elapsed, len(found), dict(backend.wire)


def time_floor(backend: S3Backend) -> float:
    """The same listing with boto3 alone (pages of ``ListObjectsV2``): what the server itself costs."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=backend.endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    )
    started = time.perf_counter()
    for _ in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
        pass
    return time.perf_counter() - started


def cli_environment(endpoint: str) -> dict[str, str]:
    """A fresh ``AIRFLOW_HOME`` (SQLite metadata DB migrated) whose ``durable_cache_path`` is the bench prefix."""
    home = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__PYDANTIC_AI__DURABLE_CACHE_PATH": f"s3://bench_s3@{BUCKET}/{PREFIX}",
        "AIRFLOW_CONN_BENCH_S3": json.dumps(
            {
                "conn_type": "aws",
                "login": "bench",
                "password": "bench",
                "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            }
        ),
    }
    subprocess.run([_airflow(), "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    return env


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


def time_airflow_start(env: dict[str, str]) -> float:
    """Wall time of ``airflow version``: Airflow's own start-up, the least any ``airflow`` command costs."""
    started = time.perf_counter()
    subprocess.run([_airflow(), "version"], env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def time_cli(backend: S3Backend, env: dict[str, str], caches: int) -> tuple[float, dict[str, int]]:
    """Wall time of ``airflow pydantic-ai cache list -o json`` in a subprocess, and the S3 requests it sent."""
    backend.served.clear()
    started = time.perf_counter()
    result = subprocess.run(
        [_airflow(), "pydantic-ai", "cache", "list", "-o", "json"], env=env, capture_output=True, text=True, timeout=600
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"cache list failed (exit {result.returncode}): {result.stderr[-2000:]}")
    lines = result.stdout.splitlines()  # a log line may come before the document
    rows = json.loads(next(line for line in lines if line.startswith(("[{", "[]"))))
    if len(rows) != caches:
        raise SystemExit(f"cache list printed {len(rows)} rows, expected {caches}")
    return elapsed, dict(backend.served)


def bytecode_note() -> str:
    """Whether Airflow's modules start from compiled bytecode; without it every start compiles ~2,000 modules."""
    import airflow

    if Path(importlib.util.cache_from_source(airflow.__file__)).exists():  # honours PYTHONPYCACHEPREFIX
        return "compiled bytecode present"
    return (
        "no compiled bytecode for Airflow (uv installs without it, and PYTHONDONTWRITEBYTECODE keeps Python from "
        "writing it): every command compiles its modules again, several seconds; "
        "`.venv/bin/python -m compileall -q .venv/lib` compiles them once, as pip does at install"
    )


def _spread(values: list[float]) -> str:
    each = ", ".join(f"{value:.2f}" for value in values)
    return f"min {min(values):.2f} s, median {statistics.median(values):.2f} s ({each})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_list", description=__doc__.split("\n")[0])
    parser.add_argument("--caches", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="measure each figure this many times, interleaved")
    parser.add_argument("--no-cli", action="store_true", help="time the catalog only, not the airflow command")
    args = parser.parse_args(argv)

    backend = S3Backend()
    try:
        started = time.perf_counter()
        stored = fill(backend, args.caches, args.entries)
        print(
            f"wrote {args.caches} caches x {args.entries} entries ({stored:,} bytes) "
            f"in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        env = None if args.no_cli else cli_environment(backend.endpoint)
        if env is not None:
            print(f"airflow: {bytecode_note()}", flush=True)
        figures: dict[str, list[float]] = {"catalog": [], "floor": [], "airflow version": [], "cache list": []}
        for repetition in range(1, args.repeat + 1):
            elapsed, found, requests = time_catalog(backend)
            if found != args.caches:
                raise SystemExit(f"the catalog found {found} caches, expected {args.caches}")
            figures["catalog"].append(elapsed)
            figures["floor"].append(time_floor(backend))
            line = f"#{repetition}: catalog {elapsed:.2f} s ({requests}); boto3 alone {figures['floor'][-1]:.2f} s"
            if env is not None:
                figures["airflow version"].append(time_airflow_start(env))
                command, served = time_cli(backend, env, args.caches)
                figures["cache list"].append(command)
                line += (
                    f"; airflow version {figures['airflow version'][-1]:.2f} s; "
                    f"airflow pydantic-ai cache list -o json {command:.2f} s ({served})"
                )
            print(line, flush=True)
        print(f"load average after: {', '.join(f'{load:.1f}' for load in os.getloadavg())}")
        for name, values in figures.items():
            if values:
                print(f"{name}: {_spread(values)}")
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
