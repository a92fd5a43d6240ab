"""Reading one shard file of a dataset: its checked description, and the least-recently-used set of open files.

``StoredShard`` reads a committed shard's small ``episodes/`` table and where each column lies (from the file,
or from its manifest line) and checks both against the dataset's spaces; ``OpenShardFiles`` reads column rows
through memory maps (raw columns; Zstandard and gzip columns through their chunk tables, chunk_reader.py) or HDF5
(other codecs), keeping at most a given number of files open. A damaged shard raises CorruptShardError
naming the file.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import errno
import functools
import json
import math
import mmap
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

import h5py
import numpy as np

from vcollect.errors import CorruptShardError, RemoteError
from vcollect.spaces import Leaf
from vcollect.store.layout.shard_format import EPISODE_COLUMNS, LAYOUT_ATTR, SHARD_FORMAT_NAME, column_path
from vcollect.store.read.shards.chunk_reader import (
    PARALLEL_BYTES,
    ChunkTable,
    StackedChunkTables,
    check_declared_sizes,
)
from vcollect.store.read.shards.zstd_frames import StretchBatch, StretchError, library
from vcollect.store.write.compression import import_plugin_filters
from vcollect.text_leaves import ENCODING_ATTR, decode_utf8

__all__ = ["OpenShardFiles", "ShardOpener", "ShardRanges", "StoredShard", "decode_column"]

#: errno values that say something about the process or the system, not about the shard being read.
_RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EACCES, errno.EPERM, errno.EAGAIN, errno.EINTR}
)

#: dtype kinds a column may have: numbers and flags, and fixed-size byte strings for infos/extras/metadata.
_NUMERIC_KINDS = "biuf"
_TREE_KINDS = "biufcS"
#: where the observation/action leaf columns are (Text ones are decoded when read)
_LEAF_PREFIXES = ("observations", "actions")

DECODE_THREADS_ENV = "VCOLLECT_DECODE_THREADS"
"""Threads that decode one large read of runs (slices' frames) together, the calling thread included: 1 decodes
on the calling thread alone. By default :data:`DEFAULT_DECODE_THREADS` where the process may run on that many
CPUs (else 1): a second thread halves the calling thread's share of the decoding at no more CPU time in all
(benchmarks/RESULTS.md). Inside a torch DataLoader worker process the default is 1: the workers already
decode side by side, and a pool thread each would oversubscribe the CPUs when there are as many workers as
cores."""

DEFAULT_DECODE_THREADS = 2
"""The most threads that decode a read together when ``$VCOLLECT_DECODE_THREADS`` is not set."""


def _usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

_decode_pool: tuple[int, int, concurrent.futures.ThreadPoolExecutor] | None = None  # (pid, threads, pool)


def _in_dataloader_worker() -> bool:
    """Whether this process is a torch DataLoader's worker (torch is never imported here: a process that has
    not imported it is none)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _decoding_threads() -> tuple[concurrent.futures.ThreadPoolExecutor | None, int]:
    """The pool that helps decode large reads (one per process: a forked child makes its own) and how many
    threads decode, the caller's included (``$VCOLLECT_DECODE_THREADS``, else 1 in a torch DataLoader worker,
    else :data:`DEFAULT_DECODE_THREADS` or the CPUs the process may use, the fewer)."""
    global _decode_pool
    text = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if not text:
        threads = 1 if _in_dataloader_worker() else min(DEFAULT_DECODE_THREADS, _usable_cpus())
    else:
        try:
            threads = int(text)
        except ValueError:
            threads = 0
    if threads < 1:
        raise ValueError(f"${DECODE_THREADS_ENV} is how many threads decode a read together, a whole number >= 1 "
                         f"(1: the calling thread alone), got {text!r}")
    if threads == 1:
        return None, 1
    if _decode_pool is None or _decode_pool[:2] != (os.getpid(), threads):
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="vcollect-decode")
        _decode_pool = (os.getpid(), threads, pool)
    return _decode_pool[2], threads


def _not_corruption(exc: BaseException) -> bool:
    """True for errors that do not mean a shard is damaged (too many open files, no memory, ...), and for a
    remote's errors while a shard read in place fetched what it reads (they name the remote or the block)."""
    return isinstance(exc, MemoryError | RecursionError | RemoteError) or (
        isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS
    )


def _raise_read_error(shard: StoredShard, name: str, exc: Exception) -> NoReturn:
    """Raise ``exc`` reading column ``name``: as it is when it says nothing about the file (or already names
    it), else as CorruptShardError naming the shard."""
    if isinstance(exc, CorruptShardError) or _not_corruption(exc):
        raise exc
    raise CorruptShardError(f"shard {str(shard.path)!r}: cannot read column {name!r}: {exc}") from exc


def _runs(lows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The rows of runs of consecutive rows (``counts[r]`` from ``lows[r]``), one run after the other."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) + np.repeat(lows - (np.cumsum(counts) - counts), counts)


def decode_column(arr: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """A column's values as stored, decoded where its attributes name an encoding.

    Args:
        arr: The values read from the shard file.
        attrs: The column's HDF5 attributes.

    Returns:
        Byte strings with an ``encoding`` attribute as unicode strings; anything else unchanged.
    """
    if "encoding" in attrs and arr.dtype.kind == "S":
        return np.char.decode(arr, str(attrs["encoding"]))
    return arr


@dataclass
class _Column:
    """Where one column lies in a shard file: its byte offset when contiguous and uncompressed (mappable)."""

    path: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    offset: int | None
    attrs: dict[str, Any]
    size: int = field(init=False)  # elements (rows x row size), computed once: reads test it on every call

    def __post_init__(self) -> None:
        self.size = math.prod(self.shape)


def _check_links(f: h5py.File) -> None:
    """Only hard links: a soft or external link could point anywhere, in this file or another."""

    def visit(name: str, link: Any) -> str | None:  # a value stops the walk (raising inside it is unsafe)
        return None if isinstance(link, h5py.HardLink) else f"{name!r} is a {type(link).__name__}"

    found = f.visititems_links(visit)
    if found is not None:
        raise ValueError(f"{found}, not a plain group or dataset")


@functools.lru_cache(maxsize=256)
def _dtype(text: str) -> np.dtype[Any]:
    """``np.dtype(text)``, parsed once per distinct text (manifests repeat a few dtypes many times)."""
    return np.dtype(text)


class StoredShard:
    """One committed shard's description: its episode table and where its columns lie (no file kept open)."""

    def __init__(
        self, path: Path, obs_leaves: list[Leaf], act_leaves: list[Leaf], summary: Mapping[str, Any] | None = None
    ) -> None:
        """Read the shard's table and layout from the file, or from its manifest ``summary`` (no file opened)."""
        self.path = path
        self.name = path.name
        self.columns: dict[str, _Column] = {}
        self.options: list[str] | None = None
        self.metadata: dict[str, np.ndarray] = {}
        #: the writer and seq the file says it was committed as (None when read from the manifest, or absent)
        self.writer: str | None = None
        self.seq: int | None = None
        #: the shard's layout attribute, parsed (shard_format.shard_layout); None for shards written without one
        self.layout: dict[str, Any] | None = None
        self.from_summary = summary is not None
        try:
            table = self._read() if summary is None else self._from_summary(summary)
            self._check(table, obs_leaves, act_leaves)
        except CorruptShardError:
            raise
        except Exception as exc:
            if _not_corruption(exc):
                raise
            raise CorruptShardError(f"shard {str(path)!r} is corrupt or truncated: {type(exc).__name__}: {exc}") from exc

    def _from_summary(self, summary: Mapping[str, Any]) -> dict[str, np.ndarray]:
        layout = summary.get("layout")
        self.layout = None if layout is None else dict(layout)
        self.num_episodes = int(summary["episodes"])
        self.num_steps = int(summary["steps"])
        for name, dtype, shape, offset, attrs in summary["columns"]:
            self.columns[name] = _Column(name, _dtype(dtype), tuple(shape), offset, dict(attrs))
        length = np.asarray(summary["length"], dtype=np.int64).reshape(-1)
        step_offset = np.zeros(length.shape, dtype=np.int64)
        np.cumsum(length[:-1], out=step_offset[1:])
        return {
            "length": length,
            "step_offset": step_offset,
            "obs_offset": step_offset + np.arange(length.shape[0]),
            "return": np.asarray(summary["return"], dtype=np.float64),
            "env_id": np.asarray(summary["env_id"], dtype=np.int64),
            "seed": np.asarray(summary["seed"], dtype=np.dtype(summary["seed_dtype"])),
            "seed_valid": np.asarray(summary["seed_valid"], dtype=np.bool_),
        }

    def _read(self) -> dict[str, np.ndarray]:
        file_size = os.path.getsize(self.path)
        import_plugin_filters()  # an lz4/zstd episode table reads only once the filters are registered
        with h5py.File(self.path, "r") as f:
            if f.attrs.get("format") != SHARD_FORMAT_NAME:
                raise ValueError(f"not a vcollect shard (format attribute {f.attrs.get('format')!r})")
            self.num_episodes = int(f.attrs["num_episodes"])
            self.num_steps = int(f.attrs["num_steps"])
            self._read_identity(f.attrs)
            if self.num_episodes < 0 or self.num_steps < 0:
                raise ValueError(f"negative totals: num_episodes={self.num_episodes}, num_steps={self.num_steps}")
            _check_links(f)

            def visit(name: str, obj: Any) -> str | None:  # a value stops the walk (raising inside it is unsafe)
                if isinstance(obj, h5py.Dataset):
                    if obj.is_virtual:
                        return f"column {name!r} is a virtual dataset (its data would come from elsewhere)"
                    if obj.external:
                        return f"column {name!r} has external storage (its data would come from another file)"
                    offset = obj.id.get_offset()
                    plain = obj.compression is None and obj.chunks is None and offset is not None
                    col = _Column(name, obj.dtype, tuple(obj.shape), int(offset) if plain else None, dict(obj.attrs))
                    nbytes = col.size * col.dtype.itemsize
                    if col.offset is not None and col.offset + nbytes > file_size:
                        return f"column {name!r} extends past the end of the file"
                    self.columns[name] = col
                return None

            fault = f.visititems(visit)
            if fault is not None:
                raise ValueError(fault)
            for name, kinds in _TABLE_KINDS.items():
                self._expect(f"episodes/{name}", (self.num_episodes,), kinds)
            self._check_declared_sizes(f)
            table = {name: np.asarray(f[f"episodes/{name}"][()]) for name in EPISODE_COLUMNS}
            if "episodes/options" in f:
                self._expect("episodes/options", (self.num_episodes,), "S")
                self.options = [str(s) for s in decode_column(f["episodes/options"][()], {"encoding": "utf-8"})]
            if "episodes/metadata" in f:
                for key, ds in f["episodes/metadata"].items():
                    col = self.columns.get(f"episodes/metadata/{key}")
                    if col is None or col.shape[:1] != (self.num_episodes,) or col.dtype.kind not in _TREE_KINDS:
                        raise ValueError(f"episodes/metadata/{key} is not a column of {self.num_episodes} rows")
                    self.metadata[key] = decode_column(np.asarray(ds[()]), ds.attrs)
        return table

    def _check_declared_sizes(self, f: h5py.File) -> None:
        """ValueError when a chunk of the ``episodes/`` table HDF5 is about to decode declares more than it
        holds (chunk_reader.check_declared_sizes)."""
        names = [name for name, col in self.columns.items() if name.startswith("episodes/") and col.offset is None]
        if not names:  # contiguous, unfiltered columns: nothing for HDF5 to decode
            return
        with open(self.path, "rb") as raw:
            for name in names:
                try:
                    check_declared_sizes(f[name], lambda offset, size: os.pread(raw.fileno(), size, offset))
                except ValueError as exc:
                    raise ValueError(f"column {name!r}: {exc}") from None

    def _read_identity(self, attrs: Any) -> None:
        """The writer, seq and layout attributes of the file (each None when absent)."""
        writer, seq, layout = attrs.get("writer"), attrs.get("seq"), attrs.get(LAYOUT_ATTR)
        if writer is not None:
            self.writer = writer.decode("utf-8", "replace") if isinstance(writer, bytes) else str(writer)
        if seq is not None:
            self.seq = int(seq)
        if layout is not None:
            parsed = json.loads(layout.decode("utf-8") if isinstance(layout, bytes) else str(layout))
            if not isinstance(parsed, dict):
                raise ValueError(f"its {LAYOUT_ATTR} attribute is not a JSON object")
            self.layout = parsed

    def _check(self, table: dict[str, np.ndarray], obs_leaves: list[Leaf], act_leaves: list[Leaf]) -> None:
        """Check the table against itself and the columns against the spaces; keep the table."""
        for name in EPISODE_COLUMNS:
            if table[name].shape != (self.num_episodes,):
                raise ValueError(f"episodes/{name} has shape {table[name].shape}, expected ({self.num_episodes},)")
        self.obs_offset = table["obs_offset"].astype(np.int64)
        self.step_offset = table["step_offset"].astype(np.int64)
        self.length = table["length"].astype(np.int64)
        self.returns = table["return"].astype(np.float64)
        self.env_id = table["env_id"].astype(np.int64)
        # int64, or uint64 in shards holding seeds of 64 bits (e.g. imported Minari autoseeds).
        self.seed = table["seed"] if table["seed"].dtype == np.uint64 else table["seed"].astype(np.int64)
        self.seed_valid = table["seed_valid"].astype(np.bool_)
        if self.num_episodes and int(self.length.min()) < 0:
            raise ValueError(f"episodes/length holds a negative length ({int(self.length.min())})")
        expected_steps = np.concatenate([[0], np.cumsum(self.length)])
        if (
            int(expected_steps[-1]) != self.num_steps
            or not np.array_equal(self.step_offset, expected_steps[:-1])
            or not np.array_equal(self.obs_offset, self.step_offset + np.arange(self.num_episodes))
        ):
            raise ValueError("the episodes table is inconsistent (offsets do not match lengths)")
        self.num_obs_rows = self.num_steps + self.num_episodes
        for prefix, leaf_list, rows in (
            ("observations", obs_leaves, self.num_obs_rows),
            ("actions", act_leaves, self.num_steps),
        ):
            for leaf in leaf_list:
                name = column_path(prefix, leaf.name)
                if leaf.dtype.kind == "U":  # a Text leaf: UTF-8 bytes, decoded by OpenShardFiles.read
                    self._expect(name, (rows, *leaf.shape), "S")
                    if self.columns[name].attrs.get(ENCODING_ATTR) != "utf-8":
                        raise ValueError(f"column {name!r} holds bytes without the utf-8 encoding of a Text leaf")
                else:
                    self._expect(name, (rows, *leaf.shape), _NUMERIC_KINDS, leaf.dtype)
        self._expect("rewards", (self.num_steps,), _NUMERIC_KINDS, np.dtype(np.float64))
        for name in ("terminations", "truncations"):
            self._expect(name, (self.num_steps,), "b")
        self.tree_columns: dict[str, dict[str, _Column]] = {"infos": {}, "extras": {}}
        for name, col in self.columns.items():
            group, _, key = name.partition("/")
            if group in self.tree_columns:
                rows = self.num_obs_rows if col.attrs.get("rows") == "obs" else self.num_steps
                if col.shape[:1] != (rows,):
                    raise ValueError(f"column {name!r} has {col.shape[:1] or 'no'} rows, expected {rows}")
                if col.dtype.kind not in _TREE_KINDS:
                    raise ValueError(f"column {name!r} has dtype {col.dtype}, not a number or byte string")
                self.tree_columns[group][key] = col

    def _expect(self, name: str, shape: tuple[int, ...], kinds: str, target: np.dtype[Any] | None = None) -> None:
        """Check that column ``name`` exists with ``shape``, a dtype of one of ``kinds``, castable to ``target``."""
        col = self.columns.get(name)
        if col is None:
            raise ValueError(f"column {name!r} is missing")
        if col.shape != shape:
            raise ValueError(f"column {name!r} has shape {col.shape}, expected {shape}")
        if col.dtype.kind not in kinds or (target is not None and not np.can_cast(col.dtype, target, "same_kind")):
            want = f"the space's {target}" if target is not None else f"dtype kind {'/'.join(kinds)}"
            raise ValueError(f"column {name!r} has dtype {col.dtype}, which does not fit {want}")


#: Required columns of the ``episodes/`` table and the dtype kinds each may have.
_TABLE_KINDS = {
    "obs_offset": "iu",
    "step_offset": "iu",
    "length": "iu",
    "return": _NUMERIC_KINDS,
    "env_id": "iu",
    "seed": "iu",
    "seed_valid": "b",
}


#: Raw columns of at most this many bytes are fetched whole, with the first rows a batch reads from a shard
#: read in place (a shard's rewards and flags: a few requests where each sampled row would cost one).
_SMALL_COLUMN_BYTES = 1 << 20


class ShardRanges(Protocol):
    """A shard file whose bytes arrive as reads need them (a dataset read in place from a remote).

    The reader asks for the byte ranges it is about to read before it reads them through the map or the
    file object this gives; nothing else of the file may be read.
    """

    @property
    def complete(self) -> bool:
        """Whether every byte of the file is present (reads need ask for nothing more)."""

    def ensure(self, starts: np.ndarray, stops: np.ndarray) -> None:
        """Make bytes ``starts[i]`` to ``stops[i]`` (exclusive) of the file present and checked."""

    def open_map(self) -> mmap.mmap:
        """A read-only memory map of the file."""

    def file_object(self) -> Any:
        """A binary file object over the file (for HDF5) whose reads ensure what they read first."""


#: Called with a shard file's path before the reader opens it: None when the file is whole there, or the
#: ShardRanges through which to read it.
ShardOpener = Callable[[Path], "ShardRanges | None"]


def _row_ranges(offset: int, row_bytes: int, rows: slice | np.ndarray, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges of ``rows`` of a contiguous column of ``row_bytes`` rows starting at ``offset``."""
    if isinstance(rows, slice):
        lo, hi, step = rows.indices(num_rows)
        if step == 1:
            return np.array([offset + lo * row_bytes]), np.array([offset + max(lo, hi) * row_bytes])
        rows = np.arange(lo, hi, step)
    starts = offset + np.asarray(rows, dtype=np.int64).reshape(-1) * row_bytes
    return starts, starts + row_bytes


def _chunk_ranges(table: ChunkTable, rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges of the chunks of ``table`` holding ``rows``."""
    if isinstance(rows, slice):
        lo, hi, step = rows.indices(table.num_rows)
        if hi <= lo:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        chunks = np.arange(lo // table.rows_per_chunk, (hi - 1) // table.rows_per_chunk + 1)
    else:
        chunks = np.asarray(rows, dtype=np.int64).reshape(-1) // table.rows_per_chunk
    starts = table.offsets[chunks]
    return starts, starts + table.sizes[chunks]


#: HDF5 files open over Python file objects (shards read through ShardRanges): closed before the interpreter
#: tears down, since HDF5 closing them then would call into objects already gone (a crash at exit).
_OVER_FILE_OBJECTS: weakref.WeakSet[h5py.File] = weakref.WeakSet()


@atexit.register
def _close_files_over_file_objects() -> None:
    for f in list(_OVER_FILE_OBJECTS):
        if f.id.valid:
            f.close()


class OpenShardFiles:
    """The shard files a dataset has open: at most ``capacity`` maps/HDF5 files, least recently used closed first.

    Arrays handed out are copies (or views dropped before the call returns), so closing never invalidates
    them; a map's descriptor is released once nothing references the map any more.
    """

    def __init__(self, capacity: int, before_open: ShardOpener | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        #: called with a shard file's path before the file is opened (a dataset read in place from a remote
        #: fetches the shard there, or hands back its ShardRanges); None: the files are all here
        self.before_open = before_open
        self._ranges: dict[tuple[int, str], ShardRanges] = {}  # open files whose bytes arrive as reads need them
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # fetch_ahead's, made on first need
        self._pool_pid = 0
        self._open: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._tables: dict[tuple[int, str], ChunkTable | None] = {}
        self._stacked: dict[str, StackedChunkTables | None] = {}  # per column, every shard's tables end to end
        self._checked: set[tuple[int, str]] = set()  # columns HDF5 decodes whose chunk headers were checked
        self._lock = threading.RLock()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self._open)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its capacity and opening hook only: open maps and HDF5 handles never cross into another
        process."""
        return {"capacity": self.capacity, "before_open": self.before_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"], state.get("before_open"))  # type: ignore[misc]

    def read(self, key: int, shard: StoredShard, name: str, rows: slice | np.ndarray) -> np.ndarray:
        """A copy of ``rows`` (a slice, or row numbers) of column ``name`` of ``shard``; a leaf column of
        Text (UTF-8 bytes with the encoding attribute) comes back decoded as unicode."""
        col = shard.columns[name]
        if name.startswith(_LEAF_PREFIXES) and col.dtype.kind == "S" and ENCODING_ATTR in col.attrs:
            return decode_utf8(self._read(key, shard, col, name, rows))
        return self._read(key, shard, col, name, rows)

    def read_into(self, key: int, shard: StoredShard, name: str, rows: np.ndarray, out: np.ndarray, where: np.ndarray) -> None:
        """``out[where] = rows`` of column ``name`` of ``shard`` (``rows`` best ascending: file order), with no
        copy in between for raw columns and Zstandard chunks of one row (sample_steps' gathers)."""
        col = shard.columns[name]
        if col.dtype == out.dtype and out.flags.c_contiguous and col.size:
            with self._lock:
                try:
                    if col.offset is not None:
                        ranges = self._ranges_of(key, shard)
                        if ranges is not None:
                            ranges.ensure(*_row_ranges(col.offset, col.size // col.shape[0] * col.dtype.itemsize,
                                                       rows, col.shape[0]))
                        out[where] = self._mapped_column(key, shard, col)[rows]
                        return
                    table = self._chunk_table(key, shard, name)
                    if table is not None and table.rows_per_chunk == 1:
                        ranges = self._ranges_of(key, shard)
                        if ranges is not None:
                            ranges.ensure(*_chunk_ranges(table, rows))
                        table.decode_into(self._get(key, shard, "map"), rows, out, where)
                        return
                except Exception as exc:
                    _raise_read_error(shard, name, exc)
        out[where] = self.read(key, shard, name, rows)

    def run_margin(self, key: int, shard: StoredShard, name: str) -> int:
        """The ``margin`` with which :meth:`read_runs_into` decodes column ``name`` of ``shard`` straight into
        its output: the rows of a chunk less one for a column read chunk by chunk (0 for one-row chunks), else 0
        (raw and other columns are read row for row)."""
        col = shard.columns[name]
        if col.offset is not None or not col.size:
            return 0
        with self._lock:
            try:
                table = self._chunk_table(key, shard, name)
            except Exception as exc:
                _raise_read_error(shard, name, exc)
        return 0 if table is None else table.rows_per_chunk - 1

    def runs_batch(self, out: np.ndarray) -> StretchBatch | None:
        """A batch in which :meth:`read_runs_into` of several shards leaves their stretches of Zstandard frames,
        decoded by :meth:`decode_runs_batch` (on ``$VCOLLECT_DECODE_THREADS`` threads where ``out`` is over a
        megabyte: the others begin decoding as soon as the first shard's stretches are in); None where
        libzstd does not load (each read then decodes its own). ``close()`` it whatever happens.

        Args:
            out: The array the reads decode into (C-contiguous).

        Returns:
            The batch, or None.
        """
        lib = library()
        if lib is None:
            return None
        pool, threads = _decoding_threads()
        return StretchBatch(out.reshape(-1).view(np.uint8), lib, None if out.nbytes <= PARALLEL_BYTES else pool,
                            threads)

    def decode_runs_batch(self, batch: StretchBatch, name: str) -> None:
        """Decode what :meth:`read_runs_into` left in ``batch`` for column ``name`` and wait for every thread.

        Raises:
            CorruptShardError: A stretch does not decode to its bytes; the message names its shard.
        """
        try:
            batch.run()
        except StretchError as exc:
            if exc.label is None:
                raise
            _raise_read_error(exc.label, name, exc)

    def stacked_tables(self, name: str, shards: list[StoredShard]) -> StackedChunkTables | None:
        """Column ``name``'s chunk tables of every shard (key: its position in ``shards``, which must be the same
        list at every call) end to end, read once and kept; None where a shard's column is not Zstandard in
        chunks, chunks differ between shards, libzstd does not load, or the files arrive as reads need them.

        Raises:
            CorruptShardError: A shard's chunk table cannot be read; the message names the shard.
        """
        if name in self._stacked:
            return self._stacked[name]
        stacked = None
        if self.before_open is None and library() is not None and shards:
            with self._lock:
                tables: list[ChunkTable | None] = []
                for key, shard in enumerate(shards):
                    col = shard.columns[name]
                    if col.offset is not None or not col.size:
                        tables = [None]
                        break
                    try:
                        tables.append(self._chunk_table(key, shard, name))
                    except Exception as exc:
                        _raise_read_error(shard, name, exc)
                stacked = StackedChunkTables.of(tables)
        self._stacked[name] = stacked
        return stacked

    def read_runs_stacked(self, name: str, shards: list[StoredShard], stacked: StackedChunkTables, keys: np.ndarray,
                          lows: np.ndarray, counts: np.ndarray, places: np.ndarray, batch: StretchBatch) -> None:
        """As :meth:`read_runs_into` with :meth:`run_margin`'s margin and a ``batch``, for runs in every shard at
        once: run r is ``counts[r]`` rows of column ``name`` from row ``lows[r]`` of shard ``keys[r]``
        (``stacked``: :meth:`stacked_tables` of ``shards``), its stretches planned with the others'.

        Raises:
            CorruptShardError: A run's chunks lie outside its file; the message names the shard.
        """
        touched, which = np.unique(keys, return_inverse=True)
        touched_keys = touched.tolist()
        labels = [shards[k] for k in touched_keys]
        with self._lock:
            maps = [self._get(k, shards[k], "map") for k in touched_keys]
            try:
                stacked.add_runs(maps, labels, which.reshape(-1), keys, lows, counts, places, batch)
            except StretchError as exc:
                if exc.label is None:
                    raise
                _raise_read_error(exc.label, name, exc)

    def read_runs_into(self, key: int, shard: StoredShard, name: str, lows: np.ndarray, counts: np.ndarray,
                       out: np.ndarray, places: np.ndarray, margin: int = 0,
                       batch: StretchBatch | None = None) -> None:
        """``out[places[r] : places[r] + counts[r]]`` = the ``counts[r]`` rows of column ``name`` of ``shard``
        from row ``lows[r]`` on, for each run r: a Zstandard column decodes each run's chunks once, as a stream
        (slices' frames), a raw column is one gather from the file's map. ``margin``: rows of ``out`` before
        and after every run that may be overwritten; with :meth:`run_margin`'s, a compressed column's chunks
        are decoded straight into ``out`` (whole chunks, around each run), with no copy, a large read's
        streams shared between this thread and ``$VCOLLECT_DECODE_THREADS - 1`` others (by default one where the
        process may use two CPUs).
        Given a ``batch`` (:meth:`runs_batch` over ``out``), the stretches of Zstandard frames are left in it,
        to be decoded by :meth:`decode_runs_batch` once every shard's are in."""
        lows = np.asarray(lows, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        places = np.asarray(places, dtype=np.int64)
        col = shard.columns[name]
        pool, threads = _decoding_threads() if batch is None else (None, 1)  # a batch decodes on its own threads
        if col.dtype == out.dtype and out.flags.c_contiguous and col.size:
            with self._lock:
                try:
                    table = None if col.offset is not None else self._chunk_table(key, shard, name)
                    ranges = self._ranges_of(key, shard)
                    if table is not None:
                        if ranges is not None:
                            ranges.ensure(*_chunk_ranges(table, _runs(lows, counts)))
                        table.read_runs(self._get(key, shard, "map"), lows, counts, out, places, margin, pool,
                                        threads, batch=batch)
                        if batch is not None:
                            batch.label(shard)
                        return
                    if col.offset is not None:
                        if ranges is not None:
                            ranges.ensure(*_row_ranges(col.offset, col.size // col.shape[0] * col.dtype.itemsize,
                                                       _runs(lows, counts), col.shape[0]))
                        out[_runs(places, counts)] = self._mapped_column(key, shard, col)[_runs(lows, counts)]
                        return
                except Exception as exc:
                    _raise_read_error(shard, name, exc)
        out[_runs(places, counts)] = self.read(key, shard, name, _runs(lows, counts))

    def _mapped_column(self, key: int, shard: StoredShard, col: _Column) -> np.ndarray:
        """A raw column as an array over the file's map (a view: drop it before the map may close)."""
        assert col.offset is not None
        mapped = self._get(key, shard, "map")
        return np.frombuffer(mapped, dtype=col.dtype, count=col.size, offset=col.offset).reshape(col.shape)

    def _read(self, key: int, shard: StoredShard, col: _Column, name: str, rows: slice | np.ndarray) -> np.ndarray:
        if not col.size:
            return np.empty(col.shape, dtype=col.dtype)[rows]
        with self._lock:
            try:
                return self._read_locked(key, shard, col, name, rows)
            except Exception as exc:
                _raise_read_error(shard, name, exc)

    def _read_locked(self, key: int, shard: StoredShard, col: _Column, name: str, rows: slice | np.ndarray) -> np.ndarray:
        if col.offset is not None:
            ranges = self._ranges_of(key, shard)
            if ranges is not None:
                ranges.ensure(*_row_ranges(col.offset, col.size // col.shape[0] * col.dtype.itemsize, rows,
                                           col.shape[0]))
            return np.array(self._mapped_column(key, shard, col)[rows])
        table = self._chunk_table(key, shard, name)
        if table is not None:  # Zstandard or deflate chunks: decoded straight from the file's map
            ranges = self._ranges_of(key, shard)
            if ranges is not None:
                ranges.ensure(*_chunk_ranges(table, rows))
            mapped = self._get(key, shard, "map")
            if isinstance(rows, slice):
                lo, hi, step = rows.indices(col.shape[0])
                if step == 1:
                    return table.read_range(mapped, lo, max(lo, hi))
                rows = np.arange(lo, hi, step)
            return table.read_rows(mapped, rows)
        if (key, name) not in self._checked:  # HDF5 allocates what a chunk declares: held to its size first
            mapped = self._get(key, shard, "map")  # before the HDF5 file, which a capacity of one would close
            ranges = self._ranges.get((key, "map"))

            def read_at(offset: int, size: int) -> bytes:
                if ranges is not None:
                    ranges.ensure(np.array([offset]), np.array([offset + size]))
                return mapped[offset : offset + size]

            check_declared_sizes(self._get(key, shard, "h5")[name], read_at)
            self._checked.add((key, name))
        ds = self._get(key, shard, "h5")[name]
        if isinstance(rows, slice):
            return np.asarray(ds[rows])
        if rows.size == 0:
            return np.empty((0, *col.shape[1:]), dtype=col.dtype)
        lo, hi = int(rows.min()), int(rows.max()) + 1
        unique, inverse = np.unique(rows, return_inverse=True)
        if hi - lo <= 4 * unique.size:  # dense: one range read
            return np.asarray(ds[lo:hi])[rows - lo]
        return np.asarray(ds[unique])[inverse]  # sparse: decode only the chunks holding the rows

    def _chunk_table(self, key: int, shard: StoredShard, name: str) -> ChunkTable | None:
        """The chunk table of a Zstandard- or deflate-compressed column, or None for other columns. Read once per column
        through HDF5 and kept, so later reads of the column need only the file's map: sampling a dataset of
        more shards than ``capacity`` / 2 would otherwise reopen an HDF5 file (~0.2 ms) per shard per call."""
        if (key, name) not in self._tables:
            ds = self._get(key, shard, "h5")[name]
            self._tables[(key, name)] = ChunkTable(ds) if ChunkTable.applies_to(ds) else None
        return self._tables[(key, name)]

    def fetch_ahead(self, name: str, parts: list[tuple[int, StoredShard, np.ndarray]]) -> None:
        """Fetch what reads of column ``name`` at ``parts`` (key, shard, rows) will read, for every shard at
        once, where shard files' bytes arrive as reads need them (nothing to do otherwise).

        Args:
            name: The column.
            parts: For each shard, its key, description and the rows about to be read.

        Raises:
            RemoteIntegrityError: A fetched block differs from its checksum.
            RemoteTransferError: A transfer failed.
        """
        if self.before_open is None or len(parts) < 2:
            return
        work: list[tuple[ShardRanges, np.ndarray, np.ndarray]] = []
        with self._lock:
            for key, shard, rows in parts:
                col = shard.columns[name]
                ranges = self._ranges_of(key, shard) if col.size else None
                if ranges is None:
                    continue
                if col.offset is not None:
                    row_bytes = col.size // col.shape[0] * col.dtype.itemsize
                    starts, stops = _row_ranges(col.offset, row_bytes, rows, col.shape[0])
                else:
                    table = self._chunk_table(key, shard, name)
                    if table is None:  # columns HDF5 decodes fetch what it reads as it reads it
                        continue
                    starts, stops = _chunk_ranges(table, rows)
                # the shard's small raw columns (rewards, flags, actions) come along in the same requests: the
                # next gathers of the batch read them
                small = [(c.offset, c.offset + c.size * c.dtype.itemsize) for c in shard.columns.values()
                         if c.offset is not None and c.size * c.dtype.itemsize <= _SMALL_COLUMN_BYTES]
                if small:
                    starts = np.concatenate([starts, [a for a, _ in small]])
                    stops = np.concatenate([stops, [b for _, b in small]])
                work.append((ranges, starts, stops))
        if len(work) < 2:
            return
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="vcollect-fetch")
            self._pool_pid = os.getpid()
        for future in [self._pool.submit(ranges.ensure, starts, stops) for ranges, starts, stops in work]:
            future.result()

    def _ranges_of(self, key: int, shard: StoredShard) -> ShardRanges | None:
        """The ShardRanges of the shard's open map (opened first), or None where its file is whole here (or
        has arrived whole)."""
        if self.before_open is None:
            return None
        self._get(key, shard, "map")
        ranges = self._ranges.get((key, "map"))
        return None if ranges is None or ranges.complete else ranges

    def _get(self, key: int, shard: StoredShard, kind: str) -> Any:
        if os.getpid() != self._pid:  # a forked child opens its own files (HDF5 handles do not survive fork)
            self._open = OrderedDict()
            self._pid = os.getpid()
        handle = self._open.get((key, kind))
        if handle is not None:
            self._open.move_to_end((key, kind))
            return handle
        self._close_oldest(len(self._open) - self.capacity + 1)
        ranges = self.before_open(shard.path) if self.before_open is not None else None
        try:
            handle = self._open_file(shard.path, kind, ranges)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            # the process is out of file descriptors (other datasets, other files): give back half of ours
            self._close_oldest(max(1, len(self._open) // 2))
            handle = self._open_file(shard.path, kind, ranges)
        self._open[(key, kind)] = handle
        if ranges is not None:
            self._ranges[(key, kind)] = ranges
        return handle

    def _close_oldest(self, count: int) -> None:
        """Close the ``count`` least recently used files (a map closes, releasing its descriptor, when the
        last reference to it goes)."""
        for _ in range(min(count, len(self._open))):
            which, old = self._open.popitem(last=False)
            self._ranges.pop(which, None)
            if isinstance(old, h5py.File):
                old.close()

    @staticmethod
    def _open_file(path: Path, kind: str, ranges: ShardRanges | None) -> Any:
        if kind == "map":
            if ranges is not None:
                return ranges.open_map()
            with open(path, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        import_plugin_filters()  # a column written with lz4/zstd reads only once they are registered
        if ranges is None:
            return h5py.File(path, "r")
        f = h5py.File(ranges.file_object(), "r")
        _OVER_FILE_OBJECTS.add(f)
        return f

    def close(self) -> None:
        """Close every open file."""
        with self._lock:
            self._ranges.clear()
            while self._open:
                _, old = self._open.popitem()
                if isinstance(old, h5py.File):
                    old.close()
