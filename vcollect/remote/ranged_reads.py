"""A shard file of a dataset read in place whose blocks are fetched from the remote as reads need them.

The local file is a sparse placeholder of the shard's size. Before the reader reads a range of it (through
the memory map or the HDF5 file object this hands out) it asks for the range; the blocks it touches that are
not here yet are fetched in as few ranged requests as their runs allow (one batch, which the client
libraries send concurrently), each block checked against its SHA-256 in the shard's block list, and only
then written into the file and marked present. A block that does not match is refused with
:class:`~vcollect.errors.RemoteIntegrityError` naming the shard and the block, and nothing of it is read.
"""

from __future__ import annotations

import io
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.errors import RemoteIntegrityError
from vcollect.remote.blocks import BlockHashes

__all__ = ["RangedShard", "present_bytes"]

#: Most blocks asked for in one ranged request (a long read is split into requests of this many).
_RUN_BLOCKS = 64
#: Missing blocks at most this many apart are fetched in one request, with the blocks between them.
_GAP_BLOCKS = 4

#: ``fetch(starts, stops, background)``: the remote object's bytes in each range, in order; ``background``
#: says the fetch is the background fill's (which gives way to reads).
Fetch = Callable[[list[int], list[int], bool], list[bytes]]


def present_bytes(blocks: BlockHashes, present: np.ndarray) -> int:
    """The bytes of the blocks marked in ``present`` (the last block of a file may be shorter)."""
    starts = np.flatnonzero(present) * blocks.block_bytes
    return int(np.minimum(blocks.block_bytes, blocks.size - starts).sum())


class RangedShard:
    """A placeholder shard file filled block by block from its remote object (see the module's docstring).

    Args:
        path: The local placeholder (a sparse file of the shard's size).
        blocks: The shard's block list (its size and whole SHA-256 already checked against its manifest line).
        fetch: Fetches ranges of the remote object.
        what: The shard as error messages name it.
        on_fetched: Called with the bytes each batch of blocks added (the cache's accounting).
        present: The blocks already in the file and checked (a :meth:`snapshot` of an earlier RangedShard of
            the same file); default none.
    """

    def __init__(self, path: Path, blocks: BlockHashes, fetch: Fetch, what: str,
                 on_fetched: Callable[[int], None] | None = None, present: np.ndarray | None = None) -> None:
        self.path = path
        self.blocks = blocks
        self.what = what
        self._fetch = fetch
        self._on_fetched = on_fetched
        self._file = open(path, "r+b", buffering=0)  # noqa: SIM115 - held for this object's life (closed by __del__)
        stat = os.fstat(self._file.fileno())
        #: The file this object reads and writes, as (device, inode): a placeholder put back is another file.
        self.file_id = (stat.st_dev, stat.st_ino)
        self._have = np.zeros(blocks.num_blocks, dtype=bool) if present is None else present.astype(bool, copy=True)
        self._complete = bool(self._have.all())
        self._lock = threading.Lock()
        self._retired = False
        #: Bytes of blocks fetched and checked so far.
        self.held_bytes = present_bytes(blocks, self._have)

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    def snapshot(self) -> tuple[np.ndarray, int]:
        """Which blocks are in the file and checked now (a copy), and their bytes, for a later RangedShard of the
        same file. (Takes no lock, as :meth:`retire`: a block is marked only once it is written, so a block the
        copy has is in the file; one written meanwhile may be missing from it, and is fetched again if read.)"""
        present = self._have.copy()
        return present, present_bytes(self.blocks, present)

    @property
    def complete(self) -> bool:
        """Whether every block is here and checked."""
        return self._complete

    def ensure(self, starts: np.ndarray, stops: np.ndarray) -> None:
        """Make bytes ``starts[i]`` to ``stops[i]`` (exclusive) of the file present and checked.

        Args:
            starts: First bytes of the ranges.
            stops: Ends of the ranges (exclusive); ranges past the file's end are cut at it.

        Raises:
            RemoteIntegrityError: A fetched block differs from its SHA-256 (or is cut short).
            RemoteTransferError: The transfer failed (what was checked stays).
        """
        if self._complete:
            return
        size, block = self.blocks.size, self.blocks.block_bytes
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        stops = np.minimum(np.asarray(stops, dtype=np.int64).reshape(-1), size)
        keep = stops > starts
        if not keep.all():
            starts, stops = starts[keep], stops[keep]
        if not starts.size:
            return
        first = starts // block
        counts = (stops - 1) // block - first + 1
        if int(counts.max()) == 1:
            needed = first
        else:  # each range's blocks: first, first + 1, ..., last
            ends = np.cumsum(counts)
            needed = np.repeat(first - (ends - counts), counts) + np.arange(int(ends[-1]))
        with self._lock:
            missing = np.unique(needed[~self._have[needed]])
            if missing.size:
                self._fill(missing)

    def _fill(self, missing: np.ndarray) -> None:
        """Fetch, check and write the blocks ``missing`` (sorted, unique): runs of them at most ``_GAP_BLOCKS``
        apart are asked for as one range (a request costs more than a few blocks' bytes)."""
        cuts = np.flatnonzero(np.diff(missing) > _GAP_BLOCKS + 1) + 1
        runs: list[tuple[int, int]] = []
        for run in np.split(missing, cuts):  # blocks in a run's gaps come along, checked like the rest
            for lo in range(int(run[0]), int(run[-1]) + 1, _RUN_BLOCKS):
                runs.append((lo, min(int(run[-1]) + 1, lo + _RUN_BLOCKS)))
        self._accept(runs, self._fetch_runs(runs, False))

    def _fetch_runs(self, runs: list[tuple[int, int]], background: bool) -> list[bytes]:
        block = self.blocks.block_bytes
        return self._fetch([lo * block for lo, _ in runs], [min(hi * block, self.blocks.size) for _, hi in runs],
                           background)

    def _accept(self, runs: list[tuple[int, int]], datas: list[bytes]) -> None:
        """Check each fetched block of ``runs`` and write the ones not yet here (under the lock)."""
        block = self.blocks.block_bytes
        added = 0
        fd = self._file.fileno()
        for (lo, hi), data in zip(runs, datas, strict=True):
            view = memoryview(data)
            for index in range(lo, hi):
                part = view[(index - lo) * block : (index - lo + 1) * block]
                if not self.blocks.matches(index, part):
                    raise RemoteIntegrityError(
                        f"{self.what}: block {index} (bytes {index * block:,} to "
                        f"{index * block + self.blocks.block_size(index):,}) does not match its SHA-256 in the "
                        "shard's block list (altered or damaged on the remote); nothing of it was read"
                    )
                if not self._have[index]:
                    os.pwrite(fd, part, index * block)
                    self._have[index] = True
                    added += len(part)
        self.held_bytes += added
        self._complete = bool(self._have.all())
        if self._on_fetched is not None and added:
            self._on_fetched(added)

    def retire(self) -> None:
        """Give up the background fill: a :meth:`fill_some` under way keeps nothing of what it fetched, and later
        ones fetch nothing. Reads (:meth:`ensure`) still fetch and write what they need. (Takes no lock: the
        cache calls it under its own lock, which a fill takes after this object's.)"""
        self._retired = True

    @property
    def missing_bytes(self) -> int:
        """Bytes of the file not fetched yet."""
        return self.blocks.size - self.held_bytes

    def fill_some(self, max_bytes: int) -> int:
        """Fetch the first run of missing blocks (at most ``max_bytes``), for a background fill; the fetch
        runs without the lock, so reads go on meanwhile.

        Args:
            max_bytes: The most bytes to fetch.

        Returns:
            The bytes the run held (0 when the file is complete or retired).

        Raises:
            RemoteIntegrityError: A fetched block differs from its SHA-256.
            RemoteTransferError: The transfer failed.
        """
        with self._lock:
            if self._complete or self._retired:
                return 0
            lo = int(np.argmin(self._have))
            window = self._have[lo : lo + max(1, max_bytes // self.blocks.block_bytes)]
            # one request up to the window's last missing block: blocks reads fetched meanwhile come along
            # (checked, not written again), since a request can cost a server more than the bytes
            runs = [(lo, lo + len(window) - int(np.argmin(window[::-1])))]
        datas = self._fetch_runs(runs, True)
        with self._lock:
            if self._retired:  # given up while the fetch was under way: nothing written, nothing to count
                return 0
            self._accept(runs, datas)
        return len(datas[0])

    def read_into(self, view: memoryview, position: int) -> int:
        """Read the file's bytes at ``position`` into ``view`` (present ones only: :meth:`ensure` them first);
        returns how many were read."""
        return os.preadv(self._file.fileno(), [view], position)

    def open_map(self) -> mmap.mmap:
        """A read-only memory map of the file (read only what :meth:`ensure` made present)."""
        return mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def file_object(self) -> Any:
        """A binary file object over the file whose reads fetch what they read first (for HDF5)."""
        return io.BufferedReader(_RangedReader(self), buffer_size=8192)


class _RangedReader(io.RawIOBase):
    """Reads of a RangedShard's file, each made present first."""

    def __init__(self, shard: RangedShard) -> None:
        super().__init__()
        self._shard = shard
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._shard.blocks.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._shard.blocks.size - self._pos))
        if not n:
            return 0
        self._shard.ensure(np.array([self._pos]), np.array([self._pos + n]))
        got = self._shard.read_into(view[:n], self._pos)
        self._pos += got
        return got
