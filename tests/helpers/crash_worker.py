"""A durable agent run in a process of its own, to be killed at chosen moments.

``python -m tests.helpers.crash_worker serve`` (cwd and PYTHONPATH = the repo root) imports the durable
package once, then forks one fresh child process per job it reads on stdin (one JSON object a line),
so that each job costs milliseconds instead of a second of imports. The parent learns each child's
pid and may ``SIGKILL`` it; the children are ordinary processes (a kill is a real crash: no
``finally``, no ``atexit``, no flush). Protocol, one JSON reply a line on stdout:

- ``{"op": "spawn", "job": {...}}`` -> ``{"pid": N}``
- ``{"op": "wait", "pid": N}`` -> ``{"pid": N, "exit": code}`` (negative: killed by that signal)
- ``{"op": "exit"}``

``python -m tests.helpers.crash_worker run JOB_JSON`` runs one job in the current process instead.

A job runs a :class:`~airflow_pydantic_ai.durable.Attempt` on a ``file://`` store (no Airflow
run): a ``FunctionModel`` asks for ``steps`` sequential calls of the ``work`` tool, then answers with
all their results. Every model answer and every completed tool call appends a line to the marker
file (``model N ATTEMPT`` / ``tool N ATTEMPT``, both 1-based) *after* it completed and *before* the
durable layer stores it. The result (output, counts, replayed entry names, warnings) is written as
JSON to ``job["result"]``.

Kill points: ``job["kill_at"] = "KIND:N"`` makes the N-th event of KIND create ``job["ready"]`` and
block until the parent kills the process. Kinds:

- ``tool-start`` (a tool began; its side effect has not happened), ``tool-done`` (its side effect
  happened, nothing is stored yet), ``model-done`` (the model answered, nothing is stored yet);
- ``put-partial`` (half of an entry's bytes are in the temporary file), ``put-before-rename`` (the
  temporary file is complete and synced, not yet renamed), ``put-after-rename`` (the entry is in
  place), hooked on the ``os`` calls of the real ``StepStore._put_local``;
- ``torn-direct``: the store writes entries straight to their final name (as a filesystem without
  atomic rename would), and the N-th write stops half-way: a truncated entry under its real name;
- the success window, with ``job["finish"]`` (``job["record_output"]`` records the output only):
  ``output-recorded:1`` (the output is recorded, as the operator does before its XCom push),
  ``delete:N`` (``finish()`` has deleted N entries: steps newest first, the result entry last),
  ``deleted:1`` (``finish()`` returned).

- packing (a try that fails, with ``job["fail_at_step"]`` and ``job["ending"]``, packs what it saw):
  ``pack-partial:1`` (half of the pack's bytes are in its temporary file), ``pack-written:1`` (the pack
  is in place, no single entry is removed yet), ``delete:N`` (N of the objects it replaces are removed);
  ``job["pack_only"]`` loads the cache and packs it at once (after the barrier ``job["pack_after"]``),
  as two tries ending together do (``pack-done:1``: it packed).

- side effects (issue 29; ``docs/side_effects.rst``), hooked on the store's writes (the ``local_files`` seam on
  disk, the filesystem's ``pipe_file`` on S3) and in the tool: ``before-mark`` (an at-most-once call's
  ``started`` entry is about to be stored: nothing of it is in the cache), ``after-result`` (a tool call's entry
  is in place), ``polling`` (a checkpointed tool saved its job id and waits for the job).

Side-effect jobs: ``job["at_most_once"]`` marks the ``work`` tool ``at_most_once()``, ``job["on_unknown"]`` and
``job["can_ask"]`` are the attempt's ``OutcomeRules`` (an ``AskAboutOutcome`` puts the call asked about in the
result as ``asked``), ``job["answer"] = {"key": ..., "happened": VALUE}`` records a person's answer about that
call before the agent runs, as the Airflow side does on the try that resumes; ``job["idempotency_key"]`` adds
the tool's ``idempotency_key()`` to its marker line (``tool N ATTEMPT KEY``); ``job["checkpointed"]`` makes the
tool submit a job (a ``submit N ATTEMPT`` line) unless ``tool_checkpoint()`` holds its id, save the id, then
poll. ``job["s3_endpoint"]``: the store is on that S3 server (``job["base"]`` is ``bucket/prefix``).

Like the operator, a job whose cache holds the output recorded by the previous attempt returns it
without running the agent, and records it again as its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from tests.helpers.durable import RecordingLog, task_identity

IDENTITY = task_identity("crash_dag", "agent")
KILL_KINDS = (
    "tool-start",
    "tool-done",
    "model-done",
    "put-partial",
    "put-before-rename",
    "put-after-rename",
    "torn-direct",
)
PACK_KINDS = ("pack-partial", "pack-written", "pack-done")
SIDE_EFFECT_KINDS = ("before-mark", "after-result", "polling")
SUCCESS_WINDOW_KINDS = ("output-recorded", "delete", "deleted")
_BLOCK_SECONDS = 30.0


def cache_root(base: Path) -> Path:
    """The folder of IDENTITY's steps under the cache base ``base``."""
    return base.joinpath(*IDENTITY.segments())


def tool_result(prompt: str, step: int) -> str:
    """What the ``work`` tool returns for ``step`` (0-based): distinct per step and per prompt."""
    return f"r{step}-{hashlib.sha256(f'{prompt}/{step}'.encode()).hexdigest()[:10]}"


def expected_output(prompt: str, steps: int) -> str:
    return "final: " + "|".join(tool_result(prompt, step) for step in range(steps))


# --- the job, inside the child ---------------------------------------------------------------------


class _KillPoints:
    def __init__(self, spec: str | None, ready: str | None):
        self.counts: Counter[str] = Counter()
        self.kind, self.number = None, 0
        if spec:
            kind, _, number = spec.partition(":")
            assert kind in KILL_KINDS + SUCCESS_WINDOW_KINDS + PACK_KINDS + SIDE_EFFECT_KINDS, spec
            self.kind, self.number = kind, int(number)
        self.ready = ready

    def due(self, kind: str) -> bool:
        """Count an event of ``kind``; whether the process must stop at it."""
        self.counts[kind] += 1
        return kind == self.kind and self.counts[kind] == self.number

    def block(self) -> None:
        assert self.ready
        with open(self.ready, "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(_BLOCK_SECONDS)  # the parent kills us long before this
        os._exit(3)

    def hit(self, kind: str) -> None:
        if self.due(kind):
            self.block()

    def before_entry(self, path: str) -> None:
        """An entry is about to be stored at ``path`` (nothing of it is in the cache yet)."""
        if _kind_of(path) == "started":
            self.hit("before-mark")

    def after_entry(self, path: str) -> None:
        """The entry at ``path`` is in place."""
        if _kind_of(path) == "tool":
            self.hit("after-result")


def _kind_of(path: str) -> str | None:
    from airflow_pydantic_ai.durable.storage.entry import entry_kind

    return entry_kind(path.rsplit("/", 1)[-1])


class _KillingLocalFiles:
    """The store's local-disk calls (its ``local_files`` seam), with kill points on them."""

    def __init__(self, points: _KillPoints):
        from airflow_pydantic_ai.durable.storage.store import LocalFiles

        self._real = LocalFiles()
        self._points = points

    def create(self, path: str) -> Any:
        return _PartialWriter(self._real.create(path), self._points)

    def replace(self, src: str, dst: str) -> None:
        if dst.endswith(".pack"):
            self._real.replace(src, dst)
            self._points.hit("pack-written")
            return
        self._points.before_entry(dst)
        self._points.hit("put-before-rename")
        self._real.replace(src, dst)
        self._points.hit("put-after-rename")
        self._points.after_entry(dst)


_PACK_START = b'{"format":"airflow-pydantic-ai/pack"'


class _PartialWriter:
    def __init__(self, handle: Any, points: _KillPoints):
        self._handle = handle
        self._points = points

    def __enter__(self) -> _PartialWriter:
        self._handle.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._handle.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def write(self, data: bytes) -> int:
        kind = "pack-partial" if data.startswith(_PACK_START) else "put-partial"
        if self._points.due(kind):
            self._handle.write(data[: len(data) // 2])
            self._handle.flush()
            self._points.block()
        return self._handle.write(data)


class _WrappedFileSystem:
    """A filesystem that passes every call on to ``real`` but those it defines, which may stop at kill points."""

    def __init__(self, real: Any, points: _KillPoints):
        self._real = real
        self._points = points

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _TornFileSystem(_WrappedFileSystem):
    """A local filesystem without atomic rename: entries are written in place, and can be torn."""

    protocol = "torn-local"  # not "file": StepStore then writes with pipe_file, as on object stores

    def rm(self, paths: Any, **kwargs: Any) -> None:
        """Delete files; like an object store, a folder left empty is gone with its last file."""
        if isinstance(paths, str):
            self._real.rm(paths, **kwargs)
            return
        for path in paths:
            self._real.rm_file(path)
        for folder in {os.path.dirname(path) for path in paths}:
            with contextlib.suppress(OSError):
                os.rmdir(folder)

    def pipe_file(self, path: str, data: bytes, **_: Any) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            if self._points.due("torn-direct"):
                handle.write(data[: len(data) // 2])
                handle.flush()
                self._points.block()
            handle.write(data)


class _KillingObjectStore(_WrappedFileSystem):
    """An object store (S3) whose PUTs of entries are kill points: before the request is sent, after it returned."""

    def pipe_file(self, path: str, data: bytes, **kwargs: Any) -> Any:
        self._points.before_entry(path)
        done = self._real.pipe_file(path, data, **kwargs)
        self._points.after_entry(path)
        return done


def _s3_filesystem(endpoint_url: str) -> Any:
    """An ``s3fs`` filesystem on the local (moto) S3 server at ``endpoint_url``."""
    import s3fs

    return s3fs.S3FileSystem(
        key="x",
        secret="x",
        client_kwargs={"endpoint_url": endpoint_url, "region_name": "us-east-1"},
        skip_instance_cache=True,
    )


class _CountedDeletes(_WrappedFileSystem):
    """A filesystem whose ``rm_file`` calls are kill points (``delete:N``: after the N-th deletion)."""

    def rm_file(self, path: str, **kwargs: Any) -> None:
        # Counted whether or not the file was still there: two tries removing the same singles race, and
        # the one that comes second finds some gone (the store takes that as done).
        try:
            self._real.rm_file(path, **kwargs)
        finally:
            if path.endswith((".json", ".pack")):
                self._points.hit("delete")


def _wait_for(path: str | None) -> None:
    """A barrier: return once ``path`` exists (at most 20 s)."""
    deadline = time.monotonic() + 20
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.001)


def _mark(marker: str, line: str) -> None:
    with open(marker, "a") as handle:
        handle.write(line + "\n")
        handle.flush()


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run one durable attempt as ``job`` describes; return what happened (also written to job["result"])."""
    import fsspec
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from airflow_pydantic_ai.durable import Attempt, AttemptOptions, StepStore, run_agent
    from airflow_pydantic_ai.durable.side_effects import AskAboutOutcome, OutcomeRules, at_most_once

    if job.get("start_after"):  # a barrier: several jobs start together
        deadline = time.monotonic() + 20
        while not os.path.exists(job["start_after"]) and time.monotonic() < deadline:
            time.sleep(0.001)

    attempt = int(job["attempt"])
    prompt = str(job.get("prompt", "run the crash drill"))
    steps = int(job.get("steps", 8))
    marker = job["marker"]
    tool_sleep = float(job.get("tool_sleep", 0.0))
    points = _KillPoints(job.get("kill_at"), job.get("ready"))

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
        done = len(returns)
        if done < steps:
            response = ModelResponse(parts=[ToolCallPart("work", {"step": done}, tool_call_id=f"call-{done}")])
        else:
            response = ModelResponse(parts=[TextPart("final: " + "|".join(str(part.content) for part in returns))])
        _mark(marker, f"model {done + 1} {attempt}")
        points.hit("model-done")
        return response

    agent: Agent[Any, str] = Agent(FunctionModel(model))

    @agent.tool_plain(metadata=at_most_once() if job.get("at_most_once") else None)
    def work(step: int) -> str:
        """Do one step of work (a side effect)."""
        points.hit("tool-start")
        if job.get("checkpointed"):
            return _resumable_work(step)
        if job.get("fail_at_step") == step:  # the try fails here; with job["ending"], it packs what it saw
            raise RuntimeError(f"step {step} failed (on purpose)")
        if job.get("hold_until") and step == int(job.get("hold_at_step", 0)):  # a zombie late on purpose
            deadline = time.monotonic() + 20
            while not os.path.exists(job["hold_until"]) and time.monotonic() < deadline:
                time.sleep(0.001)
        if tool_sleep:
            time.sleep(tool_sleep)
        result = tool_result(prompt, step)
        key = f" {_idempotency_key()}" if job.get("idempotency_key") else ""
        _mark(marker, f"tool {step + 1} {attempt}{key}")
        points.hit("tool-done")
        return result

    def _resumable_work(step: int) -> str:
        """Submit an external job once (its id saved at once), then poll it until it is done."""
        from airflow_pydantic_ai import tool_checkpoint

        checkpoint = tool_checkpoint()
        job_id = checkpoint.get("job_id")
        if job_id is None:
            job_id = f"job-{step + 1}-{attempt}"
            _mark(marker, f"submit {step + 1} {attempt}")
            checkpoint.save("job_id", job_id)
        points.hit("polling")
        _mark(marker, f"tool {step + 1} {attempt}")
        return f"{job_id} done"

    log = RecordingLog()
    base = job["base"]
    filesystem: Any
    if job.get("s3_endpoint"):
        filesystem, url = _KillingObjectStore(_s3_filesystem(job["s3_endpoint"]), points), f"s3://{base}"
    else:
        filesystem, url = fsspec.filesystem("file"), f"file://{base}"
    if points.kind == "torn-direct":
        filesystem = _TornFileSystem(filesystem, points)
    if points.kind == "delete":
        filesystem = _CountedDeletes(filesystem, points)
    store = StepStore.for_task(filesystem, base, url, IDENTITY, warn=log.warning)
    store.local_files = _KillingLocalFiles(points)  # type: ignore[assignment]
    rules = OutcomeRules(on_unknown=job.get("on_unknown", "ask"), can_ask=bool(job.get("can_ask")))
    options = AttemptOptions(storage_errors=job.get("storage_errors", "warn"), unknown_outcome=rules)
    run = Attempt.open(store, attempt=attempt, log=log, options=options)
    if job.get("answer"):
        _record_answer(run, job["answer"])
    started = time.monotonic()
    outcome: dict[str, Any] = {"pid": os.getpid()}
    if job.get("pack_only"):  # a try that loaded the cache and ends now: it packs (a zombie's double, too)
        if job.get("loaded"):  # tells the test the cache is loaded, so both tries pack what they both saw
            with open(job["loaded"], "w") as handle:
                handle.write("loaded")
        _wait_for(job.get("pack_after"))
        run.pack_for_next_try()
        points.hit("pack-done")
    recorded = run.recorded_output()
    outcome["returned_recorded_output"] = recorded is not None
    # With job["ending"], as the operator runs it: a try that fails packs what it saw, then logs its summary.
    ending = run.ending() if job.get("ending") else contextlib.nullcontext()
    try:
        with ending:
            if job.get("pack_only"):
                pass
            elif recorded is not None:
                outcome["output"] = recorded.value
            else:
                outcome["output"] = run_agent(run, agent, prompt).output
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"
        if isinstance(error, AskAboutOutcome):
            call = error.call
            outcome["asked"] = {"key": call.key, "attempt": call.started.attempt, "started_at": call.started.started_at}
    finally:
        if not job.get("ending"):
            run.log_summary()
    if (job.get("finish") or job.get("record_output")) and "output" in outcome:
        if job.get("record_after"):  # a barrier: record only once that file exists (a zombie late on purpose)
            deadline = time.monotonic() + 20
            while not os.path.exists(job["record_after"]) and time.monotonic() < deadline:
                time.sleep(0.001)
        run.record_output(outcome["output"])
        points.hit("output-recorded")
        if job.get("finish"):
            run.finish()
            points.hit("deleted")
    outcome.update(
        seconds=time.monotonic() - started,
        replayed={"model": run.stats.replayed.model, "tool": run.stats.replayed.tool},
        executed={"model": run.stats.executed.model, "tool": run.stats.executed.tool},
        replayed_entries=run.stats.replayed_entries,
        loaded_entries=sorted(run.entries),
        infos=log.at("info"),
        warnings=log.at("warning"),
        errors=log.at("error"),
        summary=run.stats.summary(),
        root=store.root,
    )
    if job.get("result"):
        temporary = job["result"] + ".part"
        with open(temporary, "w") as handle:
            json.dump(outcome, handle)
        os.replace(temporary, job["result"])
    return outcome


def _idempotency_key() -> str:
    from airflow_pydantic_ai import idempotency_key

    return idempotency_key()


def _record_answer(run: Any, answer: dict[str, Any]) -> None:
    """Record a person's answer "it happened" about the call in doubt under ``answer["key"]`` (found again in the
    cache, as the Airflow side does when the try resumes)."""
    from airflow_pydantic_ai.durable.side_effects import CallInDoubt, Resolution
    from airflow_pydantic_ai.durable.storage.entry import entry_name

    doubt = CallInDoubt.of_mark(run.entries[entry_name("started", answer["key"])])
    if "happened" in answer:
        resolution = Resolution.happened(doubt.started, answer["happened"], answered_by="ana", via="the kill trials")
    else:
        resolution = Resolution(answer["answer"], doubt.started.attempt, doubt.started.started_at, answered_by="ana")
    run.resolve(doubt, resolution)


# --- the fork server --------------------------------------------------------------------------------


def _child(job: dict[str, Any]) -> int:
    log_path = job.get("log") or os.devnull
    descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        run_job(job)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def serve() -> None:
    # Import everything a job needs once, before any fork (no thread or event loop exists yet).
    import fsspec  # noqa: F401
    from pydantic_ai import Agent  # noqa: F401
    from pydantic_ai.models.function import FunctionModel  # noqa: F401

    import airflow_pydantic_ai.durable  # noqa: F401
    from airflow_pydantic_ai.durable.side_effects import AskAboutOutcome, OutcomeRules, at_most_once  # noqa: F401

    with contextlib.suppress(ImportError):  # the S3 jobs' client (no thread starts before its first request)
        import s3fs  # noqa: F401

    out = sys.stdout

    def reply(data: dict[str, Any]) -> None:
        out.write(json.dumps(data) + "\n")
        out.flush()

    reply({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command["op"]
        if op == "spawn":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(command["job"])
                finally:
                    os._exit(code)
            reply({"pid": pid})
        elif op == "wait":
            _, status = os.waitpid(int(command["pid"]), 0)
            reply({"pid": command["pid"], "exit": os.waitstatus_to_exitcode(status)})
        elif op == "exit":
            break


# --- the parent's side ------------------------------------------------------------------------------


class ForkServer:
    """The parent's handle on a ``serve`` process (start it once per test module)."""

    def __init__(self) -> None:
        import subprocess

        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.crash_worker", "serve"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        hello = self._read()
        assert hello.get("ready"), hello

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited (code {self.process.poll()})")
        return json.loads(line)

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read()

    def spawn(self, job: dict[str, Any]) -> int:
        return int(self._ask({"op": "spawn", "job": job})["pid"])

    def wait(self, pid: int) -> int:
        """The child's exit code (negative: the signal that killed it)."""
        return int(self._ask({"op": "wait", "pid": pid})["exit"])

    def kill_at(self, job: dict[str, Any], point: str, *, within: float = 10.0) -> int:
        """Spawn ``job`` to stop at the kill point ``point`` (``KIND:N``), SIGKILL it there; its exit code."""
        ready = job["result"] + ".ready"
        pid = self.spawn({**job, "kill_at": point, "ready": ready})
        deadline = time.monotonic() + within
        while not os.path.exists(ready):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                self.wait(pid)
                log = Path(job["log"]).read_text()[-3000:] if job.get("log") and os.path.exists(job["log"]) else ""
                raise AssertionError(f"kill point {point} was never reached: {log}")
            time.sleep(0.0005)
        os.kill(pid, signal.SIGKILL)
        return self.wait(pid)

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Spawn a job, wait for it, return its result (raises with its log when it failed)."""
        pid = self.spawn(job)
        code = self.wait(pid)
        if code != 0 or not os.path.exists(job["result"]):
            log = ""
            if job.get("log") and os.path.exists(job["log"]):
                with open(job["log"]) as handle:
                    log = handle.read()
            raise RuntimeError(f"job exited with {code}: {log[-3000:]}")
        with open(job["result"]) as handle:
            return json.load(handle)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
                self.process.wait()


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        serve()
    elif argv[:1] == ["run"]:
        outcome = run_job(json.loads(argv[1]))
        print(json.dumps(outcome), flush=True)
    else:
        raise SystemExit("usage: python -m tests.helpers.crash_worker serve | run JOB_JSON")


if __name__ == "__main__":
    main(sys.argv[1:])
