"""Reading datasets written by EpisodeStore, with Minari's names: load_dataset, Dataset, EpisodeData.

``load_dataset`` reads every committed shard's small ``episodes/`` table and notes where each
column lies in its file; column data are memory-mapped (uncompressed shards) or read on first use
(compressed ones), so loading is cheap and memory stays small. Episode ids are global: shards sorted
by file name (commit time first), then row. ``.tmp`` files (half-written shards) are ignored.
"""

from __future__ import annotations

import json
import os
import warnings
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
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.shard import EPISODE_COLUMNS, SHARD_FORMAT_NAME, column_path

__all__ = ["Dataset", "EpisodeData", "load_dataset"]

#: sample_steps copies the sampled columns of all shards into memory when they fit in this many bytes;
#: above it, it gathers rows from the memory-mapped shards instead.
SAMPLE_CACHE_BYTES = 2 * 2**30


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
    """Where one column lies in a shard file: a memory map when contiguous and uncompressed."""

    path: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    offset: int | None
    attrs: dict[str, Any]


class _Shard:
    """One committed shard: its episode table in memory, its columns mapped or read on demand."""

    def __init__(self, path: Path, obs_leaves: list[Leaf], act_leaves: list[Leaf]) -> None:
        self.path = path
        self.name = path.name
        self._arrays: dict[str, np.ndarray] = {}
        self.columns: dict[str, _Column] = {}
        try:
            self._load(obs_leaves, act_leaves)
        except CorruptShardError:
            raise
        except Exception as exc:
            raise CorruptShardError(f"shard {str(path)!r} is corrupt or truncated: {type(exc).__name__}: {exc}") from exc

    def _load(self, obs_leaves: list[Leaf], act_leaves: list[Leaf]) -> None:
        file_size = os.path.getsize(self.path)
        with h5py.File(self.path, "r") as f:
            if f.attrs.get("format") != SHARD_FORMAT_NAME:
                raise ValueError(f"not a vcollect shard (format attribute {f.attrs.get('format')!r})")
            self.num_episodes = int(f.attrs["num_episodes"])
            self.num_steps = int(f.attrs["num_steps"])

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset):
                    offset = obj.id.get_offset()
                    plain = obj.compression is None and obj.chunks is None and offset is not None
                    col = _Column(name, obj.dtype, tuple(obj.shape), int(offset) if plain else None, dict(obj.attrs))
                    nbytes = int(np.prod(col.shape, dtype=np.int64)) * col.dtype.itemsize
                    if col.offset is not None and col.offset + nbytes > file_size:
                        raise ValueError(f"column {name!r} extends past the end of the file")
                    self.columns[name] = col

            f.visititems(visit)
            table = {name: np.asarray(f[f"episodes/{name}"][()]) for name in EPISODE_COLUMNS}
            self.options: list[str] | None = None
            if "episodes/options" in f:
                self.options = [str(s) for s in _decode(f["episodes/options"][()], {"encoding": "utf-8"})]
            self.metadata: dict[str, np.ndarray] = {}
            if "episodes/metadata" in f:
                for key, ds in f["episodes/metadata"].items():
                    self.metadata[key] = _decode(np.asarray(ds[()]), ds.attrs)
        for name, arr in table.items():
            if arr.shape != (self.num_episodes,):
                raise ValueError(f"episodes/{name} has shape {arr.shape}, expected ({self.num_episodes},)")
        self.obs_offset = table["obs_offset"].astype(np.int64)
        self.step_offset = table["step_offset"].astype(np.int64)
        self.length = table["length"].astype(np.int64)
        self.returns = table["return"].astype(np.float64)
        self.env_id = table["env_id"].astype(np.int64)
        # int64, or uint64 in shards holding seeds of 64 bits (e.g. imported Minari autoseeds).
        self.seed = table["seed"] if table["seed"].dtype == np.uint64 else table["seed"].astype(np.int64)
        self.seed_valid = table["seed_valid"].astype(np.bool_)
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
                self._expect(column_path(prefix, leaf.name), (rows, *leaf.shape))
        for name in ("rewards", "terminations", "truncations"):
            self._expect(name, (self.num_steps,))
        self.tree_columns: dict[str, dict[str, _Column]] = {"infos": {}, "extras": {}}
        for name, col in self.columns.items():
            group, _, key = name.partition("/")
            if group in self.tree_columns:
                rows = self.num_obs_rows if col.attrs.get("rows") == "obs" else self.num_steps
                if col.shape[:1] != (rows,):
                    raise ValueError(f"column {name!r} has {col.shape[0]} rows, expected {rows}")
                self.tree_columns[group][key] = col

    def _expect(self, name: str, shape: tuple[int, ...]) -> None:
        col = self.columns.get(name)
        if col is None:
            raise ValueError(f"column {name!r} is missing")
        if col.shape != shape:
            raise ValueError(f"column {name!r} has shape {col.shape}, expected {shape}")

    def array(self, name: str) -> np.ndarray:
        """The whole column (memory-mapped when possible, else read once and kept)."""
        arr = self._arrays.get(name)
        if arr is None:
            col = self.columns[name]
            try:
                if int(np.prod(col.shape, dtype=np.int64)) == 0:
                    arr = np.empty(col.shape, dtype=col.dtype)
                elif col.offset is not None:
                    arr = np.memmap(self.path, dtype=col.dtype, mode="r", offset=col.offset, shape=col.shape)
                else:
                    with h5py.File(self.path, "r") as f:
                        arr = np.asarray(f[name][()])
            except Exception as exc:
                raise CorruptShardError(f"shard {str(self.path)!r}: cannot read column {name!r}: {exc}") from exc
            self._arrays[name] = arr
        return arr


class _Index:
    """Everything a Dataset view shares: shards, global episode table, spaces and the sampling cache."""

    def __init__(self, dataset_id: str, path: Path, info: dict[str, Any], shards: list[_Shard]) -> None:
        self.dataset_id = dataset_id
        self.path = path
        self.info = info
        self.observation_space, self.action_space = dataset_spaces(info)
        self.obs_leaves = leaves(self.observation_space)
        self.act_leaves = leaves(self.action_space)
        self.shards = shards
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
        self._cache_too_big = False

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

        def leaf_values(prefix: str, leaf_list: list[Leaf], start: int, stop: int) -> list[np.ndarray]:
            return [
                np.array(shard.array(column_path(prefix, leaf.name))[start:stop], dtype=leaf.dtype)
                for leaf in leaf_list
            ]

        observations = unflatten_batch(self.observation_space, leaf_values("observations", self.obs_leaves, o, o + steps + 1))
        actions = unflatten_batch(self.action_space, leaf_values("actions", self.act_leaves, st, st + steps))
        trees: dict[str, dict[str, Any]] = {}
        for group, cols in shard.tree_columns.items():
            tree: dict[str, Any] = {}
            for key, col in cols.items():
                start, stop = (o, o + steps + 1) if col.attrs.get("rows") == "obs" else (st, st + steps)
                value = _decode(np.array(shard.array(col.path)[start:stop]), col.attrs)
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
            rewards=np.array(shard.array("rewards")[st : st + steps], dtype=np.float64),
            terminations=np.array(shard.array("terminations")[st : st + steps], dtype=np.bool_),
            truncations=np.array(shard.array("truncations")[st : st + steps], dtype=np.bool_),
            infos=trees["infos"],
            extras=trees["extras"],
            seed=int(shard.seed[row]) if shard.seed_valid[row] else None,
            env_id=int(shard.env_id[row]),
            options=options,
            metadata=metadata,
        )

    def _sampled_columns(self) -> list[tuple[str, np.dtype[Any]]]:
        cols = [(column_path("observations", leaf.name), leaf.dtype) for leaf in self.obs_leaves]
        cols += [(column_path("actions", leaf.name), leaf.dtype) for leaf in self.act_leaves]
        cols += [("rewards", np.dtype(np.float64)), ("terminations", np.dtype(np.bool_)), ("truncations", np.dtype(np.bool_))]
        return cols

    def cache(self) -> dict[str, np.ndarray] | None:
        """Sampled columns of all shards concatenated in memory (built once); None above SAMPLE_CACHE_BYTES."""
        if self._cache is None and not self._cache_too_big:
            cols = self._sampled_columns()
            nbytes = 0
            for name, dtype in cols:
                rows = self.total_steps + (self.total_episodes if name.startswith("observations") else 0)
                shape = self.shards[0].columns[name].shape[1:] if self.shards else ()
                nbytes += rows * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes > SAMPLE_CACHE_BYTES:
                self._cache_too_big = True
                return None
            self._cache = {
                name: np.concatenate([s.array(name) for s in self.shards]).astype(dtype, copy=False)
                for name, dtype in cols
            }
        return self._cache

    def gather(self, name: str, dtype: np.dtype[Any], rows: np.ndarray, obs_rows: bool) -> np.ndarray:
        """Rows (global row numbers) of one column, from the cache or else shard by shard."""
        cache = self.cache()
        if cache is not None:
            return cache[name][rows]
        base = self.obs_base if obs_rows else self.step_base
        which = np.searchsorted(base, rows, side="right") - 1
        out = np.empty((len(rows), *self.shards[0].columns[name].shape[1:]), dtype=dtype)
        for s in np.unique(which).tolist():
            sel = which == s
            out[sel] = self.shards[s].array(name)[rows[sel] - base[s]]
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

    def sample_steps(self, batch_size: int) -> dict[str, Any]:
        """``batch_size`` transitions drawn uniformly (with replacement) over all steps of this view.

        Returns observations, actions, rewards, next_observations, terminations, truncations (nested
        batches for Dict/Tuple spaces). Episodes are not decoded: rows are gathered directly.
        """
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
            obs.append(idx.gather(name, leaf.dtype, obs_rows, True))
            next_obs.append(idx.gather(name, leaf.dtype, obs_rows + 1, True))
        for leaf in idx.act_leaves:
            acts.append(idx.gather(column_path("actions", leaf.name), leaf.dtype, step_rows, False))
        return {
            "observations": unflatten_batch(idx.observation_space, obs),
            "actions": unflatten_batch(idx.action_space, acts),
            "rewards": idx.gather("rewards", np.dtype(np.float64), step_rows, False),
            "next_observations": unflatten_batch(idx.observation_space, next_obs),
            "terminations": idx.gather("terminations", np.dtype(np.bool_), step_rows, False),
            "truncations": idx.gather("truncations", np.dtype(np.bool_), step_rows, False),
        }

    def __repr__(self) -> str:
        return f"Dataset({self.id!r}, episodes={self.total_episodes}, steps={self.total_steps})"


def load_dataset(
    dataset_id: str, root: str | os.PathLike[str] | None = None, *, skip_corrupt: bool = False
) -> Dataset:
    """Open a dataset for reading (a snapshot of its committed shards).

    A corrupt or truncated shard raises CorruptShardError naming the file; with ``skip_corrupt=True``
    it is left out with a warning naming it. Temporary ``.tmp`` files are ignored.
    """
    parse_dataset_id(dataset_id)
    root_path = resolve_root(root)
    path = dataset_path(dataset_id, root_path)
    info = read_dataset_info(path, dataset_id, root_path)
    obs_space, act_space = dataset_spaces(info)
    obs_leaves, act_leaves = leaves(obs_space), leaves(act_space)
    committed, _ = dataset_files(path)
    shards: list[_Shard] = []
    for file in committed:
        try:
            shards.append(_Shard(file, obs_leaves, act_leaves))
        except CorruptShardError as exc:
            if not skip_corrupt:
                raise
            warnings.warn(f"skipping corrupt shard {str(file)!r}: {exc}", UserWarning, stacklevel=2)
    return Dataset(_Index(dataset_id, path, info, shards))
