"""Stretches of Zstandard frames decoded straight into place by libzstd's one-shot call, the GIL released per stretch.

python-zstandard's stream reader decodes a stretch of frames lying back to back in a file one frame per
call into libzstd, taking the GIL back between frames, and sets each stream up and closes it under the GIL:
threads sharing a batch's stretches meet on the GIL some twenty times a stretch. ``ZSTD_decompressDCtx``
decodes every frame of a stretch in one call into a buffer of exactly the stretch's size, and ctypes releases
the GIL for the whole call, so the threads of :func:`decode_stretches` decode in parallel, each with a
decoding context of its own, taking stretches from one shared list until none is left.

The library is the copy of libzstd the ``zstandard`` package ships (its CFFI extension exports libzstd's C
API), else the system's libzstd; :func:`library` is None where neither loads, and readers use the stream
reader instead. Every bound is held as the stream reader held it: a stretch decodes to exactly its size or
raises (libzstd never writes past the size it is given, so a frame declaring more is refused before it is
decoded past it), frames' checksums are verified, and every address is checked against its buffer first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

import numpy as np

__all__ = ["StretchBatch", "StretchError", "decode_stretches", "library"]

#: libzstd's error code for a destination buffer too small for what the frames hold.
_DST_SIZE_TOO_SMALL = 70

_THREAD = threading.local()  # each thread's own decoding context (a context is for one thread at a time)


class StretchError(ValueError):
    """A stretch of frames that does not decode to its bytes (damage in the file it was read from).

    Attributes:
        source: The index of the stretch's buffer in the batch (the last column of its job).
        label: What the batch's :meth:`StretchBatch.label` named that buffer (None where unnamed).
    """

    def __init__(self, message: str, source: int, label: Any = None) -> None:
        super().__init__(message)
        self.source = source
        self.label = label


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """``lib`` with the argument and result types of the functions used here set (AttributeError where one
    is missing)."""
    lib.ZSTD_createDCtx.restype = ctypes.c_void_p
    lib.ZSTD_createDCtx.argtypes = []
    lib.ZSTD_freeDCtx.restype = ctypes.c_size_t
    lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
    lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
    lib.ZSTD_decompressDCtx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                        ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getErrorCode.restype = ctypes.c_int
    lib.ZSTD_getErrorCode.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getErrorName.restype = ctypes.c_char_p
    lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """libzstd, loaded once: the ``zstandard`` package's own copy, else the system's; None where neither loads.

    Returns:
        The library with the decoding functions' types set, or None.
    """
    places: list[str] = []
    try:
        spec = importlib.util.find_spec("zstandard._cffi")  # located, not imported (it needs the cffi package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        places.append(spec.origin)
    found = ctypes.util.find_library("zstd")
    if found:
        places.append(found)
    for place in places:
        try:
            return _bind(ctypes.CDLL(place))
        except (OSError, AttributeError):
            continue
    return None


class _Context:
    """One libzstd decoding context, freed with this object."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self.pointer = lib.ZSTD_createDCtx()
        if not self.pointer:
            raise MemoryError("libzstd could not make a decoding context")

    def __del__(self) -> None:
        if getattr(self, "pointer", None):
            self._lib.ZSTD_freeDCtx(self.pointer)
            self.pointer = None


def _context(lib: ctypes.CDLL) -> int:
    """This thread's decoding context."""
    context = getattr(_THREAD, "context", None)
    if context is None:
        context = _THREAD.context = _Context(lib)
    return int(context.pointer)


def _decode_share(lib: ctypes.CDLL, jobs: Iterator[list[int]]) -> None:
    """Decode stretches taken from ``jobs`` (shared with other threads) until none is left."""
    decompress, context = lib.ZSTD_decompressDCtx, _context(lib)
    for dst, size, src, length, a, b, source in jobs:
        got = decompress(context, dst, size, src, length)  # the GIL released for the whole stretch
        if got == size:
            continue
        if not lib.ZSTD_isError(got):
            why = f"decoded to {got} bytes"
        elif lib.ZSTD_getErrorCode(got) == _DST_SIZE_TOO_SMALL:
            why = "decoded to more bytes"
        else:
            why = f"cannot be decoded (zstd: {lib.ZSTD_getErrorName(got).decode()})"
        raise StretchError(f"chunks {a} to {b} {why}, expected {size}", source)


def decode_stretches(lib: ctypes.CDLL, jobs: np.ndarray, pool: Executor | None = None, threads: int = 1) -> None:
    """Decode each stretch of ``jobs``, this thread and ``threads - 1`` of ``pool``'s taking them in turn.

    Args:
        lib: :func:`library`'s libzstd.
        jobs: (n, 7) int64 rows: destination address, decoded bytes, source address, source bytes, first and
            last chunk (for messages), an index of the source (for errors). The caller keeps both buffers
            alive and has checked the addresses.
        pool: Threads that help (None: this thread alone).
        threads: How many threads decode, this one included.

    Raises:
        StretchError: A stretch decodes to other than its bytes, or is not valid Zstandard (the first error
            met; every thread has stopped by then).
    """
    rows = iter(jobs.tolist())  # one iterator shared by the threads: each next() is atomic under the GIL
    helpers = 0 if pool is None else min(threads, len(jobs)) - 1
    futures = [pool.submit(_decode_share, lib, rows) for _ in range(helpers)] if pool is not None else []
    errors: list[BaseException | None] = []
    try:
        _decode_share(lib, rows)
    finally:  # the helpers write into the caller's buffers: done before they may go
        for _ in rows:  # after an error here, the helpers find nothing more to take
            pass
        errors = [future.exception() for future in futures]
    for error in errors:
        if error is not None:
            raise error


class StretchBatch:
    """Stretches of frames from several buffers (shard files' maps) into one output, decoded together.

    Keeps a reference to every buffer added, so their addresses stay valid until :meth:`run`.
    """

    def __init__(self, out: Any) -> None:
        """Args:
            out: The writeable, contiguous buffer (an array, a memoryview of one) the stretches decode into.
        """
        self._out = np.frombuffer(out, dtype=np.uint8)
        if not self._out.flags.writeable:
            raise ValueError("stretches are decoded into a writeable buffer")
        self.address = int(self._out.ctypes.data)
        self._jobs: list[np.ndarray] = []
        self._sources: list[Any] = []
        self._labels: list[Any] = []
        self.nbytes = 0

    def add(self, source: Any, starts: np.ndarray, stops: np.ndarray, places: np.ndarray, sizes: np.ndarray,
            first: np.ndarray, last: np.ndarray) -> None:
        """Add stretches: bytes ``starts[i]`` to ``stops[i]`` of ``source`` (a buffer: a file's map) decode to
        ``sizes[i]`` bytes at byte ``places[i]`` of the output; ``first``/``last``: their chunks, for messages.

        Raises:
            ValueError: A stretch lies outside ``source`` or its place outside the output.
        """
        if not len(starts):
            return
        src = np.frombuffer(source, dtype=np.uint8)
        if int(starts.min()) < 0 or int(stops.max()) > src.size or (stops < starts).any():
            k = int(np.flatnonzero((starts < 0) | (stops > src.size) | (stops < starts))[0])
            raise ValueError(f"chunks {int(first[k])} to {int(last[k])} lie outside the file ({src.size} bytes)")
        if int(places.min()) < 0 or int((places + sizes).max()) > self._out.size:
            raise ValueError("a stretch's place lies outside the output")
        self._jobs.append(np.stack([self.address + places, sizes, int(src.ctypes.data) + starts, stops - starts,
                                    first, last, np.full(len(starts), len(self._sources))], axis=1))
        self._sources.append(src)
        self.nbytes += int(sizes.sum())

    def label(self, value: Any) -> None:
        """Name every buffer added since the last call ``value`` (a StretchError from one of them carries it)."""
        self._labels.extend([value] * (len(self._sources) - len(self._labels)))

    def run(self, lib: ctypes.CDLL, pool: Executor | None = None, threads: int = 1) -> None:
        """Decode every stretch added (see :func:`decode_stretches`), then let the buffers go.

        Raises:
            StretchError: A stretch does not decode to its bytes; ``label`` names its buffer.
        """
        try:
            if self._jobs:
                decode_stretches(lib, np.concatenate(self._jobs), pool, threads)
        except StretchError as exc:
            exc.label = self._labels[exc.source] if exc.source < len(self._labels) else None
            raise
        finally:
            self._jobs.clear()
            self._sources.clear()
            self._labels.clear()
            self.nbytes = 0
