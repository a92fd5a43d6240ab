"""Stretches of Zstandard frames decoded straight into place by libzstd's one-shot call, the GIL released per stretch.

python-zstandard's stream reader decodes a stretch of frames lying back to back in a file one frame per
call into libzstd, taking the GIL back between frames, and sets each stream up and closes it under the GIL:
threads sharing a batch's stretches meet on the GIL some twenty times a stretch. ``ZSTD_decompressDCtx``
decodes every frame of a stretch in one call into a buffer of exactly the stretch's size, and ctypes releases
the GIL for the whole call, so the threads of a :class:`StretchBatch` decode in parallel, each with a
decoding context of its own, taking stretches from one queue as they are added.

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
import queue
import threading
from concurrent.futures import Executor
from typing import Any

import numpy as np

__all__ = ["StretchBatch", "StretchError", "library"]

#: libzstd's error code for a destination buffer too small for what the frames hold.
_DST_SIZE_TOO_SMALL = 70

#: Seconds a helper thread waits for the next stretch before it leaves the rest to the caller.
_IDLE_S = 10.0

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


def _decode(lib: ctypes.CDLL, context: int, job: list[int]) -> None:
    """Decode one stretch (a job row, see :class:`StretchBatch`) with ``context``."""
    dst, size, src, length, a, b, source = job
    got = lib.ZSTD_decompressDCtx(context, dst, size, src, length)  # the GIL released for the whole stretch
    if got == size:
        return
    if not lib.ZSTD_isError(got):
        why = f"decoded to {got} bytes"
    elif lib.ZSTD_getErrorCode(got) == _DST_SIZE_TOO_SMALL:
        why = "decoded to more bytes"
    else:
        why = f"cannot be decoded (zstd: {lib.ZSTD_getErrorName(got).decode()})"
    raise StretchError(f"chunks {a} to {b} {why}, expected {size}", source)


class StretchBatch:
    """Stretches of frames from several buffers (shard files' maps) decoded into one output.

    With a ``pool`` and ``threads`` > 1, ``threads - 1`` of the pool's threads start at once and decode each
    stretch as it is added (taking them from one queue), while the caller goes on adding others; :meth:`run`
    has the caller take from the queue too until it is empty, then wait for the helpers. Otherwise :meth:`run`
    decodes every stretch on the calling thread. Keeps a reference to every buffer added and to the output,
    so their addresses stay valid while any thread may decode; :meth:`close` (after :meth:`run`, or instead
    of it when adding failed) stops the helpers and waits for them.
    """

    def __init__(self, out: Any, lib: ctypes.CDLL, pool: Executor | None = None, threads: int = 1) -> None:
        """An empty batch, its helpers (if any) started and waiting for stretches.

        Args:
            out: The writeable, contiguous buffer (an array, a memoryview of one) the stretches decode into.
            lib: :func:`library`'s libzstd.
            pool: Threads that help (None: the calling thread decodes alone).
            threads: How many threads decode, the caller included.

        Raises:
            ValueError: ``out`` is read-only.
        """
        self._out = np.frombuffer(out, dtype=np.uint8)
        if not self._out.flags.writeable:
            raise ValueError("stretches are decoded into a writeable buffer")
        self.address = int(self._out.ctypes.data)
        self._lib = lib
        self._jobs: list[list[int]] = []
        self._sources: list[Any] = []
        self._labels: list[Any] = []
        self._errors: list[StretchError] = []
        self._stopped = False  # set by close(): helpers take what is left without decoding it
        self.nbytes = 0
        self._queue: queue.SimpleQueue[list[int] | None] = queue.SimpleQueue()
        self._futures = [pool.submit(self._help) for _ in range(threads - 1)] if pool is not None else []

    @property
    def output(self) -> np.ndarray:
        """The output, as a flat array of bytes."""
        return self._out

    @property
    def helping(self) -> bool:
        """Whether helper threads are decoding (until :meth:`run` or :meth:`close` ends)."""
        return bool(self._futures)

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
        self._put(np.stack([self.address + places, sizes, int(src.ctypes.data) + starts, stops - starts, first, last,
                            np.full(len(starts), len(self._sources))], axis=1), places, sizes)
        self._sources.append(src)

    def add_from(self, sources: list[Any], which: np.ndarray, starts: np.ndarray, stops: np.ndarray,
                 places: np.ndarray, sizes: np.ndarray, first: np.ndarray, last: np.ndarray,
                 labels: list[Any]) -> None:
        """Add stretches of several buffers at once: as :meth:`add`, stretch i's bytes read from
        ``sources[which[i]]``, each buffer named ``labels[j]`` (as :meth:`label` names them).

        Raises:
            StretchError: A stretch lies outside its buffer (``label`` names it).
            ValueError: A stretch's place lies outside the output.
        """
        if not len(starts):
            return
        srcs = [np.frombuffer(source, dtype=np.uint8) for source in sources]
        self.label(None)  # buffers added before and not named stay unnamed
        base = len(self._sources)
        ends = np.array([src.size for src in srcs], dtype=np.int64).take(which)
        outside = (starts < 0) | (stops > ends) | (stops < starts)
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise StretchError(f"chunks {int(first[k])} to {int(last[k])} lie outside the file ({int(ends[k])} bytes)",
                               base + int(which[k]), labels[int(which[k])])
        addresses = np.array([src.__array_interface__["data"][0] for src in srcs], dtype=np.int64)
        self._put(np.stack([self.address + places, sizes, addresses.take(which) + starts, stops - starts, first, last,
                            base + which], axis=1), places, sizes)
        self._sources += srcs
        self._labels += labels

    def _put(self, table: np.ndarray, places: np.ndarray, sizes: np.ndarray) -> None:
        """Queue (or keep, without helpers) the jobs of ``table``, each stretch's place checked first."""
        if int(places.min()) < 0 or int((places + sizes).max()) > self._out.size:
            raise ValueError("a stretch's place lies outside the output")
        jobs = table.tolist()
        self.nbytes += int(sizes.sum())
        if self._futures:
            for job in jobs:
                self._queue.put(job)
        else:
            self._jobs += jobs

    def label(self, value: Any) -> None:
        """Name every buffer added since the last call ``value`` (a StretchError from one of them carries it)."""
        self._labels.extend([value] * (len(self._sources) - len(self._labels)))

    def _take(self, decode: bool) -> None:
        """Take stretches from the queue until its end marker (put back for the next thread), decoding them
        unless ``decode`` is False or an error was met (the caller's part: the marker is in the queue)."""
        lib, context = self._lib, _context(self._lib)
        while (job := self._queue.get()) is not None:
            if decode and not self._errors and not self._stopped:
                try:
                    _decode(lib, context, job)
                except StretchError as exc:
                    self._errors.append(exc)
        self._queue.put(None)

    def _help(self) -> None:
        """A helper's work: :meth:`_take`, except that a helper left waiting ``_IDLE_S`` seconds for a stretch
        quits (the caller takes whatever is left in :meth:`run`), so a batch dropped without :meth:`close`
        never holds a pool thread for long."""
        lib, context = self._lib, _context(self._lib)
        while True:
            try:
                job = self._queue.get(timeout=_IDLE_S)
            except queue.Empty:
                return
            if job is None:
                self._queue.put(None)
                return
            if not self._errors and not self._stopped:
                try:
                    _decode(lib, context, job)
                except StretchError as exc:
                    self._errors.append(exc)

    def run(self) -> None:
        """Decode every stretch added, the helpers included, and wait for them.

        Raises:
            StretchError: A stretch does not decode to its bytes or is not valid Zstandard (the first met);
                ``label`` names its buffer.
        """
        try:
            if self._futures:
                self._queue.put(None)
                self._take(True)
                futures, self._futures = self._futures, []
                for future in futures:
                    future.result()
            else:
                lib, context = self._lib, _context(self._lib)
                for job in self._jobs:
                    _decode(lib, context, job)
        except StretchError as exc:
            self._errors.append(exc)
        finally:
            self.close()
        if self._errors:
            error = self._errors[0]
            error.label = self._labels[error.source] if error.source < len(self._labels) else None
            raise error

    def close(self) -> None:
        """Stop the helpers, with no more stretches decoded, and wait for them (nothing to do after
        :meth:`run`); then let the buffers go."""
        if self._futures:
            self._stopped = True
            self._queue.put(None)
            self._take(False)
            for future in self._futures:
                future.exception()
            self._futures = []
        self._jobs = []
        self._sources = []
