"""The ring checkpoint file: named arrays and a JSON header in one HDF5 file, streamed chunk by chunk and
published whole.

Each array is one chunked HDF5 dataset (``data/<name>``) whose chunks (about :data:`CHUNK_BYTES`, whole
rows, stored raw) are written straight from the array's memory with HDF5's direct chunk writes, so a save
copies nothing but the last, padded chunk of each array; ``crc32/<name>`` holds one CRC-32 per chunk. A load
asks HDF5 where each chunk lies and reads it by offset straight into the array that takes it, a few chunks at
once on threads, each checked against its CRC-32. The file is written under a temporary name and renamed
into place (:func:`vcollect.durable.published_file`): a save killed at any point leaves the checkpoint that
was at the path before, whole.

What a ring puts in a checkpoint, and how it is rebuilt from one, is the ring's (``VectorRingBuffer.save``
and ``load``); this module only writes and reads the file.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vcollect.durable import published_file
from vcollect.errors import CheckpointExistsError, CorruptCheckpointError

__all__ = ["CHUNK_BYTES", "FORMAT", "READ_THREADS", "VERSION", "CheckpointReader", "write_checkpoint"]

#: The file's format tag (its ``format`` attribute) and version.
FORMAT = "vcollect-ring-checkpoint"
VERSION = 1
#: Bytes of one chunk (whole rows; at least one row).
CHUNK_BYTES = 4 << 20



def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


#: Threads that read and check one array's chunks at once (at most 8, and no more than the cores usable).
READ_THREADS = max(1, min(8, _usable_cores()))

_NATIVE_KINDS = "biuf"  # stored as HDF5 numbers; any other dtype (text) as its bytes


def _chunk_rows(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, row_bytes))


def _stored(arr: np.ndarray) -> np.ndarray:
    """The array as stored: itself for numbers, its bytes (rows, row bytes) for other dtypes."""
    if arr.dtype.kind in _NATIVE_KINDS:
        return arr
    return arr.reshape(arr.shape[0], -1).view(np.uint8).reshape(arr.shape[0], -1)


def _read_chunk(fd: int, view: memoryview, offset: int) -> int | str:
    """Read ``len(view)`` bytes of the file at ``offset`` into ``view``: their CRC-32, or why they could not be read."""
    done = 0
    try:
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n == 0:
                return f"the file ends {done} bytes into it, {len(view)} expected"
            done += n
    except OSError as exc:
        return str(exc)
    return zlib.crc32(view)


def _write_array(f: h5py.File, name: str, arr: np.ndarray) -> None:
    """One array as a chunked dataset, written chunk by chunk from its memory, and its chunks' CRC-32s."""
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if not arr.flags.c_contiguous:
        raise ValueError(f"checkpoint array {name!r} must be C-contiguous")
    stored = _stored(arr)
    rows = stored.shape[0]
    row_bytes = stored[:1].nbytes if rows else stored.dtype.itemsize * int(np.prod(stored.shape[1:], dtype=np.int64))
    step = max(1, min(_chunk_rows(row_bytes), rows))
    chunks = None if stored.size == 0 else (step, *stored.shape[1:])
    ds = f.create_dataset(f"data/{name}", shape=stored.shape, dtype=stored.dtype, chunks=chunks)
    ds.attrs["dtype"] = arr.dtype.str
    ds.attrs["shape"] = json.dumps(list(arr.shape))
    crcs = np.zeros(-(-rows // step) if stored.size else 0, dtype=np.uint32)
    if stored.size:
        pad = np.zeros((step, *stored.shape[1:]), dtype=stored.dtype)
        zero_row = (0,) * (stored.ndim - 1)
        for i, start in enumerate(range(0, rows, step)):
            part = stored[start : start + step]
            if part.shape[0] < step:  # the last chunk: padded to the chunk's shape
                pad[: part.shape[0]] = part
                pad[part.shape[0] :] = 0
                part = pad
            view = memoryview(part).cast("B")  # type: ignore[arg-type]
            crcs[i] = zlib.crc32(view)
            ds.id.write_direct_chunk((start, *zero_row), view)
    f.create_dataset(f"crc32/{name}", data=crcs)


def write_checkpoint(path: str | os.PathLike[str], header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *,
                     overwrite: bool = False) -> Path:
    """Write a checkpoint file: ``header`` (JSON-able) and ``arrays`` (C-contiguous; views of live arrays are
    read, never copied), published at ``path`` whole.

    Args:
        path: The file to write; its folder must exist.
        header: What the reader needs besides the arrays (JSON-able).
        arrays: Name -> array; names are plain paths (``a``, ``a/b``).
        overwrite: Replace a file at ``path``.

    Returns:
        The path written.

    Raises:
        CheckpointExistsError: ``path`` exists and ``overwrite`` is false.
        FileNotFoundError: ``path``'s folder does not exist.
    """
    final = Path(path)
    if not final.parent.is_dir():
        raise FileNotFoundError(f"cannot save a checkpoint at {final}: its folder {final.parent} does not exist")
    try:
        with published_file(final, overwrite=overwrite) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = VERSION
            f.attrs["header"] = json.dumps(dict(header))
            for name, arr in arrays.items():
                _write_array(f, name, np.asarray(arr))
    except FileExistsError as exc:
        if isinstance(exc, CheckpointExistsError):
            raise
        raise CheckpointExistsError(
            f"a file exists at {final}: pass overwrite=True to replace it, or save under another name"
        ) from None
    return final


class CheckpointReader:
    """An open checkpoint file: its header, and its arrays read (and checked) into arrays given or new ones.

    Args:
        path: The checkpoint file.

    Raises:
        FileNotFoundError: No file at ``path``.
        CorruptCheckpointError: The file is not a checkpoint this version reads, or is truncated.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._threads: ThreadPoolExecutor | None = None
        if not self.path.is_file():
            raise FileNotFoundError(f"no ring checkpoint at {self.path}")
        try:
            self._file = h5py.File(self.path, "r", driver="sec2")
        except OSError as exc:
            raise CorruptCheckpointError(f"{self.path} is not a readable ring checkpoint (truncated or not HDF5): {exc}") from None
        try:
            attrs = self._file.attrs
            if attrs.get("format") != FORMAT:
                raise CorruptCheckpointError(f"{self.path} is not a vcollect ring checkpoint (no {FORMAT!r} format tag)")
            if int(attrs.get("version", -1)) != VERSION:
                raise CorruptCheckpointError(
                    f"{self.path} is a ring checkpoint of format version {attrs.get('version')}; this vcollect reads "
                    f"version {VERSION}"
                )
            header = json.loads(attrs["header"])
            if not isinstance(header, dict):
                raise TypeError("the header is not a JSON object")
            self.header: dict[str, Any] = header
        except (KeyError, TypeError, ValueError, OSError) as exc:
            self._file.close()
            if isinstance(exc, CorruptCheckpointError):
                raise
            raise CorruptCheckpointError(f"{self.path}: unreadable checkpoint header ({exc})") from None

    def close(self) -> None:
        """Close the file (and stop the reading threads)."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        self._file.close()

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="vcollect-checkpoint")
        return self._threads

    def _fd(self) -> int:
        """HDF5's own descriptor of the open file: chunks are read by offset from the very file it parsed."""
        try:
            return int(self._file.id.get_vfd_handle())
        except (OSError, ValueError, TypeError) as exc:
            raise CorruptCheckpointError(f"{self.path}: cannot read the file's chunks ({exc})") from None

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _corrupt(self, name: str, why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{self.path}: array {name!r} {why}; the checkpoint is damaged, load another")

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds an array of this name."""
        return f"data/{name}" in self._file

    def _dataset(self, name: str) -> tuple[h5py.Dataset, np.dtype[Any], tuple[int, ...]]:
        try:
            ds = self._file[f"data/{name}"]
            dtype = np.dtype(str(ds.attrs["dtype"]))
            shape = tuple(int(n) for n in json.loads(ds.attrs["shape"]))
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise self._corrupt(name, f"is missing or unreadable ({exc})") from None
        return ds, dtype, shape

    def read(self, name: str) -> np.ndarray:
        """A new array holding the checkpoint's array ``name``.

        Raises:
            CorruptCheckpointError: It is missing, or fails its checks.
        """
        _, dtype, shape = self._dataset(name)
        out = np.empty(shape, dtype=dtype)
        self.read_into(name, out)
        return out

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Read the checkpoint's array ``name`` into ``out`` (C-contiguous, of its shape and dtype), chunk by
        chunk straight from the file into ``out``'s memory, each chunk's CRC-32 checked.

        The chunks are read by a few threads at once (the reads and checksums run without the GIL), each at
        the file offset HDF5 records for it; only a last, partial chunk goes through a chunk-sized buffer.

        Raises:
            CorruptCheckpointError: It is missing, of another shape or dtype than ``out``, or a chunk is missing,
                truncated or fails its checksum.
        """
        ds, dtype, shape = self._dataset(name)
        if dtype != out.dtype or shape != (out.shape if out.ndim else (1,)):
            raise self._corrupt(name, f"holds {dtype} {shape}, where {out.dtype} {out.shape} was expected")
        target = _stored(out.reshape(shape))
        if ds.shape != target.shape:
            raise self._corrupt(name, f"is stored as {ds.shape}, where {target.shape} was expected")
        try:
            crcs = self._file[f"crc32/{name}"][()]
        except (KeyError, OSError) as exc:
            raise self._corrupt(name, f"has no checksums ({exc})") from None
        if target.size == 0:
            return
        rows = target.shape[0]
        step = ds.chunks[0] if ds.chunks else 0
        if step < 1 or crcs.shape != (-(-rows // step),):
            raise self._corrupt(name, "has a chunk layout that does not match its checksums")
        chunk_bytes = step * target[:1].nbytes
        zero_row = (0,) * (target.ndim - 1)
        offsets = []
        for i, start in enumerate(range(0, rows, step)):
            try:
                info = ds.id.get_chunk_info_by_coord((start, *zero_row))
            except (OSError, ValueError, KeyError) as exc:
                raise self._corrupt(name, f"cannot be read (chunk {i}: {exc})") from None
            if info.byte_offset is None or info.size != chunk_bytes or info.filter_mask:
                raise self._corrupt(name, f"cannot be read (chunk {i} is {info.size} bytes, {chunk_bytes} expected)")
            offsets.append(int(info.byte_offset))
        last = target[(len(offsets) - 1) * step :]
        pad = None if last.shape[0] == step else np.empty((step, *target.shape[1:]), dtype=target.dtype)
        views = [memoryview(target[i * step : (i + 1) * step]).cast("B") for i in range(len(offsets) - 1)]  # type: ignore[arg-type]
        views.append(memoryview(last if pad is None else pad).cast("B"))  # type: ignore[arg-type]
        fd = self._fd()
        if len(views) == 1:
            results = [_read_chunk(fd, views[0], offsets[0])]
        else:
            results = list(self._pool().map(_read_chunk, [fd] * len(views), views, offsets))
        for i, result in enumerate(results):
            if isinstance(result, str):
                raise self._corrupt(name, f"cannot be read (chunk {i}: {result})")
            if result != int(crcs[i]):
                raise self._corrupt(name, f"fails the checksum of its chunk {i}")
        if pad is not None:
            last[:] = pad[: last.shape[0]]
