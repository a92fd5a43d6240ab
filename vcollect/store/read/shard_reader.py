"""Reading one shard file of a dataset: its checked description, and the least-recently-used set of open files.

``StoredShard`` reads a committed shard's small ``episodes/`` table and where each column lies (from the file,
or from its manifest line) and checks both against the dataset's spaces; ``OpenShardFiles`` reads column rows
through memory maps (raw columns; Zstandard and gzip columns through their chunk tables, chunk_reader.py) or HDF5
(other codecs), keeping at most a given number of files open. A damaged shard raises CorruptShardError
naming the file.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import h5py
import numpy as np

from vcollect.errors import CorruptShardError
from vcollect.spaces import Leaf
from vcollect.store.layout.shard_format import EPISODE_COLUMNS, LAYOUT_ATTR, SHARD_FORMAT_NAME, column_path
from vcollect.store.read.chunk_reader import ChunkTable, check_declared_sizes
from vcollect.store.write.compression import import_plugin_filters
from vcollect.text_leaves import ENCODING_ATTR, decode_utf8

__all__ = ["OpenShardFiles", "StoredShard", "decode_column"]

#: errno values that say something about the process or the system, not about the shard being read.
_RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EACCES, errno.EPERM, errno.EAGAIN, errno.EINTR}
)

#: dtype kinds a column may have: numbers and flags, and fixed-size byte strings for infos/extras/metadata.
_NUMERIC_KINDS = "biuf"
_TREE_KINDS = "biufcS"
#: where the observation/action leaf columns are (Text ones are decoded when read)
_LEAF_PREFIXES = ("observations", "actions")


def _not_corruption(exc: BaseException) -> bool:
    """True for errors that do not mean a shard is damaged (too many open files, no memory, ...)."""
    return isinstance(exc, MemoryError | RecursionError) or (
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


class OpenShardFiles:
    """The shard files a dataset has open: at most ``capacity`` maps/HDF5 files, least recently used closed first.

    Arrays handed out are copies (or views dropped before the call returns), so closing never invalidates
    them; a map's descriptor is released once nothing references the map any more.
    """

    def __init__(self, capacity: int, before_open: Callable[[Path], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        #: called with a shard file's path before the file is opened (a dataset read in place from a remote
        #: fetches the shard there); None: the files are all here
        self.before_open = before_open
        self._open: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._tables: dict[tuple[int, str], ChunkTable | None] = {}
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
                        out[where] = self._mapped_column(key, shard, col)[rows]
                        return
                    table = self._chunk_table(key, shard, name)
                    if table is not None and table.rows_per_chunk == 1:
                        table.decode_into(self._get(key, shard, "map"), rows, out, where)
                        return
                except Exception as exc:
                    _raise_read_error(shard, name, exc)
        out[where] = self.read(key, shard, name, rows)

    def read_runs_into(self, key: int, shard: StoredShard, name: str, lows: np.ndarray, counts: np.ndarray,
                       out: np.ndarray, places: np.ndarray) -> None:
        """``out[places[r] : places[r] + counts[r]]`` = the ``counts[r]`` rows of column ``name`` of ``shard``
        from row ``lows[r]`` on, for each run r: a Zstandard column decodes each run's chunks once, as a stream
        (slices' frames), a raw column is one gather from the file's map."""
        lows = np.asarray(lows, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        places = np.asarray(places, dtype=np.int64)
        col = shard.columns[name]
        if col.dtype == out.dtype and out.flags.c_contiguous and col.size:
            with self._lock:
                try:
                    table = None if col.offset is not None else self._chunk_table(key, shard, name)
                    if table is not None:
                        table.read_runs(self._get(key, shard, "map"), lows, counts, out, places)
                        return
                    if col.offset is not None:
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
            return np.array(self._mapped_column(key, shard, col)[rows])
        table = self._chunk_table(key, shard, name)
        if table is not None:  # Zstandard or deflate chunks: decoded straight from the file's map
            mapped = self._get(key, shard, "map")
            if isinstance(rows, slice):
                lo, hi, step = rows.indices(col.shape[0])
                if step == 1:
                    return table.read_range(mapped, lo, max(lo, hi))
                rows = np.arange(lo, hi, step)
            return table.read_rows(mapped, rows)
        if (key, name) not in self._checked:  # HDF5 allocates what a chunk declares: held to its size first
            mapped = self._get(key, shard, "map")  # before the HDF5 file, which a capacity of one would close
            check_declared_sizes(self._get(key, shard, "h5")[name],
                                 lambda offset, size: mapped[offset : offset + size])
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

    def _get(self, key: int, shard: StoredShard, kind: str) -> Any:
        if os.getpid() != self._pid:  # a forked child opens its own files (HDF5 handles do not survive fork)
            self._open = OrderedDict()
            self._pid = os.getpid()
        handle = self._open.get((key, kind))
        if handle is not None:
            self._open.move_to_end((key, kind))
            return handle
        self._close_oldest(len(self._open) - self.capacity + 1)
        if self.before_open is not None:
            self.before_open(shard.path)
        try:
            handle = self._open_file(shard.path, kind)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            # the process is out of file descriptors (other datasets, other files): give back half of ours
            self._close_oldest(max(1, len(self._open) // 2))
            handle = self._open_file(shard.path, kind)
        self._open[(key, kind)] = handle
        return handle

    def _close_oldest(self, count: int) -> None:
        """Close the ``count`` least recently used files (a map closes, releasing its descriptor, when the
        last reference to it goes)."""
        for _ in range(min(count, len(self._open))):
            _, old = self._open.popitem(last=False)
            if isinstance(old, h5py.File):
                old.close()

    @staticmethod
    def _open_file(path: Path, kind: str) -> Any:
        if kind == "map":
            with open(path, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        import_plugin_filters()  # a column written with lz4/zstd reads only once they are registered
        return h5py.File(path, "r")

    def close(self) -> None:
        """Close every open file."""
        with self._lock:
            while self._open:
                _, old = self._open.popitem()
                if isinstance(old, h5py.File):
                    old.close()
