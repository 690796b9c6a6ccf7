"""Where the cache lives during the benchmark: a temporary directory, or a local S3 server.

Both backends hand the durable store a :class:`CountingFS`, which counts the filesystem calls the
store makes and the bytes they read. On S3 every request on the wire is counted as well (by
operation name, from botocore's ``before-call`` event), so "one listing and one batched fetch"
shows up as what it costs on S3: one LIST and one GET per object.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec

from airflow_pydantic_ai.durable import StepStore, TaskIdentity
from airflow_pydantic_ai.durable.storage.local_files import write_atomically

__all__ = ["Backend", "CountingFS", "FloorResult", "LocalBackend", "S3Backend", "open_backend"]

BUCKET = "durable-bench"


class CountingFS:
    """An fsspec filesystem that counts the calls (and bytes) the durable store makes through it."""

    def __init__(self, fs: Any):
        self._fs = fs
        self.calls: Counter[str] = Counter()
        self.bytes_read = 0
        self.bytes_written = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def reset(self) -> None:
        self.calls.clear()
        self.bytes_read = 0
        self.bytes_written = 0

    def ls(self, path: str, *args: Any, **kwargs: Any) -> Any:
        self.calls["ls"] += 1
        return self._fs.ls(path, *args, **kwargs)

    def cat(self, path: str | Sequence[str], *args: Any, **kwargs: Any) -> Any:
        self.calls["cat"] += 1
        result = self._fs.cat(path, *args, **kwargs)
        if isinstance(result, dict):
            self.calls["cat_paths"] += len(result)
            self.bytes_read += sum(len(data) for data in result.values() if isinstance(data, bytes))
        else:
            self.calls["cat_paths"] += 1
            self.bytes_read += len(result)
        return result

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
        self.calls["cat_file"] += 1
        data = self._fs.cat_file(path, *args, **kwargs)
        self.bytes_read += len(data)
        return data

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> Any:
        self.calls["pipe_file"] += 1
        self.bytes_written += len(value)
        return self._fs.pipe_file(path, value, *args, **kwargs)

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        self.calls[f"open:{mode}"] += 1
        return self._fs.open(path, mode, *args, **kwargs)

    def rm_file(self, path: str) -> Any:
        self.calls["rm_file"] += 1
        return self._fs.rm_file(path)


@dataclass
class FloorResult:
    """Each payload written once (same write method as the store) and read back once (same read)."""

    objects: int
    bytes_written: int
    bytes_read: int
    write_wall: float
    read_wall: float
    write_requests: int
    read_requests: int


@dataclass
class Backend:
    name: str
    fs: CountingFS
    base: str
    base_url: str
    wire: Counter[str] = field(default_factory=Counter)
    """Requests on the wire by operation (S3 only; empty for local disks)."""

    def store_for(self, identity: TaskIdentity, warn: Any) -> StepStore:
        return StepStore.for_task(self.fs, self.base, self.base_url, identity, warn=warn)

    def reset_counters(self) -> None:
        self.fs.reset()
        self.wire.clear()

    def write_requests(self, store: StepStore) -> int:
        """Write requests of the last phase: PUTs on the wire on S3, atomic file writes on disk."""
        return self.wire["PutObject"] if self.wire else store.objects_written

    def read_requests(self) -> int:
        """Read requests of the last phase: LIST + GET on the wire on S3, listings + files read on disk."""
        if self.wire:
            return self.wire["ListObjectsV2"] + self.wire["ListObjects"] + self.wire["GetObject"]
        return self.fs.calls["ls"] + self.fs.calls["cat_paths"] + self.fs.calls["cat_file"]

    def stored_bytes(self, store: StepStore) -> int:
        """What is actually under the store's prefix, measured on the storage itself."""
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(store.root)
        return int(self.fs.du(store.root, total=True))

    def write_object(self, path: str, data: bytes) -> None:
        """Write one object the way the store writes an entry."""
        raise NotImplementedError

    def floor(self, root: str, objects: int, size: int) -> FloorResult:
        """Write ``objects`` objects of ``size`` bytes under ``root``, then list and read them back once."""
        blobs = [(f"{root}/object-{index:05d}.json", _floor_blob(index, size)) for index in range(objects)]
        self.reset_counters()
        started = time.perf_counter()
        for path, data in blobs:
            self.write_object(path, data)
        write_wall = time.perf_counter() - started
        write_requests = self.wire["PutObject"] if self.wire else objects
        self.reset_counters()
        started = time.perf_counter()
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(root)
        paths = [str(path) for path in self.fs.ls(root, detail=False)]
        contents = self.fs.cat(paths)
        read_wall = time.perf_counter() - started
        read_requests = self.read_requests()
        bytes_read = sum(len(data) for data in contents.values())
        assert bytes_read == objects * size, (bytes_read, objects * size)
        self.fs.rm(root, recursive=True)
        return FloorResult(
            objects=objects,
            bytes_written=objects * size,
            bytes_read=bytes_read,
            write_wall=write_wall,
            read_wall=read_wall,
            write_requests=write_requests,
            read_requests=read_requests,
        )

    def close(self) -> None:
        pass


def _floor_blob(index: int, size: int) -> bytes:
    seed = f"{index:08x}".encode() * 8
    return (seed * (size // len(seed) + 1))[:size]


class LocalBackend(Backend):
    """A temporary directory on the local disk (``file://``)."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="durable-bench-")
        self._writer = StepStore(fs=fsspec.filesystem("file"), root=self._directory, location="")
        super().__init__(
            name="file",
            fs=CountingFS(fsspec.filesystem("file")),
            base=self._directory,
            base_url=f"file://{self._directory}",
        )

    def write_object(self, path: str, data: bytes) -> None:
        # The store's own atomic write of an entry: temporary file, rename (no fsync, as for single entries).
        write_atomically(self._writer.local_files, path, data, created=self._writer.created_folders)

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)


class S3Backend(Backend):
    """A moto S3 server on 127.0.0.1, in this process (it shares the GIL with the benchmark)."""

    def __init__(self) -> None:
        import boto3
        import s3fs
        from aiobotocore.session import AioSession
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.served: Counter[str] = Counter()
        """Requests the server answered by operation, whoever sent them (a command in a subprocess too)."""
        _count_requests(self._server, self.served)
        host, port = self._server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        credentials = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench", "region_name": "us-east-1"}
        boto3.client("s3", endpoint_url=endpoint, **credentials).create_bucket(Bucket=BUCKET)
        wire: Counter[str] = Counter()
        session = AioSession()

        def count(model: Any, **_: Any) -> None:
            wire[model.name] += 1

        session.register("before-call.s3", count)
        fs = s3fs.S3FileSystem(
            key="bench",
            secret="bench",
            client_kwargs={"endpoint_url": endpoint, "region_name": "us-east-1"},
            session=session,
            skip_instance_cache=True,
        )
        super().__init__(name="s3", fs=CountingFS(fs), base=BUCKET, base_url=f"s3://{BUCKET}", wire=wire)
        self.endpoint = endpoint

    def write_object(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)  # what the store does on object stores: one PUT

    def close(self) -> None:
        self._server.stop()


def _count_requests(server: Any, served: Counter[str]) -> None:
    """Count every request ``server`` (a started ``ThreadedMotoServer``) answers in ``served``."""
    wsgi_server = server._server  # werkzeug's server: its handlers call ``self.server.app``
    app = wsgi_server.app

    def counting_app(environ: dict[str, Any], start_response: Any) -> Any:
        served[_s3_operation(environ)] += 1
        return app(environ, start_response)

    wsgi_server.app = counting_app


def _s3_operation(environ: dict[str, Any]) -> str:
    """The S3 operation of a path-style request, as botocore names it (the ones this benchmark sends)."""
    method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
    on_object = "/" in environ.get("PATH_INFO", "").strip("/")
    if method == "GET" and not on_object:
        return "ListObjectsV2" if "list-type=2" in query else "ListObjects"
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    names = {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject", "DELETE": "DeleteObject"}
    if on_object and method in names:
        return names[method]
    return f"{method} {'object' if on_object else 'bucket'}"


def open_backend(name: str) -> Backend:
    if name == "file":
        return LocalBackend()
    if name == "s3":
        return S3Backend()
    raise ValueError(f"unknown backend {name!r} (file or s3)")
