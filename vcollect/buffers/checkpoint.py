"""The ring checkpoint file: named arrays and a JSON header in one HDF5 file, streamed chunk by chunk and
published whole.

Each array is one chunked HDF5 dataset (``data/<name>``) whose chunks (about :data:`CHUNK_BYTES`, whole
rows) are written straight from the array's memory with HDF5's direct chunk writes, so a save copies
nothing but the last, padded chunk of each array; ``crc32/<name>`` holds one CRC-32 per chunk, checked as the
chunks are read back straight into the arrays that take them. The file is written under a temporary name
and renamed into place (:func:`vcollect.durable.published_file`): a save killed at any point leaves the
checkpoint that was at the path before, whole.

What a ring puts in a checkpoint, and how it is rebuilt from one, is the ring's (``VectorRingBuffer.save``
and ``load``); this module only writes and reads the file.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vcollect.durable import published_file
from vcollect.errors import CheckpointExistsError, CorruptCheckpointError

__all__ = ["CHUNK_BYTES", "FORMAT", "VERSION", "CheckpointReader", "write_checkpoint"]

#: The file's format tag (its ``format`` attribute) and version.
FORMAT = "vcollect-ring-checkpoint"
VERSION = 1
#: Bytes of one chunk (whole rows; at least one row).
CHUNK_BYTES = 4 << 20

_NATIVE_KINDS = "biuf"  # stored as HDF5 numbers; any other dtype (text) as its bytes


def _chunk_rows(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, row_bytes))


def _stored(arr: np.ndarray) -> np.ndarray:
    """The array as stored: itself for numbers, its bytes (rows, row bytes) for other dtypes."""
    if arr.dtype.kind in _NATIVE_KINDS:
        return arr
    return arr.reshape(arr.shape[0], -1).view(np.uint8).reshape(arr.shape[0], -1)


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
        if not self.path.is_file():
            raise FileNotFoundError(f"no ring checkpoint at {self.path}")
        try:
            self._file = h5py.File(self.path, "r")
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
        """Close the file."""
        self._file.close()

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
        chunk straight into ``out``'s memory, each chunk's CRC-32 checked.

        Raises:
            CorruptCheckpointError: It is missing, of another shape or dtype than ``out``, or a chunk is missing
                or fails its checksum.
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
        pad: np.ndarray | None = None
        zero_row = (0,) * (target.ndim - 1)
        for i, start in enumerate(range(0, rows, step)):
            part = target[start : start + step]
            whole = part.shape[0] == step
            if not whole:
                pad = np.empty((step, *target.shape[1:]), dtype=target.dtype)
            dest = part if whole else pad
            view = memoryview(dest).cast("B")  # type: ignore[arg-type]
            try:
                info = ds.id.get_chunk_info_by_coord((start, *zero_row))
                if info.byte_offset is None or info.size != chunk_bytes:
                    raise OSError(f"chunk {i} is {info.size} bytes, {chunk_bytes} expected")
                ds.id.read_direct_chunk((start, *zero_row), out=view)
            except (OSError, ValueError, KeyError) as exc:
                raise self._corrupt(name, f"cannot be read ({exc})") from None
            if zlib.crc32(view) != int(crcs[i]):
                raise self._corrupt(name, f"fails the checksum of its chunk {i}")
            if not whole:
                assert pad is not None
                part[:] = pad[: part.shape[0]]
