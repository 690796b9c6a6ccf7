"""``cache list`` over many caches on the local moto S3 server: wall time and S3 requests.

Run: ``.venv/bin/python -m bench.cache_list [--caches 1000] [--entries 10] [--no-cli]``.

It writes ``--caches`` task instance caches of ``--entries`` real entries each (a model answer and
tool results of about 1 KB, encoded as a task encodes them) under ``s3://bench/cache``, then measures

- the catalog alone (:func:`~airflow_pydantic_ai.durable.catalog.list_caches`, in this process), with
  every S3 request counted by operation (botocore's ``before-call`` event): the listing must cost a
  thousand keys per ``ListObjectsV2`` and never a GET per entry;
- the floor: the same keys listed with boto3 alone (what the moto server costs; it runs in this
  process and shares its CPU);
- the whole command, ``airflow pydantic-ai cache list -o json`` in a subprocess against a freshly
  migrated SQLite metadata DB (interpreter start, Airflow's CLI, the listing, the task state lookups
  and the output), unless ``--no-cli``.

Not a test: the figures go into the report and docs/cli.rst. The target is under 10 s for 1,000
caches of 10 entries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_pydantic_ai.durable import TaskIdentity
from airflow_pydantic_ai.durable.entry import StepEntry
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
    from airflow_pydantic_ai.durable.catalog import list_caches

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


def time_cli(endpoint: str, caches: int) -> float:
    """Wall time of ``airflow pydantic-ai cache list -o json`` in a subprocess (after ``airflow db migrate``)."""
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
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    started = time.perf_counter()
    result = subprocess.run(
        [airflow, "pydantic-ai", "cache", "list", "-o", "json"], env=env, capture_output=True, text=True, timeout=600
    )
    elapsed = time.perf_counter() - started
    print(f"airflow pydantic-ai cache list -o json: {elapsed:.2f} s wall time (exit {result.returncode})", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"cache list failed: {result.stderr[-2000:]}")
    lines = result.stdout.splitlines()  # a log line may come before the document
    rows = json.loads(next(line for line in lines if line.startswith(("[{", "[]"))))
    if len(rows) != caches:
        raise SystemExit(f"cache list printed {len(rows)} rows, expected {caches}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_list", description=__doc__.split("\n")[0])
    parser.add_argument("--caches", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=10)
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
        elapsed, found, requests = time_catalog(backend)
        print(f"catalog: {found} caches in {elapsed:.2f} s; S3 requests: {requests}", flush=True)
        print(f"floor: the same keys listed with boto3 alone in {time_floor(backend):.2f} s", flush=True)
        if found != args.caches:
            raise SystemExit(f"the catalog found {found} caches, expected {args.caches}")
        if not args.no_cli:
            time_cli(backend.endpoint, args.caches)
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
