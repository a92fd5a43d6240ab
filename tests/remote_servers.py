"""Real local remotes for the remote-storage tests: moto's S3 server and the GCS emulator, each an HTTP
endpoint on 127.0.0.1 started in this process (session scope, shared), reached through the environment
variables the providers' own clients read (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST)."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

#: Fail fast when a server is gone (the clients' defaults retry for many seconds).
S3_OPTIONS: dict[str, Any] = {"retries": 1, "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    """A running moto S3 server; ``restart`` brings it back on the same port with the same objects."""

    port: int
    server: Any

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def new_bucket(self) -> str:
        import s3fs

        name = f"b{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
        return name


@dataclass
class GcsServer:
    """A running in-memory GCS emulator."""

    port: int
    server: Any

    def new_bucket(self) -> str:
        from google.cloud import storage

        name = f"b{uuid.uuid4().hex[:12]}"
        storage.Client.create_anonymous_client().create_bucket(name)
        return name


@pytest.fixture(scope="session", name="s3_server")
def s3_server_fixture() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.delenv("AWS_PROFILE", raising=False)
        handle = S3Server(port, server)
        yield handle
        handle.server.stop()


@pytest.fixture(scope="session", name="gcs_server")
def gcs_server_fixture() -> Iterator[GcsServer]:
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
        mp.setenv("GOOGLE_CLOUD_PROJECT", "test")
        yield GcsServer(port, server)
    server.stop()


def remote_url(kind: str, s3: S3Server | None, gcs: GcsServer | None, tmp: Any) -> str:
    """A fresh empty remote of ``kind`` (s3, gs, file)."""
    if kind == "s3":
        assert s3 is not None
        return f"s3://{s3.new_bucket()}/prefix"
    if kind == "gs":
        assert gcs is not None
        return f"gs://{gcs.new_bucket()}"
    folder = tmp / f"remote-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    return f"file://{folder}"


__all__ = ["S3_OPTIONS", "GcsServer", "S3Server", "free_port", "gcs_server_fixture", "remote_url", "s3_server_fixture"]
