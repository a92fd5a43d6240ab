"""Moving bytes between this machine and a remote: objects fetched with resume and checked, files put whole.

A fetched object is written to a ``.part`` file beside its final name, held locked while it is written (two
fetches of one object, in threads or processes, never write it together). A fresh fetch is, where
:attr:`Remote.streamed_fetches` says so, one streamed response, the client library's own download (the server
reads the object once), then hashed once, mapped from the page cache; otherwise (GCS) ranged reads of
CHUNK_BYTES, each hashed as it arrives. A fetch that stops part way keeps what was written (s3fs's download
keeps its file; gcsfs's would remove it, which is one reason GCS takes the ranged reads), and the next fetch
of the same object continues from its length by ranged reads. Nothing is fsynced here: the caller syncs what
it publishes, once. Only an object whose size and SHA-256 equal what the manifest records is renamed to its
final name; any other is refused with :class:`~vcollect.errors.RemoteIntegrityError` naming it.
Uploads hand each whole file to the client library's own upload (multipart where it is large), which
makes an object appear whole or not at all on object stores; a ``file://`` remote is written to a
temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
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

#: Bytes asked for in one ranged read of a fetch (GCS's, and every resumed one).
CHUNK_BYTES = 16 << 20
#: The suffix of an object being fetched.
PART_SUFFIX = ".part"
_HASH_BLOCK = 8 << 20


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

    def __init__(self, progress: TransferProgress, limit: int | None = None) -> None:
        from fsspec.callbacks import Callback

        self.reported = 0
        self.limit = limit
        self.progress = progress
        self.callback = Callback(hooks={"forward": self._forward})

    def _forward(self, size: int | None, value: int, **_: Any) -> None:
        if self.limit is not None and value > self.limit:
            raise _LongerThanRecorded
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

    A fetch holds its ``.part`` locked, so two fetches of one object (threads or processes sharing a folder)
    never write into it together: the second waits, and finds ``final`` there when the first got it. A
    resumed ``.part`` whose bytes turn out not to be the object's is fetched again from the start, once.

    Args:
        remote: The remote.
        path: The object's path on the remote's filesystem.
        final: Where the checked file goes (its ``.part`` sibling holds it meanwhile).
        size: The size the manifest records.
        sha256: The SHA-256 (hex) the manifest records.
        progress: Told of the bytes fetched (also those a resumed ``.part`` already held).
        what: The object as an error message names it.

    Returns:
        The bytes fetched from the remote by this call (0 when another fetch of the object finished it
        while this one waited).

    Raises:
        RemoteIntegrityError: The object's size or SHA-256 differs from the manifest's (the ``.part`` is
            removed, ``final`` is not written).
        RemoteTransferError: The transfer stopped; the ``.part`` is kept for the next fetch to resume.
    """
    part = final.with_name(final.name + PART_SUFFIX)
    fd, waited = _lock_part(part)
    try:
        if waited and _size(final) == size:
            part.unlink()  # another fetch of this object got it meanwhile; this .part is the empty one made here
            return 0
        held = os.fstat(fd).st_size
        if held > size:
            os.ftruncate(fd, 0)
            held = 0
        progress.advance(held)
        fetched, found = _fetch_into(remote, path, part, held, size, progress, what)
        if found != sha256 and held:
            # the .part did not hold the object's first bytes (a client's download may size its file first and
            # fill it in any order): fetched again from the start, once
            os.ftruncate(fd, 0)
            fetched, found = _fetch_into(remote, path, part, 0, size, progress, what)
        if found != sha256:
            part.unlink()
            raise RemoteIntegrityError(
                f"{what} on remote {remote.url!r} does not match the manifest (SHA-256 {found[:16]}... where "
                f"{sha256[:16]}... is recorded): altered or damaged; it was refused and nothing was published"
            )
        os.replace(part, final)
        return fetched
    finally:
        os.close(fd)


class _LongerThanRecorded(Exception):
    """Raised from a download's callback once the object passed the size its manifest line records."""


def _lock_part(part: Path) -> tuple[int, bool]:
    """Open ``part`` (made when missing) and hold an exclusive lock on it (the kernel frees it when its holder
    dies). Returns the open descriptor and whether another holder made this wait."""
    waited = False
    while True:
        fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(part)):
                    return fd, waited
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder before renamed or removed it: lock the file there now


def _get_whole(remote: Remote, path: str, part: Path, size: int, progress: TransferProgress) -> int:
    """Download the object into ``part`` in one streamed response (the client library's own download), stopped
    once it passes ``size`` bytes (_LongerThanRecorded). Returns the bytes fetched."""
    forward = _Callback(progress, limit=size)
    remote.fs.get_file(path, str(part), callback=forward.callback)
    got = part.stat().st_size
    progress.advance(got - forward.reported)
    return got


def _append_ranges(
    remote: Remote, path: str, part: Path, held: int, size: int, progress: TransferProgress, digest: Any
) -> int:
    """Append the object's bytes after the ``held`` ones ``part`` has by ranged reads of CHUNK_BYTES, each
    also fed to ``digest``. The last read asks one byte past ``size``, so an object longer than recorded
    leaves ``part`` longer. Returns the bytes fetched."""
    fetched = 0
    done = held
    with open(part, "ab") as out:
        while done <= size:
            start = min(done, size - 1)  # all there: the last byte again and one past it
            end = min(size + 1, start + CHUNK_BYTES)
            block = remote.fs.cat_file(path, start=start, end=end)
            new = block[done - start:]
            out.write(new)
            digest.update(new)
            done += len(new)
            fetched += len(new)
            progress.advance(len(new))
            if len(block) < end - start:
                break  # the object ended
    return fetched


def _fetch_into(
    remote: Remote, path: str, part: Path, held: int, size: int, progress: TransferProgress, what: str
) -> tuple[int, str]:
    """Fetch the object into ``part`` after the ``held`` bytes it has; returns the bytes fetched and the
    SHA-256 (hex) of what ``part`` then holds.

    Raises:
        RemoteIntegrityError: The object is longer or shorter than ``size`` (``part`` removed).
    """
    fetched, longer, digest = 0, False, None
    try:
        with remote_errors(remote, f"fetching {what}"):
            if held == 0 and (remote.streamed_fetches or size == 0):
                fetched = _get_whole(remote, path, part, size, progress)
            else:
                digest = _hash_file(part, held)
                fetched = _append_ranges(remote, path, part, held, size, progress, digest)
    except _LongerThanRecorded:
        longer = True
    got = _size(part)
    if longer or got != size:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
        raise RemoteIntegrityError(
            f"{what} on remote {remote.url!r} holds {'more' if longer or (got or 0) > size else 'fewer'} bytes than "
            f"the {size:,} the manifest records (altered or truncated); it was refused and nothing was published"
        )
    return fetched, (digest or _hash_file(part, size)).hexdigest()


def _hash_file(path: Path, size: int) -> Any:
    """The SHA-256 (a hashlib object, to be fed more) of the first ``size`` bytes of the file at ``path``,
    hashed where they lie in the page cache (mapped, not copied)."""
    digest = hashlib.sha256()
    if size:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for start in range(0, size, _HASH_BLOCK):
                    digest.update(view[start : start + _HASH_BLOCK])
            finally:
                view.release()
    return digest


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def get_file(remote: Remote, path: str, local: Path, progress: TransferProgress, what: str) -> int:
    """Download the remote object ``path`` to ``local`` whole with the client library's own download (for
    objects no manifest describes: nothing to check them against). Returns the bytes fetched."""
    with remote_errors(remote, what):
        forward = _Callback(progress)
        remote.fs.get_file(path, str(local), callback=forward.callback)
    size = local.stat().st_size
    progress.advance(size - forward.reported)
    return size
