"""A file for h5py's file-object driver that never reports a write error to HDF5.

HDF5 writing into a file on a full disk crashes the process (SIGSEGV in its cleanup) instead of raising.
Files too big to build in memory (a Minari export's main file) are written through :class:`SpillFile`:
the first failed write (ENOSPC, EIO...) is kept in :attr:`SpillFile.error` and what HDF5 writes from then on
goes to memory, where reads find it, so HDF5 carries on and closes cleanly. The writer checks ``error``
often (after each episode), stops adding data once it is set, and raises it after closing the HDF5 file.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

__all__ = ["SpillFile"]


class SpillFile(io.RawIOBase):
    """A new file at ``path`` (truncated if it exists) for ``h5py.File(SpillFile(path), "w")``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)  # unbuffered: errors show at once
        self._pos = 0
        self._size = 0
        self._spilled: list[tuple[int, bytes]] = []  # (offset, data) written after the error, in order
        #: The first OSError of a write, truncate or flush; None while everything reached the file.
        self.error: OSError | None = None

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def write(self, data: ReadableBuffer) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        if self.error is None:
            try:
                done = 0
                while done < n:
                    done += os.pwrite(self._fd, view[done:], self._pos + done)
            except OSError as exc:
                self.error = exc
        if self.error is not None:
            self._spilled.append((self._pos, view.tobytes()))
        self._pos += n
        self._size = max(self._size, self._pos)
        return n

    def readinto(self, buffer: WriteableBuffer) -> int:
        out = memoryview(buffer).cast("B")
        want = min(len(out), max(0, self._size - self._pos))
        data = os.pread(self._fd, want, self._pos)
        out[: len(data)] = data
        out[len(data) : want] = bytes(want - len(data))  # past what reached the disk: zeros, unless spilled below
        for offset, data in self._spilled:  # later writes win
            lo, hi = max(offset, self._pos), min(offset + len(data), self._pos + want)
            if lo < hi:
                out[lo - self._pos : hi - self._pos] = data[lo - offset : hi - offset]
        self._pos += want
        return want

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        self._size = size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                self.error = exc
        return size

    def flush(self) -> None:
        """Nothing buffered here (the file is unbuffered); fsync is the caller's."""

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
            self._spilled.clear()
        super().close()
