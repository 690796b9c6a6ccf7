"""``python -m bench``: run the matrix, print the tables and the targets, write the JSON results."""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from airflow_pydantic_ai.durable import TaskIdentity
from bench.probes import FingerprintProbe
from bench.report import bytes_label, evaluate_targets, render_tables, size_label
from bench.runner import CellResult, run_cell, run_with_logging
from bench.storage import Backend, open_backend
from bench.workload import Workload

RESULTS = Path(__file__).resolve().parent / "results"


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


def _sizes(text: str) -> list[int]:
    sizes = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item.endswith("k"):
            sizes.append(int(item[:-1]) * 1024)
        else:
            sizes.append(int(item))
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark durable agent runs: plain vs recording vs full replay, bytes, requests, "
        "fingerprint CPU, against a floor that writes and reads each payload once.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small matrix (N=10,30; 2 reps; 4 parallel calls on file:// only) that runs in ~20 s",
    )
    parser.add_argument(
        "--reps",
        type=int,
        help="repetitions of every cell (default file: 5, 3 when N x calls >= 300; s3: 3, 2 when N x calls >= 100)",
    )
    parser.add_argument("--steps", type=_ints, help="N, comma-separated (default 10,100,300)")
    parser.add_argument("--sizes", type=_sizes, help="S in bytes or with k suffix (default 1k,64k)")
    parser.add_argument(
        "--parallel-steps",
        type=_ints,
        help="N values also run with 4 parallel tool calls per step, on file:// (default 10,100; empty to skip)",
    )
    parser.add_argument(
        "--s3-parallel-steps",
        type=_ints,
        help="the N values of --parallel-steps also run on S3 (default 10: moto costs ~10 ms a request here)",
    )
    parser.add_argument("--backends", default="file,s3", help="file, s3 or both (default file,s3)")
    parser.add_argument("--no-info-run", action="store_true", help="skip the run with INFO logging on")
    parser.add_argument(
        "--at-most-once",
        action="store_true",
        help="mark the tool at_most_once() in every cell (a start mark written before each live call)",
    )
    parser.add_argument("--profile", action="store_true", help="also cProfile the target cell (file://) and print it")
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="only the cells side by side with apache-airflow-providers-common-ai on S3 (N=10,100,300 unless "
        "--steps; 1 KiB steps unless --sizes); `make bench-peer` installs the peer into bench/.peer first",
    )
    parser.add_argument(
        "--no-side-by-side",
        action="store_true",
        help="after the matrix, do not run the side-by-side cells even when the peer is installed in bench/.peer",
    )
    parser.add_argument("--format", choices=("rst", "md"), default="rst", help="table style (default rst)")
    parser.add_argument("--output", type=Path, help="JSON file to write (default bench/results/<timestamp>.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = args.steps or [10, 30]
        args.sizes = args.sizes or [1024, 65536]
        args.parallel_steps = args.parallel_steps if args.parallel_steps is not None else [10]
        args.s3_parallel_steps = args.s3_parallel_steps if args.s3_parallel_steps is not None else []
        args.reps = args.reps or 2
    args.steps = args.steps or [10, 100, 300]
    args.sizes = args.sizes or [1024, 65536]
    if args.parallel_steps is None:
        args.parallel_steps = [10, 100]
    if args.s3_parallel_steps is None:
        args.s3_parallel_steps = [10]
    args.backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    return args


def plan_reps(args: argparse.Namespace, workload: Workload) -> dict[str, int]:
    """Repetitions per backend. S3 gets fewer: the in-process moto server costs ~10 ms per request."""
    reps: dict[str, int] = {}
    for name in args.backends:
        if name == "s3" and workload.parallel > 1 and workload.steps not in args.s3_parallel_steps:
            continue
        if args.reps:
            reps[name] = args.reps
        elif name == "s3":
            reps[name] = 2 if workload.tool_calls >= 100 else 3
        else:
            reps[name] = 3 if workload.tool_calls >= 300 else 5
    return reps


def plan_floor_reps(reps: dict[str, int]) -> dict[str, int]:
    """The floor is cheap on disk (up to 3 repetitions); on S3 it is measured once."""
    return {name: 1 if name == "s3" else min(count, 3) for name, count in reps.items()}


def environment() -> dict[str, Any]:
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = bool(
            subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=False).stdout.strip()
        )
    except OSError:
        commit, dirty = "", False
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "git_commit": commit,
        "git_dirty": dirty,
        "packages": {
            name: version(name)
            for name in ("pydantic-ai-slim", "apache-airflow", "s3fs", "fsspec", "moto", "aiobotocore")
        },
    }


def side_by_side(args: argparse.Namespace, output: Path | None = None) -> int:
    """Ours and the peer's durability on one local S3 server, cell by cell; prints the tables, writes the JSON."""
    from bench.peer import render_side_by_side, run_side_by_side

    began = time.perf_counter()
    started_at = datetime.datetime.now(datetime.UTC)
    env = environment()
    steps = args.steps
    reps = {count: args.reps or (5 if count <= 10 else 3 if count <= 100 else 2) for count in steps}
    size = args.sizes[0] if args.sizes else 1024
    print(f"side by side on S3: N={steps}, S={size} B, repetitions {reps}", file=sys.stderr, flush=True)
    cells, peer = run_side_by_side(steps, size, reps, lambda line: print(line, file=sys.stderr, flush=True))
    elapsed = time.perf_counter() - began
    env["load_average_end"] = os.getloadavg()
    print(
        f"Side by side with {peer['peer']} {peer['peer_version']} on a local S3 server (moto, 127.0.0.1), "
        f"{started_at:%Y-%m-%d %H:%M} UTC, commit {env['git_commit']}{' (dirty tree)' if env['git_dirty'] else ''}, "
        f"{env['cpus']} CPUs, load average {env['load_average'][0]:.2f} -> {env['load_average_end'][0]:.2f}, "
        f"{elapsed:.0f} s in all\n"
    )
    print(render_side_by_side(cells, peer["peer_version"], args.format), flush=True)
    output = output or args.output or RESULTS / f"side-by-side-{started_at:%Y%m%d-%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    document = {"started_at": started_at.isoformat(), "environment": env, **peer}
    document["cells"] = [cell.to_json() for cell in cells]
    output.write_text(json.dumps(document, indent=2, default=str))
    print(f"results: {output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.side_by_side:
        return side_by_side(args)
    began = time.perf_counter()
    started_at = datetime.datetime.now(datetime.UTC)
    env = environment()

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    marked = args.at_most_once
    workloads = [Workload(steps, size, at_most_once=marked) for steps in args.steps for size in args.sizes]
    workloads += [
        Workload(steps, size, parallel=4, at_most_once=marked) for steps in args.parallel_steps for size in args.sizes
    ]
    progress(
        f"durable benchmark: {len(workloads)} workloads x {args.backends}, "
        f"{env['cpus']} CPUs, load average {env['load_average'][0]:.2f}"
    )
    backends: list[Backend] = [open_backend(name) for name in args.backends]
    probe = FingerprintProbe()
    cells: list[CellResult] = []
    info_runs: list[dict[str, Any]] = []
    profile_text = ""
    try:
        # Warm up: imports, pydantic schemas, the S3 connection pool.
        warmup = {backend.name: 1 for backend in backends}
        run_cell(
            backends,
            Workload(5, 1024),
            warmup,
            floor_reps=warmup,
            probe=probe,
            tag="warmup",
            progress=lambda _: None,
        )
        # Everything alive now (Airflow, pydantic-ai, moto) stays alive: keep it out of the collections
        # that run before each timed run, or each would walk the whole heap (~0.2 s here).
        gc.collect()
        gc.freeze()
        for index, workload in enumerate(workloads):
            reps = plan_reps(args, workload)
            progress(f"[{index + 1}/{len(workloads)}] {workload}, repetitions {reps}")
            cells += run_cell(
                backends,
                workload,
                reps,
                floor_reps=plan_floor_reps(reps),
                probe=probe,
                tag=f"n{workload.steps}-s{workload.size}-p{workload.parallel}",
                progress=progress,
            )
        target_workload = Workload(max(args.steps), max(args.sizes), at_most_once=marked)
        local = next((backend for backend in backends if backend.name == "file"), None)
        if not args.no_info_run and local is not None:
            progress(f"INFO logging run: {target_workload}")
            with tempfile.TemporaryDirectory() as directory:
                info_runs.append(
                    run_with_logging(
                        local,
                        target_workload,
                        TaskIdentity("bench_durable", "manual__info", "agent", -1),
                        os.path.join(directory, "task.log"),
                        probe,
                    )
                )
        if args.profile and local is not None:
            from bench.profiling import profile_cell

            progress(f"profiling: {target_workload}")
            profile_text = profile_cell(local, target_workload)
    finally:
        for backend in backends:
            backend.close()

    summaries = [cell.summary() for cell in cells]
    where, targets = evaluate_targets(summaries)
    elapsed = time.perf_counter() - began
    env["load_average_end"] = os.getloadavg()

    out: list[str] = []
    out.append(
        f"Durable benchmark, {started_at:%Y-%m-%d %H:%M} UTC, commit {env['git_commit']}"
        f"{' (dirty tree)' if env['git_dirty'] else ''}, Python {env['python']}, "
        f"pydantic-ai-slim {env['packages']['pydantic-ai-slim']}, {env['cpus']} CPUs, "
        f"load average {env['load_average'][0]:.2f} -> {env['load_average_end'][0]:.2f}, {elapsed:.0f} s in all"
    )
    out.append("")
    out.append(render_tables(summaries, args.format))
    for info in info_runs:
        quiet = next(
            s
            for s in summaries
            if (s["backend"], s["steps"], s["size"], s["parallel"])
            == (info["backend"], info["steps"], info["size"], info["parallel"])
        )
        out.append("")
        out.append(
            f"INFO logging on (one extra record + replay, {info['backend']}, N={info['steps']}, "
            f"S={size_label(info['size'])}): {info['log_lines']} lines written to a log file in "
            f"{info['handler_seconds'] * 1e3:.0f} ms ({info['handler_seconds'] / info['log_lines'] * 1e6:.0f} us "
            f"a line); record {info['record_wall']:.3f} s vs {quiet['record_wall']:.3f} s median at WARNING, "
            f"replay {info['replay_wall']:.3f} s vs {quiet['replay_wall']:.3f} s"
        )
    warned = [s for s in summaries if s["warnings"]]
    if warned:
        out.append("")
        out.append(f"WARNING: {len(warned)} cells logged durable warnings; see the JSON file")
    out.append("")
    out.append(f"Targets, checked on {where}:")
    out.extend(f"  {target.line()}" for target in targets)
    print("\n".join(out), flush=True)
    if profile_text:
        print("\nProfile of the target cell on file:// (cProfile; times inflated by the profiler)\n")
        print(profile_text)

    output = args.output or RESULTS / f"bench-{started_at:%Y%m%d-%H%M%S}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "started_at": started_at.isoformat(),
        "elapsed_seconds": elapsed,
        "environment": env,
        "arguments": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()},
        "targets": {"where": where, "results": [target.__dict__ for target in targets]},
        "info_logging_runs": info_runs,
        "cells": [cell.to_json() for cell in cells],
    }
    output.write_text(json.dumps(document, indent=2, default=str))
    progress(f"results: {output} ({bytes_label(output.stat().st_size)}); {elapsed:.0f} s")
    if "s3" in args.backends and not args.no_side_by_side:
        from bench.peer import peer_available

        if peer_available() is None:
            print("\nSide by side with common.ai: skipped (`make bench-peer` installs the peer and runs it)")
        else:
            print("")
            side_by_side(args, output.with_name(f"{output.stem}-side-by-side.json"))
    return 0
