"""Moving bytes between this machine and a remote: objects fetched with resume and checked, files put whole.

A fetched object is written to a ``.part`` file beside its final name; a fetch that stops part way keeps
it, and the next fetch of the same object continues from its length (ranged reads), hashing what is
already there first. Nothing is fsynced here: the caller syncs what it publishes, once. Only an object whose size and SHA-256 equal what the manifest records is renamed to
its final name; any other is refused with :class:`~vcollect.errors.RemoteIntegrityError` naming it.
Uploads hand each whole file to the client library's own upload (multipart where it is large), which
makes an object appear whole or not at all on object stores; a ``file://`` remote is written to a
temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from vcollect.errors import RemoteIntegrityError
from vcollect.remote.location import Remote, remote_errors

__all__ = [
    "CHUNK_BYTES",
    "PART_SUFFIX",
    "NoProgress",
    "TransferProgress",
    "fetch_object",
    "get_file",
    "put_file",
    "read_object",
    "read_optional",
    "write_object",
]

#: Bytes asked for in one ranged read of a fetch.
CHUNK_BYTES = 16 << 20
#: The suffix of an object being fetched.
PART_SUFFIX = ".part"


class TransferProgress(Protocol):
    """What a transfer reports as it goes (the CLI draws bars of bytes and files from it)."""

    def add_total(self, files: int, nbytes: int) -> None:
        """More work announced: ``files`` files of ``nbytes`` bytes in all."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more bytes moved."""

    def file_done(self) -> None:
        """One more file moved whole."""


class NoProgress:
    """A TransferProgress that reports nothing."""

    def add_total(self, files: int, nbytes: int) -> None:
        """Nothing to draw."""

    def advance(self, nbytes: int) -> None:
        """Nothing to draw."""

    def file_done(self) -> None:
        """Nothing to draw."""


def read_object(remote: Remote, path: str, what: str) -> bytes:
    """The bytes of a small remote object (FileNotFoundError when there is none)."""
    with remote_errors(remote, what):
        return bytes(remote.fs.cat_file(path))


def read_optional(remote: Remote, path: str, what: str) -> bytes | None:
    """The bytes of a small remote object that may be absent (None then; the bucket is known to exist)."""
    try:
        with remote_errors(remote, what, missing_is_bucket=False):
            return bytes(remote.fs.cat_file(path))
    except FileNotFoundError:
        return None


def write_object(remote: Remote, path: str, data: bytes, what: str) -> None:
    """Write a small remote object whole (on a ``file://`` remote: a temporary name, then a rename)."""
    with remote_errors(remote, what):
        if remote.atomic_puts:
            remote.fs.pipe_file(path, data)
            return
        remote.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


class _Callback:
    """An fsspec callback (made on first use: fsspec is imported only with a remote) forwarding the byte
    counts of the client library's own transfers to a TransferProgress."""

    def __init__(self, progress: TransferProgress) -> None:
        from fsspec.callbacks import Callback

        self.reported = 0
        self.progress = progress
        self.callback = Callback(hooks={"forward": self._forward})

    def _forward(self, size: int | None, value: int, **_: Any) -> None:
        moved = int(value) - self.reported
        if moved > 0:
            self.reported += moved
            self.progress.advance(moved)


def put_file(remote: Remote, local: Path, path: str, progress: TransferProgress, what: str) -> None:
    """Upload the file ``local`` to the remote object ``path`` whole (the client library's own upload)."""
    with remote_errors(remote, what):
        if remote.atomic_puts:
            forward = _Callback(progress)
            remote.fs.put_file(str(local), path, callback=forward.callback)
            progress.advance(local.stat().st_size - forward.reported)
            return
        remote.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            with open(local, "rb") as src, open(tmp, "wb") as dst:
                for block in iter(lambda: src.read(CHUNK_BYTES), b""):
                    dst.write(block)
                    progress.advance(len(block))
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def fetch_object(
    remote: Remote, path: str, final: Path, *, size: int, sha256: str, progress: TransferProgress, what: str
) -> int:
    """Fetch the remote object ``path`` to ``final``, resuming a ``.part`` an earlier fetch left, and check it.

    Args:
        remote: The remote.
        path: The object's path on the remote's filesystem.
        final: Where the checked file goes (its ``.part`` sibling holds it meanwhile).
        size: The size the manifest records.
        sha256: The SHA-256 (hex) the manifest records.
        progress: Told of the bytes fetched (also those a resumed ``.part`` already held).
        what: The object as an error message names it.

    Returns:
        The bytes fetched from the remote by this call.

    Raises:
        RemoteIntegrityError: The object's size or SHA-256 differs from the manifest's (the ``.part`` is
            removed, ``final`` is not written).
        RemoteTransferError: The transfer stopped; the ``.part`` is kept for the next fetch to resume.
    """
    part = final.with_name(final.name + PART_SUFFIX)
    digest = hashlib.sha256()
    done = 0
    if part.exists():
        if part.stat().st_size > size:
            part.unlink()
        else:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                    digest.update(block)
                    done += len(block)
    progress.advance(done)
    fetched = 0
    longer = False
    with remote_errors(remote, f"fetching {what}"), open(part, "ab") as out:
        if size == 0:
            longer = len(remote.fs.cat_file(path)) > 0
        elif done == size:  # a whole .part from before: only see that the object is not longer
            longer = len(remote.fs.cat_file(path, start=size - 1, end=size + 1)) > 1
        while done < size and not longer:
            want = min(size + 1, done + CHUNK_BYTES)  # the last read asks one byte more: a longer object shows
            block = remote.fs.cat_file(path, start=done, end=want)
            short = len(block) < want - done
            if done + len(block) > size:
                longer = True
                block = block[: size - done]
            out.write(block)
            digest.update(block)
            done += len(block)
            fetched += len(block)
            progress.advance(len(block))
            if short:
                break
    if longer or done != size:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
        raise RemoteIntegrityError(
            f"{what} on remote {remote.url!r} holds {'more' if longer else 'fewer'} bytes than the {size:,} the "
            "manifest records (altered or truncated); it was refused and nothing was published"
        )
    if digest.hexdigest() != sha256:
        part.unlink()
        raise RemoteIntegrityError(
            f"{what} on remote {remote.url!r} does not match the manifest (SHA-256 {digest.hexdigest()[:16]}... "
            f"where {sha256[:16]}... is recorded): altered or damaged; it was refused and nothing was published"
        )
    os.replace(part, final)
    return fetched


def get_file(remote: Remote, path: str, local: Path, progress: TransferProgress, what: str) -> int:
    """Download the remote object ``path`` to ``local`` whole with the client library's own download (for
    objects no manifest describes: nothing to check them against). Returns the bytes fetched."""
    with remote_errors(remote, what):
        forward = _Callback(progress)
        remote.fs.get_file(path, str(local), callback=forward.callback)
    size = local.stat().st_size
    progress.advance(size - forward.reported)
    return size
