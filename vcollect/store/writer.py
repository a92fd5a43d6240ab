"""EpisodeStore: append completed episodes to a dataset as crash-safe, columnar HDF5 shards.

Layout (DESIGN.md section 5)::

    <root>/<namespace>/<name>-vN/
      dataset.json                               id, format version, spaces, env spec, metadata
      shards/<commit-time>-<writer>-<seq>.h5     immutable once committed

Episodes are buffered in memory (copies, because callers pass views of ring buffers) and
committed as one shard when ``shard_steps`` steps (or ``shard_bytes`` bytes) are pending, on
``flush()`` and on ``close()``. A shard is written to ``<name>.h5.tmp``, flushed, fsynced, renamed
and the directory fsynced, so a crash leaves every committed shard whole and at most the pending
episodes lost. Each store instance has its own writer name (pid + uuid), so many processes append
to one dataset without coordinating.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    InfoStructureError,
    SpaceMismatchError,
)
from vcollect.spaces import Leaf, flatten_batch, leaves, space_from_dict, space_to_dict, unflatten_batch
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root

__all__ = [
    "DATASET_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SHARDS_DIR",
    "SHARD_SUFFIX",
    "TMP_SUFFIX",
    "EpisodeStore",
    "column_path",
    "read_dataset_info",
]

FORMAT_NAME = "vcollect-dataset"
SHARD_FORMAT_NAME = "vcollect-shard"
FORMAT_VERSION = 1
DATASET_FILE = "dataset.json"
SHARDS_DIR = "shards"
SHARD_SUFFIX = ".h5"
TMP_SUFFIX = ".tmp"

#: Columns of the ``episodes/`` table every shard has (one row per episode).
EPISODE_COLUMNS = ("obs_offset", "step_offset", "length", "return", "env_id", "seed", "seed_valid")

_NUMERIC_KINDS = frozenset("biuf")
_STRING_KINDS = frozenset("US")


def column_path(prefix: str, name: str) -> str:
    """HDF5 path of a leaf column: ``prefix`` for a non-nested leaf, else ``prefix/name``."""
    return f"{prefix}/{name}" if name else prefix


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serializable: {exc}") from exc


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a crash (no-op where unsupported)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, obj: Mapping[str, Any], *, exclusive: bool = False) -> None:
    """Write JSON to ``path`` through a unique temporary file: write, fsync, rename (or link when exclusive).

    With ``exclusive`` the final name is created with ``os.link`` so that of two concurrent creators
    exactly one succeeds; the other gets FileExistsError.
    """
    text = json.dumps(obj, indent=2, default=_json_default)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)  # atomic "create if absent": exactly one of two racing creators wins
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: best effort
                if path.exists():
                    raise FileExistsError(path) from None
                os.replace(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def read_dataset_info(path: Path, dataset_id: str, root: Path) -> dict[str, Any]:
    """Read and check ``dataset.json`` of the dataset directory ``path``.

    Raises DatasetNotFoundError (naming the id and the root searched) when it is missing and
    DatasetError when it is unreadable or of another format.
    """
    file = path / DATASET_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"no dataset {dataset_id!r} under root {str(root)!r} (looked for {str(file)!r}); "
            "pass root= or set $VCOLLECT_DATASETS_PATH, and see list_datasets(root) for what exists"
        ) from None
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise DatasetError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(info, dict) or info.get("format") != FORMAT_NAME:
        raise DatasetError(f"{file} is not a vcollect dataset description (format != {FORMAT_NAME!r})")
    if int(info.get("format_version", 0)) > FORMAT_VERSION:
        raise DatasetError(
            f"{file} has format version {info.get('format_version')}, newer than this vcollect "
            f"understands ({FORMAT_VERSION}); upgrade vcollect"
        )
    return info


def _env_spec_json(env_spec: Any, what: str) -> str | None:
    if env_spec is None:
        return None
    if isinstance(env_spec, str):
        json.loads(env_spec)
        return env_spec
    if isinstance(env_spec, gym.envs.registration.EnvSpec):
        try:
            return env_spec.to_json()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what} {env_spec.id!r} cannot be saved as JSON: {exc}; pass {what}=None") from exc
    raise TypeError(f"{what} must be a gymnasium EnvSpec, its JSON string or None, got {type(env_spec).__name__}")


def _int_storage_dtype(leaf: Leaf) -> np.dtype | None:
    """Smallest signed int dtype holding every valid value of a Discrete/MultiDiscrete leaf (None: keep)."""
    space = leaf.space
    if not np.issubdtype(leaf.dtype, np.integer):
        return None
    if isinstance(space, gym.spaces.Discrete):
        lo, hi = int(space.start), int(space.start) + int(space.n) - 1
    elif isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(getattr(space, "start", 0))
        lo = int(np.min(start)) if start.size else 0
        hi = int(np.max(start + np.asarray(space.nvec) - 1)) if space.nvec.size else 0
    else:
        return None
    for candidate in (np.int8, np.int16, np.int32):
        info = np.iinfo(candidate)
        if info.min <= lo and hi <= info.max and info.bits // 8 < leaf.dtype.itemsize:
            return np.dtype(candidate)
    return None


def _kind_category(dtype: np.dtype) -> str:
    if dtype.kind in _NUMERIC_KINDS:
        return "numeric"
    if dtype.kind in _STRING_KINDS:
        return "string"
    raise TypeError(f"dtype {dtype} cannot be stored (numbers, bools and strings only)")


def _flatten_tree(tree: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
    """Nested dict of arrays -> {"a/b": array}; keys must be non-empty str without '/'."""
    out: dict[str, np.ndarray] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise InfoStructureError(f"{what} key {key!r} under {prefix or '<top>'!r} must be a non-empty str without '/'")
            name = f"{prefix}/{key}" if prefix else key
            if isinstance(value, Mapping):
                walk(name, value)
            else:
                out[name] = np.asarray(value)

    walk("", tree)
    return out


class _TreeSchema:
    """Structure of per-step infos/extras, fixed by the first episode a writer sees."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.fields: dict[str, tuple[str, str, tuple[int, ...]]] | None = None  # name -> (rows, category, shape)

    def check(self, arrays: dict[str, np.ndarray], steps: int) -> dict[str, tuple[str, str, tuple[int, ...]]]:
        """Validate one episode's arrays (rows per "obs": T+1, or per "step": T) against the schema.

        Returns the episode's structure; the caller fixes it as the schema once the episode is accepted.
        """
        fields: dict[str, tuple[str, str, tuple[int, ...]]] = {}
        for name, arr in arrays.items():
            if arr.ndim == 0 or arr.shape[0] not in (steps, steps + 1):
                raise InfoStructureError(
                    f"{self.what}[{name!r}] must have one row per step ({steps}) or per observation "
                    f"({steps + 1}), got shape {arr.shape}"
                )
            rows = "obs" if arr.shape[0] == steps + 1 else "step"
            try:
                category = _kind_category(arr.dtype)
            except TypeError as exc:
                raise InfoStructureError(f"{self.what}[{name!r}]: {exc}") from None
            fields[name] = (rows, category, tuple(arr.shape[1:]))
        if self.fields is None:
            return fields
        if fields.keys() != self.fields.keys():
            missing = sorted(self.fields.keys() - fields.keys())
            extra = sorted(fields.keys() - self.fields.keys())
            raise InfoStructureError(
                f"{self.what} changed structure: missing keys {missing}, new keys {extra} "
                f"(the structure is fixed by the first episode written: {sorted(self.fields)})"
            )
        for name, spec in fields.items():
            if spec != self.fields[name]:
                rows, category, shape = self.fields[name]
                raise InfoStructureError(
                    f"{self.what}[{name!r}] changed: first episode had rows per {rows}, {category} values of "
                    f"shape {shape}; this one has rows per {spec[0]}, {spec[1]} values of shape {spec[2]}"
                )
        return fields


def _encode_strings(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "U":
        encoded = np.char.encode(arr, "utf-8")
        return encoded if encoded.dtype.itemsize else encoded.astype("S1")
    return arr


class EpisodeStore:
    """Writer appending completed episodes to one dataset as columnar HDF5 shards.

    Make one with :meth:`create` (new dataset) or :meth:`open` (append to an existing one); use it as a
    context manager or call :meth:`close`. Not thread-safe; use one store per thread or process.
    """

    _seed_min: int
    _seed_max: int

    def __init__(
        self,
        path: Path,
        dataset_id: str,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        shard_steps: int = 100_000,
        shard_bytes: int | None = 256 * 2**20,
        compression: str | int | None = None,
        env_id_offset: int = 0,
    ) -> None:
        """Internal: use :meth:`create` or :meth:`open`."""
        if isinstance(env_id_offset, bool) or not isinstance(env_id_offset, int | np.integer) or env_id_offset < 0:
            raise ValueError(f"env_id_offset must be an integer >= 0, got {env_id_offset!r}")
        if shard_steps < 1:
            raise ValueError(f"shard_steps must be >= 1, got {shard_steps}")
        if shard_bytes is not None and shard_bytes < 1:
            raise ValueError(f"shard_bytes must be >= 1 or None, got {shard_bytes}")
        self._path = Path(path)
        self._shards_dir = self._path / SHARDS_DIR
        self._dataset_id = dataset_id
        self.observation_space = observation_space
        self.action_space = action_space
        self.shard_steps = int(shard_steps)
        self.shard_bytes = shard_bytes
        self.compression = compression
        self._env_id_offset = int(env_id_offset)
        self._obs_leaves = leaves(observation_space)
        self._act_leaves = leaves(action_space)
        self._obs_shapes = [leaf.shape for leaf in self._obs_leaves]
        self._act_shapes = [leaf.shape for leaf in self._act_leaves]
        # bytes of one observation / action row in the space dtypes (the pending-bytes estimate)
        self._obs_row_bytes = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in self._obs_leaves)
        self._act_row_bytes = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in self._act_leaves)
        self._obs_store_dtypes = [_int_storage_dtype(leaf) for leaf in self._obs_leaves]
        self._act_store_dtypes = [_int_storage_dtype(leaf) for leaf in self._act_leaves]
        self._pid = os.getpid()
        self._writer = self._new_writer_name()
        self._seq = 0
        self._last_time_ns = 0
        self._closed = False
        self._schemas = {"infos": _TreeSchema("infos"), "extras": _TreeSchema("extras")}
        self._metadata_fields: dict[str, tuple[str, tuple[int, ...]]] | None = None
        self._committed_episodes = 0
        self._committed_steps = 0
        self._shards_written: list[Path] = []
        self._clear_pending()

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        dataset_id: str,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        env_spec: Any = None,
        eval_env_spec: Any = None,
        root: str | os.PathLike[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        shard_steps: int = 100_000,
        shard_bytes: int | None = 256 * 2**20,
        compression: str | int | None = None,
        overwrite: bool = False,
        env_id_offset: int = 0,
    ) -> EpisodeStore:
        """Create a new, empty dataset and return a writer for it.

        ``env_spec``/``eval_env_spec``: a gymnasium EnvSpec or its JSON (for ``recover_environment``).
        ``metadata``: JSON-able dataset metadata (author, description, ...). Raises DatasetExistsError
        when the id exists unless ``overwrite=True`` (which deletes the old dataset first).
        ``env_id_offset`` is added to every env id this writer stores (see :attr:`env_id_offset`).
        """
        parse_dataset_id(dataset_id)
        root_path = resolve_root(root)
        path = dataset_path(dataset_id, root_path)
        info: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "dataset_id": dataset_id,
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
            "env_spec": _env_spec_json(env_spec, "env_spec"),
            "eval_env_spec": _env_spec_json(eval_env_spec, "eval_env_spec"),
            "metadata": json.loads(to_json(dict(metadata or {}), "metadata")),
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        }
        # Fail on unsupported spaces before touching the disk.
        store = cls(path, dataset_id, observation_space, action_space, shard_steps=shard_steps,
                    shard_bytes=shard_bytes, compression=compression, env_id_offset=env_id_offset)
        exists = (path / DATASET_FILE).exists()
        if exists and not overwrite:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} already exists at {str(path)!r}; pass overwrite=True to replace it "
                "or EpisodeStore.open() to append to it"
            )
        if exists:
            shutil.rmtree(path)
        (path / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
        try:
            _write_json_atomic(path / DATASET_FILE, info, exclusive=not overwrite)
        except FileExistsError:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} was created at {str(path)!r} by someone else meanwhile"
            ) from None
        _fsync_dir(path.parent)
        return store

    @classmethod
    def open(
        cls,
        dataset_id: str,
        root: str | os.PathLike[str] | None = None,
        *,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        shard_steps: int = 100_000,
        shard_bytes: int | None = 256 * 2**20,
        compression: str | int | None = None,
        env_id_offset: int = 0,
    ) -> EpisodeStore:
        """Open an existing dataset to append episodes (a new writer; existing shards are never touched).

        Spaces come from ``dataset.json``; if given, they must equal the stored ones, else
        SpaceMismatchError. DatasetNotFoundError names the id and the root searched. ``env_id_offset`` is
        added to every env id this writer stores (see :attr:`env_id_offset`).
        """
        parse_dataset_id(dataset_id)
        root_path = resolve_root(root)
        path = dataset_path(dataset_id, root_path)
        info = read_dataset_info(path, dataset_id, root_path)
        stored_obs = space_from_dict(info["observation_space"])
        stored_act = space_from_dict(info["action_space"])
        for what, given, stored in (
            ("observation", observation_space, stored_obs),
            ("action", action_space, stored_act),
        ):
            if given is not None and given != stored:
                raise SpaceMismatchError(
                    f"dataset {dataset_id!r} stores {what} space {stored}, but {given} was given"
                )
        (path / SHARDS_DIR).mkdir(exist_ok=True)
        return cls(path, dataset_id, stored_obs, stored_act, shard_steps=shard_steps,
                   shard_bytes=shard_bytes, compression=compression, env_id_offset=env_id_offset)

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and getattr(self, "_pending_episodes", 0) > 0:
            warnings.warn(
                f"EpisodeStore for {self._dataset_id!r} was garbage-collected without close(); "
                f"{self._pending_episodes} pending episodes were not committed",
                ResourceWarning,
                stacklevel=2,
            )

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        """Directory of the dataset (``<root>/<namespace>/<name>-vN``)."""
        return self._path

    @property
    def dataset_id(self) -> str:
        """The dataset id this store writes to."""
        return self._dataset_id

    @property
    def env_id_offset(self) -> int:
        """Added to every env id written, so several writers (e.g. Ray workers, each numbering its envs from 0)
        store global env ids without wrapping the store."""
        return self._env_id_offset

    @property
    def writer_name(self) -> str:
        """This writer's unique name (pid + uuid), part of every shard file name it commits."""
        return self._writer

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    @property
    def pending_episodes(self) -> int:
        """Episodes written but not yet committed to a shard."""
        return self._pending_episodes

    @property
    def pending_steps(self) -> int:
        """Steps written but not yet committed to a shard."""
        return self._pending_steps

    @property
    def committed_episodes(self) -> int:
        """Episodes this writer has committed to shards."""
        return self._committed_episodes

    @property
    def committed_steps(self) -> int:
        """Steps this writer has committed to shards."""
        return self._committed_steps

    @property
    def shards_written(self) -> list[Path]:
        """Paths of the shards this writer has committed, in order."""
        return list(self._shards_written)

    # ------------------------------------------------------------------ writing

    def write_episode(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        *,
        seed: int | None,
        env_id: int,
        infos: Mapping[str, Any] | None = None,
        extras: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Buffer one completed episode (copied) and commit a shard when enough is pending.

        observations: nested batch of T+1 rows; actions: nested batch of T rows; rewards (T,) floats;
        terminations/truncations (T,) bools. infos/extras: (nested) dicts of arrays with T or T+1 rows
        (structure fixed by the first episode). metadata: per-episode scalars (or fixed-shape arrays,
        strings) stored as columns of the ``episodes/`` table. options: the reset options (JSON-able).
        """
        if self._closed:
            raise DatasetError(f"EpisodeStore for {self._dataset_id!r} is closed")
        rew = np.array(rewards, dtype=np.float64)
        if rew.ndim != 1:
            raise ValueError(f"rewards must be 1-D (T,), got shape {rew.shape}")
        steps = rew.shape[0]
        terms = np.array(terminations, dtype=np.bool_)
        truncs = np.array(truncations, dtype=np.bool_)
        if terms.shape != (steps,) or truncs.shape != (steps,):
            raise ValueError(
                f"terminations/truncations must have shape ({steps},) like rewards, got {terms.shape} and {truncs.shape}"
            )
        obs_copies = self._copy_leaves("observations", self._obs_leaves, self._obs_shapes,
                                       flatten_batch(self.observation_space, observations), steps + 1)
        act_copies = self._copy_leaves("actions", self._act_leaves, self._act_shapes,
                                       flatten_batch(self.action_space, actions), steps)
        # Infos, extras and metadata are checked against the structure the first episode fixed; an episode
        # without any (the Collector's usual case) skips that when the structure has none either.
        trees: dict[str, dict[str, np.ndarray]] = {}
        structures = {}
        if infos or extras or self._schemas["infos"].fields or self._schemas["extras"].fields:
            for group, tree in (("infos", infos), ("extras", extras)):
                arrays = _flatten_tree(tree, group) if tree else {}
                structures[group] = self._schemas[group].check(arrays, steps)
                trees[group] = {name: np.array(arr) for name, arr in arrays.items()}
        meta: dict[str, np.ndarray] = {}
        meta_fields: dict[str, tuple[str, tuple[int, ...]]] = {}
        if metadata or self._metadata_fields:
            meta, meta_fields = self._check_metadata(metadata)
        if seed is None:
            seed_value, seed_valid = -1, False
        else:
            seed_value, seed_valid = int(seed), True
            if not -(2**63) <= seed_value < 2**64:
                raise ValueError(f"seed {seed_value} does not fit in 64 bits (int64 or uint64)")
        options_json = None if options is None else to_json(options, "options")

        if seed_valid and (
            (seed_value >= 2**63 and self._seed_min < 0) or (seed_value < 0 and self._seed_max >= 2**63)
        ):
            # A shard's seed column is int64, or uint64 when a seed needs 64 bits (Minari's autoseeds do):
            # a negative seed and such a seed cannot share one shard.
            self._commit()
        # Everything validated: only now touch the pending state (the first episode fixes the structure).
        for group in ("infos", "extras"):
            if self._schemas[group].fields is None:
                self._schemas[group].fields = structures.get(group, {})
        if self._metadata_fields is None:
            self._metadata_fields = meta_fields
        for group, arrays in trees.items():
            pending = self._pending_trees[group]
            for name, arr in arrays.items():
                pending.setdefault(name, []).append(arr)
                self._pending_bytes += arr.nbytes
        for name, value in meta.items():
            self._pending_meta.setdefault(name, []).append(value)
        self._append_pending(
            obs_copies, act_copies, rew, terms, truncs, [steps], [int(env_id) + self._env_id_offset], [seed_value],
            [seed_valid],
            [options_json],
        )

    def write_episodes(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        lengths: Sequence[int] | np.ndarray,
        *,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None = None,
        infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Buffer several completed episodes at once, as ``write_episode`` would one by one.

        Episode i has ``lengths[i]`` steps; the arrays are the episodes' arrays concatenated in order
        (observations: lengths[i] + 1 rows each, the rest lengths[i]). ``infos``: one info tree (or None) per
        episode, as write_episode's ``infos=``; when any is given the episodes go through write_episode one by
        one, in order. Without infos the episodes are appended in one go: for writers that finish many plain
        episodes (the Collector), whose per-episode Python cost this saves.
        """
        if self._closed:
            raise DatasetError(f"EpisodeStore for {self._dataset_id!r} is closed")
        lens = np.asarray(lengths, dtype=np.int64)
        n = len(lens)
        if lens.ndim != 1 or (n and int(lens.min()) < 0):
            raise ValueError(f"lengths must be a 1-D sequence of step counts >= 0, got {lengths!r}")
        opts = [None] * n if options is None else list(options)
        info_list = [None] * n if infos is None else list(infos)
        if len(seeds) != n or len(env_ids) != n or len(opts) != n or len(info_list) != n:
            raise ValueError(
                f"got {n} lengths, {len(seeds)} seeds, {len(env_ids)} env ids, {len(opts)} options and "
                f"{len(info_list)} infos: one each per episode"
            )
        one_by_one = any(info is not None for info in info_list)
        if not one_by_one and (
            self._schemas["infos"].fields or self._schemas["extras"].fields or self._metadata_fields
        ):
            raise InfoStructureError(
                f"dataset {self._dataset_id!r} holds episodes with infos, extras or metadata: write each with "
                "write_episode (or pass their infos)"
            )
        if n == 0:
            return
        steps = int(lens.sum())
        rew = np.array(rewards, dtype=np.float64)
        terms = np.array(terminations, dtype=np.bool_)
        truncs = np.array(truncations, dtype=np.bool_)
        if rew.shape != (steps,) or terms.shape != (steps,) or truncs.shape != (steps,):
            raise ValueError(
                f"rewards/terminations/truncations must have shape ({steps},) (the sum of lengths), got "
                f"{rew.shape}, {terms.shape} and {truncs.shape}"
            )
        obs_copies = self._copy_leaves("observations", self._obs_leaves, self._obs_shapes,
                                       flatten_batch(self.observation_space, observations), steps + n)
        act_copies = self._copy_leaves("actions", self._act_leaves, self._act_shapes,
                                       flatten_batch(self.action_space, actions), steps)
        seed_values = [-1 if seed is None else int(seed) for seed in seeds]
        valid = [seed is not None for seed in seeds]
        given = [v for v, ok in zip(seed_values, valid) if ok]
        if given and not (min(given) >= -(2**63) and max(given) < 2**64):
            raise ValueError(f"seeds {given} do not all fit in 64 bits (int64 or uint64)")
        if one_by_one or (min([self._seed_min, *given]) < 0 and max([self._seed_max, *given]) >= 2**63):
            # per-episode infos, or negative seeds and seeds that need uint64 (which cannot share a shard):
            # write one by one (write_episode checks each info tree and commits between such seeds)
            self._write_each(obs_copies, act_copies, rew, terms, truncs, lens, seeds, env_ids, opts, info_list)
            return
        options_json = [None if o is None else to_json(o, "options") for o in opts]
        # Everything validated: only now touch the pending state (no infos, extras or metadata, for good).
        for group in ("infos", "extras"):
            if self._schemas[group].fields is None:
                self._schemas[group].fields = {}
        if self._metadata_fields is None:
            self._metadata_fields = {}
        self._append_pending(
            obs_copies, act_copies, rew, terms, truncs, lens.tolist(), [int(e) + self._env_id_offset for e in env_ids],
            seed_values, valid, options_json,
        )

    def _append_pending(
        self,
        obs: list[np.ndarray],
        acts: list[np.ndarray],
        rew: np.ndarray,
        terms: np.ndarray,
        truncs: np.ndarray,
        lengths: list[int],
        env_ids: list[int],
        seeds: list[int],
        seed_valid: list[bool],
        options_json: list[str | None],
    ) -> None:
        """Add validated episodes (arrays concatenated in episode order) to the pending shard; commit it
        when it holds shard_steps steps or shard_bytes bytes."""
        for store, arr in zip(self._pending_obs, obs):
            store.append(arr)
        for store, arr in zip(self._pending_act, acts):
            store.append(arr)
        self._pending_rew.append(rew)
        self._pending_term.append(terms)
        self._pending_trunc.append(truncs)
        start = 0
        for length in lengths:
            self._returns.append(float(rew[start : start + length].sum()))
            start += length
        self._lengths.extend(lengths)
        self._env_ids.extend(env_ids)
        self._seeds.extend(seeds)
        self._seed_valid.extend(seed_valid)
        given = [seed for seed, valid in zip(seeds, seed_valid) if valid]
        if given:
            self._seed_min = min(self._seed_min, *given)
            self._seed_max = max(self._seed_max, *given)
        self._options.extend(options_json)
        n, steps = len(lengths), start
        self._pending_episodes += n
        self._pending_steps += steps
        # rewards (float64) and the two flag columns, then the copied observation and action rows
        self._pending_bytes += 10 * steps + (steps + n) * self._obs_row_bytes + steps * self._act_row_bytes
        if self._pending_steps >= self.shard_steps or (
            self.shard_bytes is not None and self._pending_bytes >= self.shard_bytes
        ):
            self._commit()

    def _write_each(
        self,
        obs: list[np.ndarray],
        acts: list[np.ndarray],
        rew: np.ndarray,
        terms: np.ndarray,
        truncs: np.ndarray,
        lens: np.ndarray,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None],
        infos: Sequence[Mapping[str, Any] | None],
    ) -> None:
        """write_episodes' arrays written episode by episode with write_episode."""
        step = row = 0
        for length, seed, env_id, opts, info in zip(lens.tolist(), seeds, env_ids, options, infos):
            self.write_episode(
                unflatten_batch(self.observation_space, [a[row : row + length + 1] for a in obs]),
                unflatten_batch(self.action_space, [a[step : step + length] for a in acts]),
                rew[step : step + length],
                terms[step : step + length],
                truncs[step : step + length],
                seed=seed,
                env_id=env_id,
                infos=info,
                options=opts,
            )
            step += length
            row += length + 1

    def flush(self) -> None:
        """Commit the pending episodes as one shard now (no-op when nothing is pending, e.g. after close)."""
        self._commit()

    def close(self) -> None:
        """Commit pending episodes and close; idempotent. Later writes raise DatasetError."""
        if self._closed:
            return
        try:
            self._commit()
        finally:
            self._closed = True

    def update_metadata(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        env_spec: Any = None,
        eval_env_spec: Any = None,
    ) -> None:
        """Merge JSON-able ``values`` into the dataset metadata and/or set the (eval) env spec.

        Rewrites ``dataset.json`` atomically; None leaves a field as it is. Last writer wins when several
        processes update the same dataset at once.
        """
        info = read_dataset_info(self._path, self._dataset_id, self._root())
        if values:
            info["metadata"] = {**info.get("metadata", {}), **json.loads(to_json(dict(values), "metadata"))}
        if env_spec is not None:
            info["env_spec"] = _env_spec_json(env_spec, "env_spec")
        if eval_env_spec is not None:
            info["eval_env_spec"] = _env_spec_json(eval_env_spec, "eval_env_spec")
        _write_json_atomic(self._path / DATASET_FILE, info)

    def move_to(
        self, dataset_id: str, root: str | os.PathLike[str] | None = None, *, overwrite: bool = False
    ) -> Path:
        """Commit pending episodes, then rename the whole dataset to ``dataset_id`` (under ``root``).

        For recording into a staging dataset and naming it at the end (``DataCollector.create_dataset``):
        committed shards move with the directory (one rename on the same filesystem), and this store keeps
        writing at the new place. Only safe while no other writer appends to the dataset. Returns the new
        path; DatasetExistsError if the target exists unless ``overwrite=True``.
        """
        parse_dataset_id(dataset_id)
        self._commit()
        new_path = dataset_path(dataset_id, root)
        if new_path.resolve() == self._path.resolve():
            return self._path
        if (new_path / DATASET_FILE).exists():
            if not overwrite:
                raise DatasetExistsError(
                    f"dataset {dataset_id!r} already exists at {str(new_path)!r}; pass overwrite=True to replace it"
                )
            shutil.rmtree(new_path)
        new_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self._path, new_path)
        except OSError:  # another filesystem: copy, then delete (not atomic, but nothing is lost)
            shutil.move(str(self._path), str(new_path))
        _fsync_dir(new_path.parent)
        self._path = new_path
        self._shards_dir = new_path / SHARDS_DIR
        self._shards_written = [self._shards_dir / p.name for p in self._shards_written]
        self._dataset_id = dataset_id
        info = read_dataset_info(new_path, dataset_id, self._root())
        info["dataset_id"] = dataset_id
        _write_json_atomic(new_path / DATASET_FILE, info)
        return new_path

    def _root(self) -> Path:
        return self._path.parents[len(self._dataset_id.split("/")) - 1]

    def __repr__(self) -> str:
        return (
            f"EpisodeStore({self._dataset_id!r}, path={str(self._path)!r}, writer={self._writer!r}, "
            f"pending_episodes={self._pending_episodes}, committed_episodes={self._committed_episodes})"
        )

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _new_writer_name() -> str:
        return f"w{os.getpid()}x{uuid.uuid4().hex[:12]}"

    def _clear_pending(self) -> None:
        self._pending_obs: list[list[np.ndarray]] = [[] for _ in self._obs_leaves]
        self._pending_act: list[list[np.ndarray]] = [[] for _ in self._act_leaves]
        self._pending_rew: list[np.ndarray] = []
        self._pending_term: list[np.ndarray] = []
        self._pending_trunc: list[np.ndarray] = []
        self._pending_trees: dict[str, dict[str, list[np.ndarray]]] = {"infos": {}, "extras": {}}
        self._pending_meta: dict[str, list[np.ndarray]] = {}
        self._lengths: list[int] = []
        self._returns: list[float] = []
        self._env_ids: list[int] = []
        self._seeds: list[int] = []
        self._seed_valid: list[bool] = []
        self._seed_min = 0  # over the valid pending seeds (0 when none)
        self._seed_max = 0
        self._options: list[str | None] = []
        self._pending_episodes = 0
        self._pending_steps = 0
        self._pending_bytes = 0

    def _copy_leaves(
        self,
        what: str,
        leaf_list: list[Leaf],
        shapes: list[tuple[int, ...]],
        arrays: list[Any],
        rows: int,
    ) -> list[np.ndarray]:
        copies = []
        for leaf, shape, arr in zip(leaf_list, shapes, arrays):
            a = np.asarray(arr)
            if a.shape[:1] != (rows,) or a.shape[1:] != shape:
                where = f"{what}[{leaf.name!r}]" if leaf.name else what
                raise ValueError(f"{where} must have shape {(rows, *shape)}, got {a.shape}")
            if a.dtype != leaf.dtype and not np.can_cast(a.dtype, leaf.dtype, "same_kind"):
                where = f"{what}[{leaf.name!r}]" if leaf.name else what
                raise ValueError(f"{where} has dtype {a.dtype}, which does not fit the space's {leaf.dtype}")
            copies.append(a.copy())
        return copies

    def _check_metadata(
        self, metadata: Mapping[str, Any] | None
    ) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, tuple[int, ...]]]]:
        meta: dict[str, np.ndarray] = {}
        fields: dict[str, tuple[str, tuple[int, ...]]] = {}
        for key, value in (metadata or {}).items():
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(f"episode metadata key {key!r} must be a non-empty str without '/'")
            arr = np.array(value)
            try:
                category = _kind_category(arr.dtype)
            except TypeError as exc:
                raise ValueError(f"episode metadata {key!r}: {exc}") from None
            meta[key] = arr
            fields[key] = (category, tuple(arr.shape))
        if self._metadata_fields is not None and fields != self._metadata_fields:
            raise ValueError(
                f"episode metadata changed structure: first episode had {self._describe_fields(self._metadata_fields)}, "
                f"this one has {self._describe_fields(fields)}"
            )
        return meta, fields

    @staticmethod
    def _describe_fields(fields: Mapping[str, tuple[str, tuple[int, ...]]]) -> str:
        return "{" + ", ".join(f"{k}: {c}{list(s)}" for k, (c, s) in fields.items()) + "}"

    def _shard_columns(self) -> list[tuple[str, np.ndarray, dict[str, Any]]]:
        """Concatenate the pending episodes into the columns of one shard."""
        cols: list[tuple[str, np.ndarray, dict[str, Any]]] = []
        for prefix, leaf_list, pending, store_dtypes in (
            ("observations", self._obs_leaves, self._pending_obs, self._obs_store_dtypes),
            ("actions", self._act_leaves, self._pending_act, self._act_store_dtypes),
        ):
            for leaf, parts, small in zip(leaf_list, pending, store_dtypes):
                arr = np.concatenate(parts).astype(leaf.dtype, copy=False)
                if small is not None and arr.size:
                    info = np.iinfo(small.type)  # type: ignore[type-var]
                    if info.min <= int(arr.min()) and int(arr.max()) <= info.max:
                        arr = arr.astype(small)
                cols.append((column_path(prefix, leaf.name), arr, {}))
        rewards = np.concatenate(self._pending_rew)
        with np.errstate(over="ignore", invalid="ignore"):
            rewards32 = rewards.astype(np.float32)
        if np.array_equal(rewards32, rewards):
            rewards = rewards32
        cols.append(("rewards", rewards, {}))
        cols.append(("terminations", np.concatenate(self._pending_term), {}))
        cols.append(("truncations", np.concatenate(self._pending_trunc), {}))
        for group, pending_tree in self._pending_trees.items():
            fields = self._schemas[group].fields or {}
            for name, parts in pending_tree.items():
                arr = np.concatenate(parts)
                attrs: dict[str, Any] = {"rows": fields[name][0]}
                if arr.dtype.kind == "U":
                    attrs["encoding"] = "utf-8"
                cols.append((f"{group}/{name}", _encode_strings(arr), attrs))
        lengths = np.asarray(self._lengths, dtype=np.int64)
        step_offset = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=step_offset[1:])
        cols.append(("episodes/obs_offset", step_offset + np.arange(len(lengths), dtype=np.int64), {}))
        cols.append(("episodes/step_offset", step_offset, {}))
        cols.append(("episodes/length", lengths, {}))
        cols.append(("episodes/return", np.asarray(self._returns, dtype=np.float64), {}))
        cols.append(("episodes/env_id", np.asarray(self._env_ids, dtype=np.int64), {}))
        seed_dtype = np.uint64 if self._seed_max >= 2**63 else np.int64
        seeds = [s if valid else 0 for s, valid in zip(self._seeds, self._seed_valid)]
        cols.append(("episodes/seed", np.asarray(seeds, dtype=seed_dtype), {}))
        cols.append(("episodes/seed_valid", np.asarray(self._seed_valid, dtype=np.bool_), {}))
        if any(o is not None for o in self._options):
            opts = np.array(["null" if o is None else o for o in self._options])
            cols.append(("episodes/options", _encode_strings(opts), {"encoding": "utf-8", "json": True}))
        for name, values in self._pending_meta.items():
            arr = np.stack(values)
            attrs = {"encoding": "utf-8"} if arr.dtype.kind == "U" else {}
            cols.append((f"episodes/metadata/{name}", _encode_strings(arr), attrs))
        return cols

    def _commit(self) -> None:
        if self._pending_episodes == 0:
            return
        if os.getpid() != self._pid:  # a forked child must not reuse its parent's shard names
            self._pid = os.getpid()
            self._writer = self._new_writer_name()
        cols = self._shard_columns()
        now = max(time.time_ns(), self._last_time_ns + 1)
        name = f"{now:020d}-{self._writer}-{self._seq:06d}{SHARD_SUFFIX}"
        final = self._shards_dir / name
        tmp = self._shards_dir / (name + TMP_SUFFIX)
        try:
            with h5py.File(tmp, "w") as f:
                f.attrs["format"] = SHARD_FORMAT_NAME
                f.attrs["format_version"] = FORMAT_VERSION
                f.attrs["writer"] = self._writer
                f.attrs["seq"] = self._seq
                f.attrs["num_episodes"] = self._pending_episodes
                f.attrs["num_steps"] = self._pending_steps
                for path, arr, attrs in cols:
                    kwargs: dict[str, Any] = {}
                    if self.compression is not None and arr.size:
                        kwargs = {"compression": self.compression, "chunks": True}
                    ds = f.create_dataset(path, data=arr, **kwargs)
                    for key, value in attrs.items():
                        ds.attrs[key] = value
                f.flush()
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except Exception as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise DatasetError(
                f"could not commit shard {str(final)!r} of dataset {self._dataset_id!r}: {exc}. "
                f"Committed shards are intact; the {self._pending_episodes} pending episodes are kept "
                "in memory and flush() can be retried"
            ) from exc
        self._last_time_ns = now
        self._seq += 1
        self._committed_episodes += self._pending_episodes
        self._committed_steps += self._pending_steps
        self._shards_written.append(final)
        self._clear_pending()
        _fsync_dir(self._shards_dir)
