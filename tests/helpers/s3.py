"""A local S3 (moto) server and per-test buckets for ObjectStoragePath tests."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class S3Bucket:
    """One bucket on the local moto server."""

    CONN_ID = "s3_test"

    name: str
    endpoint_url: str
    client: Any = field(repr=False)

    def url(self, prefix: str = "") -> str:
        """An ``ObjectStoragePath`` URL that takes its credentials from the ``s3_test`` connection."""
        return f"s3://{self.CONN_ID}@{self.name}/{prefix}"

    def list_keys(self, prefix: str = "") -> list[str]:
        """All object keys under ``prefix``, sorted."""
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.name, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return sorted(keys)

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()


class S3Server:
    """A ``moto.server.ThreadedMotoServer`` bound to 127.0.0.1 on a free port."""

    def __init__(self, server: Any, endpoint_url: str) -> None:
        self._server = server
        self.endpoint_url = endpoint_url

    @classmethod
    def start(cls) -> S3Server:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(server, f"http://{host}:{port}")

    def stop(self) -> None:
        self._server.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )

    def counting_filesystem(self) -> tuple[Any, Counter[str]]:
        """An ``s3fs`` filesystem on this server, and the requests it sends on the wire by S3 operation
        (``ListObjectsV2``, ``GetObject``, ``PutObject``, ``DeleteObjects``...), counted from botocore's events."""
        import s3fs
        from aiobotocore.session import AioSession

        sent: Counter[str] = Counter()
        session = AioSession()

        def count(model: Any, **_: Any) -> None:
            sent[model.name] += 1

        session.register("before-call.s3", count)
        fs = s3fs.S3FileSystem(
            key="x",
            secret="x",
            client_kwargs={"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
            session=session,
            skip_instance_cache=True,
        )
        return fs, sent

    def connection_json(self) -> str:
        """The value for ``AIRFLOW_CONN_S3_TEST``."""
        return json.dumps(
            {
                "conn_type": "aws",
                "login": "x",
                "password": "x",
                "extra": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
            }
        )

    def create_bucket(self) -> S3Bucket:
        client = self.client()
        name = f"test-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=name)
        return S3Bucket(name=name, endpoint_url=self.endpoint_url, client=client)
