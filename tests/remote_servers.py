"""Real local remotes for the remote-storage tests: moto's S3 server and the GCS emulator, each an HTTP
endpoint on 127.0.0.1 started in this process (session scope, shared), reached through the environment
variables the providers' own clients read (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST)."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
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


class CutProxy:
    """A TCP forwarder in front of a server whose ``cut`` drops every open connection mid-response and refuses
    new ones, as the server's death does to its clients; ``cut_after(n)`` does so once ``n`` more bytes of
    responses have passed (wherever the clients' reads are then); ``restore`` takes connections again.

    The listening socket stays open from start to end: a cut proxy resets each connection it is offered
    (the client sees it reset, as by a dead server's host). Closing the port and binding it again would race
    with the machine's other connections, any of which may take the freed port as its local one."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.cuts = 0
        self._budget: int | None = None
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._refusing = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def restore(self) -> None:
        with self._lock:
            self._refusing = False

    def cut_after(self, nbytes: int) -> None:
        with self._lock:
            self._budget = nbytes

    def cut(self) -> None:
        with self._lock:
            held, self._sockets = list(self._sockets), set()
            self._refusing, self._budget = True, None
            self.cuts += 1
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Cut, and stop listening (the end of the proxy)."""
        self.cut()
        self._listener.close()

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        """Close ``sock`` with a reset (no orderly end), as a connection to a dead server ends."""
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                self._reset(client)
                continue
            server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
            server.settimeout(None)
            with self._lock:
                if self._refusing:
                    self._reset(client)
                    server.close()
                    continue
                self._sockets.update((client, server))
            for src, dst, responses in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, responses), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, responses: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                cut = False
                if responses:
                    with self._lock:
                        if self._budget is not None:  # one pump spends the last of it and cuts; none after
                            cut = len(data) >= self._budget
                            data = data[: self._budget]
                            self._budget = None if cut else self._budget - len(data)
                dst.sendall(data)
                if cut:
                    self.cut()
                    return
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


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


__all__ = [
    "S3_OPTIONS", "CutProxy", "GcsServer", "S3Server", "block_lists_and_shards", "free_port", "gcs_server_fixture",
    "remote_url", "s3_server_fixture",
]


def block_lists_and_shards(url: str, dataset_id: str, options: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """The names in a remote dataset's ``blocks/`` folder and its shards' names with ``.json`` (equal when
    every shard has its block list, so it can be read in place by ranges)."""
    from vcollect.remote import open_remote

    remote = open_remote(url, storage_options=options)
    remote.fs.invalidate_cache()
    names = [[str(p).rsplit("/", 1)[-1] for p in remote.fs.ls(remote.path(dataset_id, folder))]
             for folder in ("blocks", "shards")]
    return sorted(names[0]), sorted(f"{name}.json" for name in names[1])
