"""Reading datasets written by EpisodeStore, with Minari's names: load_dataset, Dataset, EpisodeData.

``load_dataset`` reads every committed shard's small ``episodes/`` table and notes where each
column lies in its file; column data are read on use, through memory maps (uncompressed shards) or
HDF5 (compressed ones) of at most ``max_open_files`` files open at once, so loading is cheap, memory
stays small and a dataset of any number of shards reads within a small file-descriptor limit. Episode ids are global: shards sorted
by file name (commit time first), then row. ``.tmp`` files (half-written shards) are ignored.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import json
import mmap
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from vcollect.errors import CorruptShardError
from vcollect.spaces import Leaf, leaves, unflatten_batch
from vcollect.store.dataset_info import dataset_files, dataset_spaces, read_dataset_info
from vcollect.store.manifest import read_manifest
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.shard import EPISODE_COLUMNS, SHARD_FORMAT_NAME, column_path

__all__ = ["MAX_OPEN_FILES", "SAMPLE_CACHE_BYTES", "Dataset", "EpisodeData", "load_dataset"]

#: Default ``cache_bytes`` of :meth:`Dataset.sample_steps`: the sampled columns of all shards are copied
#: into memory once when they total at most this many bytes; above it, rows are gathered from the files.
SAMPLE_CACHE_BYTES = 64 * 2**20

#: Most files a loaded dataset keeps open at once (each open shard map or HDF5 file holds one file
#: descriptor); the least recently used one is closed first. Views of one dataset share them.
MAX_OPEN_FILES = 32

#: errno values that say something about the process or the system, not about the shard being read.
_RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EACCES, errno.EPERM, errno.EAGAIN, errno.EINTR}
)

#: dtype kinds a column may have: numbers and flags, and fixed-size byte strings for infos/extras/metadata.
_NUMERIC_KINDS = "biuf"
_TREE_KINDS = "biufcS"


def _not_corruption(exc: BaseException) -> bool:
    """True for errors that do not mean a shard is damaged (too many open files, no memory, ...)."""
    return isinstance(exc, MemoryError | RecursionError) or (
        isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS
    )


@dataclass(frozen=True, eq=False)
class EpisodeData:
    """One stored episode: T+1 observations, T actions/rewards/flags, infos/extras, seed and env id."""

    id: int
    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, Any]
    extras: dict[str, Any]
    seed: int | None
    env_id: int
    options: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        """Number of steps T."""
        return int(self.rewards.shape[0])

    def __repr__(self) -> str:
        return (
            f"EpisodeData(id={self.id}, steps={len(self)}, seed={self.seed}, env_id={self.env_id}, "
            f"return={float(self.rewards.sum()):.6g})"
        )


def _decode(arr: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
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


class _Shard:
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
        with h5py.File(self.path, "r") as f:
            if f.attrs.get("format") != SHARD_FORMAT_NAME:
                raise ValueError(f"not a vcollect shard (format attribute {f.attrs.get('format')!r})")
            self.num_episodes = int(f.attrs["num_episodes"])
            self.num_steps = int(f.attrs["num_steps"])
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
                    nbytes = int(np.prod(col.shape, dtype=np.int64)) * col.dtype.itemsize
                    if col.offset is not None and col.offset + nbytes > file_size:
                        return f"column {name!r} extends past the end of the file"
                    self.columns[name] = col
                return None

            fault = f.visititems(visit)
            if fault is not None:
                raise ValueError(fault)
            for name, kinds in _TABLE_KINDS.items():
                self._expect(f"episodes/{name}", (self.num_episodes,), kinds)
            table = {name: np.asarray(f[f"episodes/{name}"][()]) for name in EPISODE_COLUMNS}
            if "episodes/options" in f:
                self._expect("episodes/options", (self.num_episodes,), "S")
                self.options = [str(s) for s in _decode(f["episodes/options"][()], {"encoding": "utf-8"})]
            if "episodes/metadata" in f:
                for key, ds in f["episodes/metadata"].items():
                    col = self.columns.get(f"episodes/metadata/{key}")
                    if col is None or col.shape[:1] != (self.num_episodes,) or col.dtype.kind not in _TREE_KINDS:
                        raise ValueError(f"episodes/metadata/{key} is not a column of {self.num_episodes} rows")
                    self.metadata[key] = _decode(np.asarray(ds[()]), ds.attrs)
        return table

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
                self._expect(column_path(prefix, leaf.name), (rows, *leaf.shape), _NUMERIC_KINDS, leaf.dtype)
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


class _OpenFiles:
    """The shard files a dataset has open: at most ``capacity`` maps/HDF5 files, least recently used closed first.

    Arrays handed out are copies (or views dropped before the call returns), so closing never invalidates
    them; a map's descriptor is released once nothing references the map any more.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._open: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._lock = threading.RLock()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self._open)

    def read(self, key: int, shard: _Shard, name: str, rows: slice | np.ndarray) -> np.ndarray:
        """A copy of ``rows`` (a slice, or row numbers) of column ``name`` of ``shard``."""
        col = shard.columns[name]
        if int(np.prod(col.shape, dtype=np.int64)) == 0:
            return np.empty(col.shape, dtype=col.dtype)[rows]
        with self._lock:
            try:
                if col.offset is not None:
                    mapped = self._get(key, shard, "map")
                    count = int(np.prod(col.shape, dtype=np.int64))
                    arr = np.frombuffer(mapped, dtype=col.dtype, count=count, offset=col.offset).reshape(col.shape)
                    out = np.array(arr[rows])
                    del arr
                    return out
                ds = self._get(key, shard, "h5")[name]
                if isinstance(rows, slice):
                    return np.asarray(ds[rows])
                if rows.size == 0:
                    return np.empty((0, *col.shape[1:]), dtype=col.dtype)
                lo, hi = int(rows.min()), int(rows.max()) + 1
                return np.asarray(ds[lo:hi])[rows - lo]
            except CorruptShardError:
                raise
            except Exception as exc:
                if _not_corruption(exc):
                    raise
                raise CorruptShardError(f"shard {str(shard.path)!r}: cannot read column {name!r}: {exc}") from exc

    def _get(self, key: int, shard: _Shard, kind: str) -> Any:
        if os.getpid() != self._pid:  # a forked child opens its own files (HDF5 handles do not survive fork)
            self._open = OrderedDict()
            self._pid = os.getpid()
        handle = self._open.get((key, kind))
        if handle is not None:
            self._open.move_to_end((key, kind))
            return handle
        while len(self._open) >= self.capacity:
            _, old = self._open.popitem(last=False)
            if isinstance(old, h5py.File):
                old.close()
            # a map closes (and releases its descriptor) when the last reference to it goes
        if kind == "map":
            with open(shard.path, "rb") as f:
                handle = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        else:
            handle = h5py.File(shard.path, "r")
        self._open[(key, kind)] = handle
        return handle

    def close(self) -> None:
        """Close every open file."""
        with self._lock:
            while self._open:
                _, old = self._open.popitem()
                if isinstance(old, h5py.File):
                    old.close()


class _Index:
    """Everything a Dataset view shares: shards, global episode table, spaces, open files and the sampling cache."""

    def __init__(
        self, dataset_id: str, path: Path, info: dict[str, Any], shards: list[_Shard], max_open_files: int
    ) -> None:
        self.dataset_id = dataset_id
        self.path = path
        self.info = info
        self.observation_space, self.action_space = dataset_spaces(info)
        self.obs_leaves = leaves(self.observation_space)
        self.act_leaves = leaves(self.action_space)
        self.shards = shards
        self.files = _OpenFiles(max_open_files)
        counts = [s.num_episodes for s in shards]
        self.shard_of = np.repeat(np.arange(len(shards), dtype=np.int64), counts)
        self.shard_first_episode = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        step_base = np.concatenate([[0], np.cumsum([s.num_steps for s in shards], dtype=np.int64)])
        obs_base = np.concatenate([[0], np.cumsum([s.num_obs_rows for s in shards], dtype=np.int64)])

        def cat(name: str, dtype: Any) -> np.ndarray:
            parts = [getattr(s, name) for s in shards]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        self.local_obs_offset = cat("obs_offset", np.int64)
        self.local_step_offset = cat("step_offset", np.int64)
        self.length = cat("length", np.int64)
        self.returns = cat("returns", np.float64)
        self.env_id = cat("env_id", np.int64)
        seed_dtypes = {s.seed.dtype for s in shards}
        self.seed = cat("seed", seed_dtypes.pop() if len(seed_dtypes) == 1 else (object if seed_dtypes else np.int64))
        self.seed_valid = cat("seed_valid", np.bool_)
        self.global_obs_offset = self.local_obs_offset + obs_base[:-1][self.shard_of]
        self.global_step_offset = self.local_step_offset + step_base[:-1][self.shard_of]
        self.total_steps = int(step_base[-1])
        self.step_base = step_base
        self.obs_base = obs_base
        self._cache: dict[str, np.ndarray] | None = None
        self._cache_lock = threading.Lock()

    @property
    def total_episodes(self) -> int:
        return int(self.length.shape[0])

    def episode(self, episode_id: int) -> EpisodeData:
        """Decode one episode by global id."""
        if not 0 <= episode_id < self.total_episodes:
            raise IndexError(f"episode id {episode_id} out of range [0, {self.total_episodes})")
        s = int(self.shard_of[episode_id])
        shard = self.shards[s]
        row = episode_id - int(self.shard_first_episode[s])
        o = int(shard.obs_offset[row])
        st = int(shard.step_offset[row])
        steps = int(shard.length[row])
        obs_rows, step_rows = slice(o, o + steps + 1), slice(st, st + steps)

        def read(name: str, rows: slice) -> np.ndarray:
            return self.files.read(s, shard, name, rows)

        def leaf_values(prefix: str, leaf_list: list[Leaf], rows: slice) -> list[np.ndarray]:
            return [read(column_path(prefix, leaf.name), rows).astype(leaf.dtype, copy=False) for leaf in leaf_list]

        observations = unflatten_batch(self.observation_space, leaf_values("observations", self.obs_leaves, obs_rows))
        actions = unflatten_batch(self.action_space, leaf_values("actions", self.act_leaves, step_rows))
        trees: dict[str, dict[str, Any]] = {}
        for group, cols in shard.tree_columns.items():
            tree: dict[str, Any] = {}
            for key, col in cols.items():
                value = _decode(read(col.path, obs_rows if col.attrs.get("rows") == "obs" else step_rows), col.attrs)
                node = tree
                *parents, last = key.split("/")
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = value
            trees[group] = tree
        options = None
        if shard.options is not None:
            options = json.loads(shard.options[row])
        metadata = {key: (col[row].item() if col.ndim == 1 else np.array(col[row])) for key, col in shard.metadata.items()}
        return EpisodeData(
            id=episode_id,
            observations=observations,
            actions=actions,
            rewards=read("rewards", step_rows).astype(np.float64, copy=False),
            terminations=read("terminations", step_rows).astype(np.bool_, copy=False),
            truncations=read("truncations", step_rows).astype(np.bool_, copy=False),
            infos=trees["infos"],
            extras=trees["extras"],
            seed=int(shard.seed[row]) if shard.seed_valid[row] else None,
            env_id=int(shard.env_id[row]),
            options=options,
            metadata=metadata,
        )

    def _sampled_columns(self) -> list[tuple[str, np.dtype[Any], bool]]:
        """(name, dtype, has observation rows) of every column sample_steps reads."""
        cols = [(column_path("observations", leaf.name), leaf.dtype, True) for leaf in self.obs_leaves]
        cols += [(column_path("actions", leaf.name), leaf.dtype, False) for leaf in self.act_leaves]
        cols += [(name, np.dtype(dtype), False) for name, dtype in
                 (("rewards", np.float64), ("terminations", np.bool_), ("truncations", np.bool_))]
        return cols

    def _row_shape(self, name: str) -> tuple[int, ...]:
        return self.shards[0].columns[name].shape[1:] if self.shards else ()

    def cache_size(self) -> int:
        """Bytes the in-memory copy of the sampled columns of all shards takes (or would take)."""
        nbytes = 0
        for name, dtype, obs_rows in self._sampled_columns():
            rows = self.total_steps + (self.total_episodes if obs_rows else 0)
            nbytes += rows * int(np.prod(self._row_shape(name), dtype=np.int64)) * dtype.itemsize
        return nbytes

    @property
    def cache_nbytes(self) -> int:
        """Bytes the in-memory sampling cache holds now (0 when not built)."""
        cache = self._cache
        return 0 if cache is None else sum(arr.nbytes for arr in cache.values())

    def cache(self, cache_bytes: int) -> dict[str, np.ndarray] | None:
        """The sampled columns of all shards concatenated in memory, built on first use when they fit in
        ``cache_bytes`` (else None); filled shard by shard so that few files are open at once."""
        if self._cache is not None or self.cache_size() > cache_bytes:
            return self._cache
        with self._cache_lock:
            if self._cache is None:
                columns = self._sampled_columns()
                cache = {
                    name: np.empty((int((self.obs_base if obs_rows else self.step_base)[-1]), *self._row_shape(name)),
                                   dtype=dtype)
                    for name, dtype, obs_rows in columns
                }
                for s, shard in enumerate(self.shards):  # shard by shard: each file opened once
                    for name, _, obs_rows in columns:
                        base = self.obs_base if obs_rows else self.step_base
                        cache[name][base[s] : base[s + 1]] = self.files.read(s, shard, name, slice(None))
                self._cache = cache
        return self._cache

    def gather(self, name: str, dtype: np.dtype[Any], rows: np.ndarray, obs_rows: bool, cache_bytes: int) -> np.ndarray:
        """Rows (global row numbers) of one column, from the cache or else shard by shard."""
        cache = self.cache(cache_bytes)
        if cache is not None:
            return cache[name][rows]
        base = self.obs_base if obs_rows else self.step_base
        which = np.searchsorted(base, rows, side="right") - 1
        out = np.empty((len(rows), *self._row_shape(name)), dtype=dtype)
        for s in np.unique(which).tolist():
            sel = which == s
            out[sel] = self.files.read(s, self.shards[s], name, rows[sel] - base[s])
        return out


class Dataset:
    """A dataset (or a view of some of its episodes) with Minari's API, plus fast ``sample_steps``.

    Views made by ``filter_episodes``/``split_dataset`` share the loaded shards; nothing is copied.
    """

    def __init__(self, index: _Index, episode_indices: np.ndarray | None = None) -> None:
        """Internal: use :func:`load_dataset`."""
        self._index = index
        if episode_indices is None:
            episode_indices = np.arange(index.total_episodes, dtype=np.int64)
        self._episode_indices = np.asarray(episode_indices, dtype=np.int64)
        self._rng = np.random.default_rng()
        self._cum_lengths: np.ndarray | None = None

    # ------------------------------------------------------------------ metadata

    @property
    def id(self) -> str:
        """The dataset id."""
        return self._index.dataset_id

    @property
    def path(self) -> Path:
        """The dataset directory."""
        return self._index.path

    @property
    def observation_space(self) -> gym.Space[Any]:
        """Observation space of every episode."""
        return self._index.observation_space

    @property
    def action_space(self) -> gym.Space[Any]:
        """Action space of every episode."""
        return self._index.action_space

    @property
    def env_spec_json(self) -> str | None:
        """The stored env spec as gymnasium's JSON string (what Minari keeps in its metadata), or None."""
        value = self._index.info.get("env_spec")
        return None if value is None else str(value)

    @property
    def eval_env_spec_json(self) -> str | None:
        """The stored evaluation env spec JSON, or None."""
        value = self._index.info.get("eval_env_spec")
        return None if value is None else str(value)

    @property
    def env_spec(self) -> gym.envs.registration.EnvSpec | None:
        """The env spec the data was collected with (for ``recover_environment``), or None."""
        text = self.env_spec_json
        return None if text is None else gym.envs.registration.EnvSpec.from_json(text)

    @property
    def eval_env_spec(self) -> gym.envs.registration.EnvSpec | None:
        """The evaluation env spec, or None."""
        text = self.eval_env_spec_json
        return None if text is None else gym.envs.registration.EnvSpec.from_json(text)

    @property
    def metadata(self) -> dict[str, Any]:
        """Dataset metadata from dataset.json (author, description, ...), plus dataset_id and created_at."""
        info = self._index.info
        return {
            **info.get("metadata", {}),
            "dataset_id": self.id,
            "created_at": info.get("created_at"),
            "format_version": info.get("format_version"),
        }

    @property
    def episode_indices(self) -> np.ndarray:
        """Global ids of the episodes in this dataset (view), in order."""
        return self._episode_indices

    @property
    def total_episodes(self) -> int:
        """Number of episodes in this dataset (view)."""
        return int(self._episode_indices.shape[0])

    @property
    def total_steps(self) -> int:
        """Number of steps over the episodes of this dataset (view)."""
        return int(self._index.length[self._episode_indices].sum())

    @property
    def episode_lengths(self) -> np.ndarray:
        """Steps T of each episode of this view, aligned with ``episode_indices``."""
        return self._index.length[self._episode_indices]

    @property
    def episode_returns(self) -> np.ndarray:
        """Sum of rewards of each episode of this view, aligned with ``episode_indices``."""
        return self._index.returns[self._episode_indices]

    @property
    def shard_paths(self) -> list[Path]:
        """The committed shard files this dataset was loaded from, in episode-id order."""
        return [s.path for s in self._index.shards]

    # ------------------------------------------------------------------ episodes

    def __len__(self) -> int:
        return self.total_episodes

    def __getitem__(self, idx: int) -> EpisodeData:
        """The idx-th episode of this view (Minari semantics: position, not global id)."""
        return self._index.episode(int(self._episode_indices[idx]))

    def __iter__(self) -> Iterator[EpisodeData]:
        return self.iterate_episodes()

    def iterate_episodes(self, episode_indices: Iterable[int] | None = None) -> Iterator[EpisodeData]:
        """Yield episodes by global id (all of this view's by default)."""
        ids = self._episode_indices if episode_indices is None else np.asarray(list(episode_indices), dtype=np.int64)
        for episode_id in ids.tolist():
            yield self._index.episode(episode_id)

    def set_seed(self, seed: int | None) -> None:
        """Seed the generator used by sample_episodes and sample_steps."""
        self._rng = np.random.default_rng(seed)

    def sample_episodes(self, n_episodes: int) -> list[EpisodeData]:
        """``n_episodes`` distinct episodes drawn uniformly from this view (no replacement)."""
        if n_episodes > self.total_episodes:
            raise ValueError(f"cannot sample {n_episodes} distinct episodes from {self.total_episodes}")
        chosen = self._rng.choice(self._episode_indices, size=n_episodes, replace=False)
        return [self._index.episode(int(i)) for i in chosen]

    def filter_episodes(self, condition: Callable[[EpisodeData], bool]) -> Dataset:
        """A view of the episodes for which ``condition(episode)`` is true (no data copied)."""
        keep = [i for i in self._episode_indices.tolist() if condition(self._index.episode(i))]
        return self._view(np.asarray(keep, dtype=np.int64))

    def _view(self, episode_indices: np.ndarray) -> Dataset:
        return Dataset(self._index, episode_indices)

    def recover_environment(self, eval_env: bool = False, **kwargs: Any) -> gym.Env[Any, Any]:
        """``gym.make`` the stored env spec (the eval env spec with ``eval_env=True``, when stored)."""
        spec = self.eval_env_spec if eval_env and self.eval_env_spec_json is not None else self.env_spec
        if eval_env and self.eval_env_spec_json is None:
            warnings.warn(f"dataset {self.id!r} has no eval_env_spec; using its env_spec", UserWarning, stacklevel=2)
        if spec is None:
            raise ValueError(f"dataset {self.id!r} has no env_spec stored; it cannot recover the environment")
        return gym.make(spec, **kwargs)

    # ------------------------------------------------------------------ transitions

    def sample_steps(self, batch_size: int, *, cache_bytes: int | None = None) -> dict[str, Any]:
        """``batch_size`` transitions drawn uniformly (with replacement) over all steps of this view.

        Returns observations, actions, rewards, next_observations, terminations, truncations (nested
        batches for Dict/Tuple spaces). Episodes are not decoded: rows are gathered directly.

        ``cache_bytes`` bounds the one copy this makes beyond the batch: on the first call the sampled
        columns of all the dataset's shards are copied into memory (kept, shared by its views, and
        reported by :attr:`sample_cache_nbytes`) when they total at most ``cache_bytes`` bytes (default
        :data:`SAMPLE_CACHE_BYTES`, 64 MiB); else, and with ``cache_bytes=0``, rows are read from the shard
        files on each call. A cache already built is used whatever ``cache_bytes`` says.
        """
        limit = SAMPLE_CACHE_BYTES if cache_bytes is None else int(cache_bytes)
        if limit < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
        idx = self._index
        if self._cum_lengths is None:
            self._cum_lengths = np.cumsum(idx.length[self._episode_indices])
        cum = self._cum_lengths
        total = int(cum[-1]) if cum.size else 0
        if total == 0:
            raise ValueError(f"dataset {self.id!r} has no steps to sample")
        u = self._rng.integers(0, total, size=batch_size)
        k = np.searchsorted(cum, u, side="right")
        episodes = self._episode_indices[k]
        within = u - (cum[k] - idx.length[episodes])
        step_rows = idx.global_step_offset[episodes] + within
        obs_rows = idx.global_obs_offset[episodes] + within
        obs, next_obs, acts = [], [], []
        for leaf in idx.obs_leaves:
            name = column_path("observations", leaf.name)
            obs.append(idx.gather(name, leaf.dtype, obs_rows, True, limit))
            next_obs.append(idx.gather(name, leaf.dtype, obs_rows + 1, True, limit))
        for leaf in idx.act_leaves:
            acts.append(idx.gather(column_path("actions", leaf.name), leaf.dtype, step_rows, False, limit))
        return {
            "observations": unflatten_batch(idx.observation_space, obs),
            "actions": unflatten_batch(idx.action_space, acts),
            "rewards": idx.gather("rewards", np.dtype(np.float64), step_rows, False, limit),
            "next_observations": unflatten_batch(idx.observation_space, next_obs),
            "terminations": idx.gather("terminations", np.dtype(np.bool_), step_rows, False, limit),
            "truncations": idx.gather("truncations", np.dtype(np.bool_), step_rows, False, limit),
        }

    @property
    def sample_cache_nbytes(self) -> int:
        """Bytes of the in-memory copy sample_steps made of the sampled columns (0 when it made none)."""
        return self._index.cache_nbytes

    @property
    def open_files(self) -> int:
        """Shard files (maps or HDF5 files) this dataset holds open now; at most ``max_open_files``."""
        return len(self._index.files)

    def close(self) -> None:
        """Close the shard files this dataset (and its views) holds open; reading later reopens them."""
        self._index.files.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def verify(self) -> list[str]:
        """Check the dataset on disk (all of it, not only this view); one line per problem, [] when sound.

        See :func:`vcollect.store.verify.verify_dataset`: missing, unrecorded, duplicated and altered
        shards (SHA-256 against the manifest), corrupt shards, and episode tables that disagree with the
        columns. Reads every shard whole.
        """
        from vcollect.store.verify import verify_dataset  # verify builds on this module

        return verify_dataset(self._index.path, self._index.obs_leaves, self._index.act_leaves)

    def __repr__(self) -> str:
        return f"Dataset({self.id!r}, episodes={self.total_episodes}, steps={self.total_steps})"


def _unchanged_summary(file: Path, entry: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The manifest line of ``file`` when the file is as committed (same size and mtime) and the line holds
    all the reader needs (no options/metadata tables); else None (the file is opened instead)."""
    if entry is None or entry.get("extra_tables", True):
        return None
    try:
        st = file.stat()
    except OSError:
        return None
    return entry if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns") else None


def load_dataset(
    dataset_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    skip_corrupt: bool = False,
    max_open_files: int = MAX_OPEN_FILES,
) -> Dataset:
    """Open a dataset for reading (a snapshot of its committed shards).

    A corrupt or truncated shard raises CorruptShardError naming the file; with ``skip_corrupt=True``
    it is left out with a warning naming it. Temporary ``.tmp`` files and anything in ``shards/`` that is
    not a regular file are ignored. Shards recorded in the dataset's manifest and unchanged since (same
    size and mtime) are not opened: their tables and layout come from the manifest. Reading keeps at
    most ``max_open_files`` shard files open at once. Errors that say nothing about a shard (too many
    open files, permission denied) are raised as they are.
    """
    parse_dataset_id(dataset_id)
    root_path = resolve_root(root)
    path = dataset_path(dataset_id, root_path)
    info = read_dataset_info(path, dataset_id, root_path)
    obs_space, act_space = dataset_spaces(info)
    obs_leaves, act_leaves = leaves(obs_space), leaves(act_space)
    with _gc_paused():  # thousands of small parsed objects: collecting meanwhile would only slow loading
        return _load_shards(dataset_id, path, info, obs_leaves, act_leaves, skip_corrupt, max_open_files)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_shards(
    dataset_id: str,
    path: Path,
    info: dict[str, Any],
    obs_leaves: list[Leaf],
    act_leaves: list[Leaf],
    skip_corrupt: bool,
    max_open_files: int,
) -> Dataset:
    committed, _ = dataset_files(path)
    manifest = read_manifest(path)
    shards: list[_Shard] = []
    for file in committed:
        summary = _unchanged_summary(file, manifest.by_shard.get(file.name))
        try:
            try:
                shards.append(_Shard(file, obs_leaves, act_leaves, summary))
            except CorruptShardError:
                if summary is None:
                    raise
                shards.append(_Shard(file, obs_leaves, act_leaves))  # the manifest line was wrong, not the file
        except CorruptShardError as exc:
            if not skip_corrupt:
                raise
            warnings.warn(f"skipping corrupt shard {str(file)!r}: {exc}", UserWarning, stacklevel=3)
    return Dataset(_Index(dataset_id, path, info, shards, max_open_files))
