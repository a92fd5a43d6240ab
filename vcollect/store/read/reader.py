"""Reading datasets written by EpisodeStore, with Minari's names: load_dataset, Dataset, EpisodeData.

``load_dataset`` reads every committed shard's small ``episodes/`` table and notes where each
column lies in its file; column data are read on use, through memory maps (raw columns, and Zstandard
chunks decoded from the map) or HDF5 (other codecs) of at most ``max_open_files`` files open at once, so
loading is cheap, memory stays small and a dataset of any number of shards reads within a small
file-descriptor limit. Episode ids are global: shards sorted by file name (commit time first), then row.
``.tmp`` files (half-written shards) are ignored.
"""

from __future__ import annotations

import contextlib
import gc
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from vcollect.errors import (
    CorruptDatasetError,
    DamagedDatasetError,
    EnvSpecNotStoredError,
    EnvUnavailableError,
    EpisodeIndexError,
)
from vcollect.slices import Pad, Stacks, check_slice_request, check_stacks, slice_generator
from vcollect.spaces import leaves, unflatten_batch
from vcollect.store.layout.dataset_info import (
    check_metadata_update,
    dataset_files,
    dataset_spaces,
    read_dataset_info,
    update_dataset_info,
)
from vcollect.store.layout.episode_metadata import (
    check_episode_metadata,
    read_episode_metadata,
    update_episode_metadata_file,
)
from vcollect.store.layout.manifest import read_manifest
from vcollect.store.layout.naming import locate_dataset
from vcollect.store.layout.publish_journal import recover_publishes
from vcollect.store.layout.shard_format import column_path, shard_layout
from vcollect.store.layout.staging import remove_stale_staging
from vcollect.store.read.dataset_index import DatasetIndex, EpisodeData
from vcollect.store.read.dataset_slices import (
    draw_view_windows,
    gather_view_windows,
    view_positions,
    window_at,
)
from vcollect.store.read.dataset_spec import DatasetSpec
from vcollect.store.read.requirements import warn_unmet_requirements
from vcollect.store.read.shards.shard_census import ON_DAMAGE, OnDamage, take_census
from vcollect.store.read.shards.shard_reader import ShardOpener, StoredShard
from vcollect.store.read.verify import verify_dataset
from vcollect.store.write.episode_lists import EpisodeLists, append_episode_lists
from vcollect.store.write.frame_stack import FrameStack, frame_leaves
from vcollect.store.write.shard import EpisodeRows

__all__ = [
    "MAX_OPEN_FILES",
    "MIN_OPEN_FILES",
    "SAMPLE_CACHE_BYTES",
    "Dataset",
    "DatasetSpec",
    "EpisodeData",
    "StoredDataset",
    "default_max_open_files",
    "load_dataset",
    "open_dataset_at",
    "reload_in_place",
    "view_of",
]

#: Default ``cache_bytes`` of :meth:`Dataset.sample_steps`: the sampled columns of all shards are copied
#: into memory once when they total at most this many bytes; above it, rows are gathered from the files.
SAMPLE_CACHE_BYTES = 64 * 2**20

#: Bounds of the files a loaded dataset keeps open at once by default (default_max_open_files); each open
#: shard map or HDF5 file holds one file descriptor, the least recently used is closed first, and views
#: of one dataset share them.
MIN_OPEN_FILES = 32
MAX_OPEN_FILES = 256

#: Problems a DamagedDatasetError's message or the skip warning lists (its ``problems`` holds them all).
_LISTED_PROBLEMS = 10

#: Members that left Dataset for StoredDataset (how the dataset lies on disk and in memory). They still work
#: on a Dataset for one release, with a DeprecationWarning naming the new spelling.
_MOVED_TO_STORED = frozenset(
    {"env_spec_json", "eval_env_spec_json", "frame_stack", "open_files", "root", "sample_cache_nbytes", "shard_paths"}
)


class Dataset:
    """A dataset (or a view of some of its episodes) with Minari's API, plus fast ``sample_steps``.

    Views made by ``filter_episodes``/``split_dataset`` share the loaded shards; nothing is copied.
    """

    def __init__(self, index: DatasetIndex, episode_indices: np.ndarray | None = None) -> None:
        """Internal: use :func:`load_dataset`.

        Args:
            index: The loaded dataset's shared state.
            episode_indices: The episodes of the view, as global indices (None: every episode).
        """
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
    def _root(self) -> Path:
        """The datasets root this dataset lies under (``path`` less the folders of its id)."""
        return self._index.path.parents[len(self.id.split("/")) - 1]

    @property
    def observation_space(self) -> gym.Space[Any]:
        """Observation space of every episode."""
        return self._index.observation_space

    @property
    def action_space(self) -> gym.Space[Any]:
        """Action space of every episode."""
        return self._index.action_space

    def _spec_json(self, key: Literal["env_spec", "eval_env_spec"]) -> str | None:
        """The stored env spec (or eval env spec) as gymnasium's JSON string, or None."""
        value = self._index.info.get(key)
        return None if value is None else str(value)

    @property
    def env_spec(self) -> gym.envs.registration.EnvSpec | None:
        """The env spec the data was collected with (for ``recover_environment``), or None."""
        text = self._spec_json("env_spec")
        return None if text is None else gym.envs.registration.EnvSpec.from_json(text)

    @property
    def eval_env_spec(self) -> gym.envs.registration.EnvSpec | None:
        """The evaluation env spec, or None."""
        text = self._spec_json("eval_env_spec")
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
    def spec(self) -> DatasetSpec:
        """Minari's dataset spec of this view (totals of the view), plus eval_env_spec and the metadata."""
        metadata = self.metadata
        version = metadata.get("minari_version")
        return DatasetSpec(
            env_spec=self.env_spec,
            total_episodes=self.total_episodes,
            total_steps=self.total_steps,
            dataset_id=self.id,
            combined_datasets=list(self._index.info.get("metadata", {}).get("combined_datasets") or []),
            observation_space=self.observation_space,
            action_space=self.action_space,
            data_path=str(self.path),
            minari_version=None if version is None else str(version),
            eval_env_spec=self.eval_env_spec,
            metadata=metadata,
        )

    def update_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Add or change dataset metadata keys (author, description, ...) in dataset.json, atomically.

        Minari's ``storage.update_metadata`` on the dataset. This dataset and its views see the change; other
        loaded copies on reload.

        Args:
            metadata: The keys to set; ``eval_env_spec`` (an EnvSpec or its JSON) sets the evaluation env.

        Raises:
            MetadataKeyError: A key describes the stored data
                (:data:`~vcollect.store.layout.dataset_info.PROTECTED_METADATA_KEYS`: ids, spaces, env_spec,
                format, totals); nothing changes.
        """
        values = check_metadata_update(metadata)
        eval_spec = values.pop("eval_env_spec", None)
        root = self._root
        update_dataset_info(self.path, self.id, root, metadata=values, eval_env_spec=eval_spec)
        self._index.info = read_dataset_info(self.path, self.id, root)

    def _global_ids(self, episode_indices: Iterable[int] | None) -> np.ndarray:
        """Global episode ids checked against this view (EpisodeIndexError naming the first stray one)."""
        if episode_indices is None:
            return self._episode_indices
        ids = np.asarray(list(episode_indices))
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"episode indices must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64).reshape(-1)
        stray = ids[~np.isin(ids, self._episode_indices)]
        if stray.size:
            where = "dataset" if self.total_episodes == self._index.total_episodes else "view"
            raise EpisodeIndexError(
                f"episode {int(stray[0])} is not in this {where} of {self.id!r} ({self.total_episodes} episodes; "
                "indices are global episode ids, see episode_indices)"
            )
        return ids

    def get_episode_metadata(self, episode_indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """Metadata of episodes by global id, as Minari's ``get_episode_metadata``. Reads no step data.

        Args:
            episode_indices: Global episode ids (None: all of this view's).

        Returns:
            One dict per episode: id, seed, total_steps, options (when stored) and the episode's metadata.

        Raises:
            EpisodeIndexError: An id is not in this view.
            TypeError: The ids are not integers.
        """
        return [self._index.minari_episode_metadata(int(i)) for i in self._global_ids(episode_indices).tolist()]

    def update_episode_metadata(
        self, metadatas: Iterable[Mapping[str, Any]], episode_indices: Iterable[int] | None = None
    ) -> None:
        """Add or change metadata keys of episodes, after the fact.

        Kept in ``episode_metadata.json`` (see :mod:`vcollect.store.layout.episode_metadata`), replaced
        atomically in one write for all the episodes: all of them change or, on any error, none. Values
        overlay what the shard stores; an export to Minari writes them into the episode groups' attributes.

        Args:
            metadatas: One dict per episode; episodes may get different keys.
            episode_indices: Global ids of those episodes (None: all of this view's, in order).

        Raises:
            EpisodeIndexError: An id is not in this view; nothing changes.
            MetadataKeyError: A key may not be set; nothing changes.
            ValueError: Not one dict per episode, or a value that cannot be stored; nothing changes.
        """
        ids = self._global_ids(episode_indices)
        metadatas = list(metadatas)
        if len(metadatas) != ids.shape[0]:
            raise ValueError(f"got {len(metadatas)} metadata dicts for {ids.shape[0]} episodes; give one per episode")
        updates: dict[tuple[str, int], dict[str, Any]] = {}
        for episode_id, metadata in zip(ids.tolist(), metadatas):
            checked = check_episode_metadata(metadata, f"episode {episode_id}")
            shard, row = self._index.locate(episode_id)
            updates.setdefault((shard.path.name, row), {}).update(checked)
        if updates:
            self._index.late_metadata = update_episode_metadata_file(self.path, updates)

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
    def episode_seeded(self) -> np.ndarray:
        """Whether each episode of this view was stored with the seed of its reset (so it replays alone),
        aligned with ``episode_indices``."""
        return self._index.seed_valid[self._episode_indices]

    # ------------------------------------------------------------------ episodes

    def __len__(self) -> int:
        return self.total_episodes

    def __getitem__(self, idx: int) -> EpisodeData:
        """The idx-th episode of this view (Minari semantics: position, not global id)."""
        return self._index.episode(int(self._episode_indices[idx]))

    def __iter__(self) -> Iterator[EpisodeData]:
        return self.iterate_episodes()

    def iterate_episodes(self, episode_indices: Iterable[int] | None = None) -> Iterator[EpisodeData]:
        """Yield episodes by global id.

        Args:
            episode_indices: Global episode ids (None: all of this view's, in order).

        Yields:
            Each episode, read on demand.
        """
        ids = self._episode_indices if episode_indices is None else np.asarray(list(episode_indices), dtype=np.int64)
        for episode_id in ids.tolist():
            yield self._index.episode(episode_id)

    def set_seed(self, seed: int | None) -> None:
        """Seed the generator used by sample_episodes and sample_steps.

        Args:
            seed: The seed (None: fresh OS entropy).
        """
        self._rng = np.random.default_rng(seed)

    def sample_episodes(self, n_episodes: int) -> list[EpisodeData]:
        """Draw distinct episodes uniformly from this view (no replacement).

        Args:
            n_episodes: How many.

        Returns:
            The episodes, in the order drawn.

        Raises:
            ValueError: The view holds fewer than ``n_episodes``.
        """
        if n_episodes > self.total_episodes:
            raise ValueError(f"cannot sample {n_episodes} distinct episodes from {self.total_episodes}")
        chosen = self._rng.choice(self._episode_indices, size=n_episodes, replace=False)
        return [self._index.episode(int(i)) for i in chosen]

    def filter_episodes(self, condition: Callable[[EpisodeData], bool]) -> Dataset:
        """A view of the episodes that meet a condition (no data copied).

        Args:
            condition: Called on each episode of this view.

        Returns:
            The view of the episodes for which ``condition(episode)`` is true.
        """
        keep = [i for i in self._episode_indices.tolist() if condition(self._index.episode(i))]
        return view_of(self, np.asarray(keep, dtype=np.int64))

    def recover_environment(self, eval_env: bool = False, **kwargs: Any) -> gym.Env[Any, Any]:
        """Make the env the data came from, with ``gym.make`` of the stored env spec.

        First warns, as Minari does, for each stored ``requirements`` entry (pip specifiers) that is not
        installed or installed at a version outside it. The spec's entry point may import any module: recover
        environments of datasets you trust.

        Args:
            eval_env: Make the evaluation env spec instead, when one is stored (else warn and use env_spec).
            **kwargs: Passed to ``gym.make``.

        Returns:
            The env.

        Raises:
            EnvSpecNotStoredError: The dataset stores no env spec (a ValueError).
        """
        requirements = self._index.info.get("metadata", {}).get("requirements") or []
        if isinstance(requirements, str):
            requirements = [requirements]
        warn_unmet_requirements(requirements)
        has_eval_spec = self._spec_json("eval_env_spec") is not None
        spec = self.eval_env_spec if eval_env and has_eval_spec else self.env_spec
        if eval_env and not has_eval_spec:
            warnings.warn(f"dataset {self.id!r} has no eval_env_spec; using its env_spec", UserWarning, stacklevel=2)
        if spec is None:
            raise EnvSpecNotStoredError(f"dataset {self.id!r} has no env_spec stored; it cannot recover the environment")
        return gym.make(spec, **kwargs)

    def render_env(self, **kwargs: Any) -> gym.Env[Any, Any]:
        """The env the data came from, made to render: ``recover_environment(render_mode="rgb_array")``, for
        :meth:`render_episode` to replay several episodes in one env.

        Args:
            **kwargs: Passed to ``gym.make`` besides ``render_mode``.

        Returns:
            The env (close it when done).

        Raises:
            EnvSpecNotStoredError: The dataset stores no env spec.
            EnvUnavailableError: The env spec cannot be made here (a package not installed, an unknown id);
                the message names the requirements stored with the dataset.
        """
        spec = self.env_spec
        try:
            return self.recover_environment(render_mode="rgb_array", **kwargs)
        except (gym.error.Error, ImportError) as exc:
            requirements = self._index.info.get("metadata", {}).get("requirements") or []
            if isinstance(requirements, str):
                requirements = [requirements]
            needs = ("install what it stores as requirements: " + ", ".join(map(str, requirements))
                     if requirements else "it stores no requirements; install the package that registers the env")
            name = spec.id if spec is not None else "?"
            raise EnvUnavailableError(
                f"dataset {self.id!r}: its env {name!r} cannot be made here ({type(exc).__name__}: {exc}); {needs}"
            ) from exc

    def render_episode(
        self,
        i: int,
        *,
        source: Literal["auto", "frames", "replay"] = "auto",
        size: tuple[int, int] | None = None,
        annotate: bool = False,
        env: gym.Env[Any, Any] | None = None,
    ) -> np.ndarray:
        """The frames of the i-th episode of this view: the reset's, then one after each of its T steps.

        From the stored observations when they are images (a uint8 Box of HxW, HxWx1 or HxWx3, or a stack of
        them: the newest frame of each), or by replaying the episode from its reset seed and actions in the
        dataset's env rendered with ``render_mode="rgb_array"``, each step checked against the stored
        observation, reward and termination (vcollect/store/read/episode_frames.py).

        Args:
            i: The episode's position in this view (as ``dataset[i]``).
            source: "frames", "replay", or "auto": frames when the observations are images, else replay.
            size: Scale the frames to (width, height) (None: as stored or rendered).
            annotate: Add a strip below each frame with the episode id, the step and the return so far.
            env: An env from :meth:`render_env` to replay in, left open (None: one is made and closed).

        Returns:
            (T+1, H, W, 3) uint8 frames.

        Raises:
            EpisodeIndexError: ``i`` is not a position of this view.
            ValueError: ``source`` is none of the three.
            NoImageObservationsError: ``source="frames"`` and the observations are not images.
            EpisodeNotSeededError: A replay of an episode stored without its reset seed.
            EnvSpecNotStoredError, EnvUnavailableError: A replay, and the env cannot be made (see render_env).
            ReplayDivergenceError: The replay differs from what is stored (naming the episode and step).
        """
        from vcollect.store.read.episode_frames import episode_frames, label_frames, resize_frames

        if source not in ("auto", "frames", "replay"):
            raise ValueError(f"source must be 'auto', 'frames' or 'replay', got {source!r}")
        count = self.total_episodes
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -count <= int(i) < count:
            raise EpisodeIndexError(f"episode {i!r} is not in dataset {self.id!r}, which holds {count} episodes "
                                    f"(positions 0 to {count - 1})")
        episode_id = int(self._episode_indices[int(i)])
        frames = episode_frames(self._index, episode_id, source=source, make_env=self.render_env, env=env)
        if size is not None:
            frames = resize_frames(frames, size)
        if annotate:
            rewards = self._index.episode_column(episode_id, "rewards", obs_rows=False)
            frames = label_frames(frames, episode_id, rewards)
        return frames

    # ------------------------------------------------------------------ transitions

    def sample_steps(self, batch_size: int, *, cache_bytes: int | None = None, n_step: int | None = None,
                     gamma: float | None = None) -> dict[str, Any]:
        """Draw ``batch_size`` transitions uniformly (with replacement) over all steps of this view.

        Episodes are not decoded: rows are gathered from the shards directly. On the first call the sampled
        columns of all the dataset's shards are copied into memory (kept, shared by its views, reported by
        ``StoredDataset(dataset).sample_cache_nbytes``) when they total at most ``cache_bytes``; else rows are
        read from the shard files on each call. A cache already built is used whatever ``cache_bytes`` says.

        Args:
            batch_size: How many transitions to draw.
            cache_bytes: The most bytes that in-memory copy may take (default :data:`SAMPLE_CACHE_BYTES`,
                64 MiB; 0 never copies).
            n_step: With ``gamma``, add n-step returns as :meth:`steps_at` does.
            gamma: The discount of the n-step returns.

        Returns:
            ``observations``, ``actions``, ``rewards``, ``next_observations``, ``terminations`` and
            ``truncations``, one row per transition (nested batches for Dict/Tuple spaces); the n-step keys
            with ``n_step``.

        Raises:
            ValueError: The view has no steps, ``cache_bytes`` is negative, or bad ``n_step`` / ``gamma``.
        """
        cum = self._cumulative_lengths()
        total = int(cum[-1]) if cum.size else 0
        if total == 0:
            raise ValueError(f"dataset {self.id!r} has no steps to sample")
        return self.steps_at(self._rng.integers(0, total, size=batch_size), cache_bytes=cache_bytes, n_step=n_step,
                             gamma=gamma)

    def _cumulative_lengths(self) -> np.ndarray:
        """Running sum of this view's episode lengths (computed once): maps step positions to episodes."""
        if self._cum_lengths is None:
            self._cum_lengths = np.cumsum(self._index.length[self._episode_indices])
        return self._cum_lengths

    def steps_at(self, positions: Any, *, cache_bytes: int | None = None, n_step: int | None = None,
                 gamma: float | None = None) -> dict[str, Any]:
        """The transitions at given step positions of this view, as sample_steps returns them.

        With ``n_step=n`` and ``gamma`` (both or neither) the batch also holds the n-step keys a ring's
        ``sample`` gives, computed the same way: from step t, m steps (up to n, stopping after a step that
        terminates or truncates and at the episode's last step), ``n_step_returns`` (the sum over j < m of
        ``gamma**j * reward[t + j]``, summed backward), ``n_step_next_observations`` (the observation after
        step t + m - 1) and ``n_step_discounts`` (``gamma**m``, 0 where step t + m - 1 terminated).

        Args:
            positions: Ints in [0, steps of this view), the view's steps counted episode by episode in order.
            cache_bytes: As sample_steps'.
            n_step: With ``gamma``, add n-step returns over at most this many steps (>= 1).
            gamma: The discount of the n-step returns, in [0, 1].

        Returns:
            The transitions, in the order of ``positions``.

        Raises:
            IndexError: A position is out of range.
            ValueError: ``cache_bytes`` is negative, or bad ``n_step`` / ``gamma``.
        """
        nstep = _checked_nstep(n_step, gamma)
        limit = _cache_limit(cache_bytes)
        cum = self._cumulative_lengths()
        total = int(cum[-1]) if cum.size else 0
        u = np.asarray(positions, dtype=np.int64).reshape(-1)
        if u.size and (int(u.min()) < 0 or int(u.max()) >= total):
            raise IndexError(f"step positions must lie in [0, {total}) for dataset {self.id!r}")
        idx = self._index
        k = np.searchsorted(cum, u, side="right")
        episodes = self._episode_indices[k]
        within = u - (cum[k] - idx.length[episodes])
        step_rows = idx.global_step_offset[episodes] + within
        obs_rows = idx.global_obs_offset[episodes] + within
        obs, next_obs, acts = [], [], []
        n = len(u)
        starts = idx.global_obs_offset[episodes]
        for leaf in idx.obs_leaves:  # each observation row and the next in one gather (one pass per shard)
            both = idx.gather_obs(column_path("observations", leaf.name), leaf.dtype,
                                  np.concatenate([obs_rows, obs_rows + 1]), np.concatenate([starts, starts]), limit)
            obs.append(both[:n])
            next_obs.append(both[n:])
        steps = idx.row_groups(step_rows, False)  # split by shard once for the five step columns
        for leaf in idx.act_leaves:
            acts.append(idx.gather(column_path("actions", leaf.name), leaf.dtype, steps, limit))
        batch = {
            "observations": unflatten_batch(idx.observation_space, obs),
            "actions": unflatten_batch(idx.action_space, acts),
            "rewards": idx.gather("rewards", np.dtype(np.float64), steps, limit),
            "next_observations": unflatten_batch(idx.observation_space, next_obs),
            "terminations": idx.gather("terminations", np.dtype(np.bool_), steps, limit),
            "truncations": idx.gather("truncations", np.dtype(np.bool_), steps, limit),
        }
        if nstep is not None:
            batch.update(self._nstep_targets(step_rows, obs_rows, starts, idx.length[episodes] - within, limit, *nstep))
        return batch

    def _nstep_targets(self, step_rows: np.ndarray, obs_rows: np.ndarray, starts: np.ndarray, left: np.ndarray,
                       limit: int, n_step: int, gamma: float) -> dict[str, Any]:
        """steps_at's n-step keys for steps at global ``step_rows`` / ``obs_rows`` with ``left`` steps to their
        episode's end (the step itself included)."""
        idx = self._index
        ahead = np.arange(n_step)
        rows = step_rows[:, None] + np.minimum(ahead, left[:, None] - 1)  # (batch, n), clamped inside the episode
        groups = idx.row_groups(rows.reshape(-1), False)
        rew = idx.gather("rewards", np.dtype(np.float64), groups, limit).reshape(rows.shape)
        term = idx.gather("terminations", np.dtype(np.bool_), groups, limit).reshape(rows.shape)
        ended = term | idx.gather("truncations", np.dtype(np.bool_), groups, limit).reshape(rows.shape)
        stop = ended | (ahead >= left[:, None] - 1)  # the walk stops after such a step
        stop[:, -1] = True
        m = stop.argmax(axis=1) + 1  # steps taken
        last = m - 1
        batch = np.arange(len(m))
        returns = rew[batch, last]
        for j in range(n_step - 2, -1, -1):  # backward, as a ring sums them
            returns = np.where(j < last, rew[:, j] + gamma * returns, returns)
        powers = np.ones(n_step + 1)
        powers[1:] = np.cumprod(np.full(n_step, gamma))
        boot = [idx.gather_obs(column_path("observations", leaf.name), leaf.dtype, obs_rows + m, starts, limit)
                for leaf in idx.obs_leaves]
        return {
            "n_step_returns": returns,
            "n_step_next_observations": unflatten_batch(idx.observation_space, boot),
            "n_step_discounts": np.where(term[batch, last], 0.0, powers[m]),
        }

    def episode_rows(self, episode_indices: Iterable[int] | None = None) -> EpisodeRows:
        """The steps of whole episodes, concatenated in the order given, read column by column (each column's
        rows split by shard once, in file order; no episode decoded on its own): what a ring preloads.

        Args:
            episode_indices: Global episode ids (None: all of this view's, in order).

        Returns:
            Flat leaf arrays (observations T+1 rows per episode, stacks rebuilt for a ``frame_stack``
            dataset; actions, rewards, terminations and truncations T rows) and the episodes' lengths.

        Raises:
            EpisodeIndexError: An id is not in this view.
            TypeError: The ids are not integers.
        """
        idx = self._index
        ids = self._global_ids(episode_indices)
        lengths = idx.length[ids]
        obs_rows = _episode_row_ranges(idx.global_obs_offset[ids], lengths + 1)
        step_rows = _episode_row_ranges(idx.global_step_offset[ids], lengths)
        starts = np.repeat(idx.global_obs_offset[ids], lengths + 1)
        obs = [idx.gather_obs(column_path("observations", leaf.name), leaf.dtype, obs_rows, starts, 0)
               for leaf in idx.obs_leaves]
        steps = idx.row_groups(step_rows, False)
        acts = [idx.gather(column_path("actions", leaf.name), leaf.dtype, steps, 0) for leaf in idx.act_leaves]
        return EpisodeRows(
            obs, acts, idx.gather("rewards", np.dtype(np.float64), steps, 0),
            idx.gather("terminations", np.dtype(np.bool_), steps, 0),
            idx.gather("truncations", np.dtype(np.bool_), steps, 0), lengths.tolist(),
        )

    def sample_slices(
        self, batch_size: int, length: int, *, pad: Pad = "none", by: Literal["window", "episode"] = "window",
        gamma: float = 1.0, seed: int | None = None, rng: np.random.Generator | None = None,
        cache_bytes: int | None = None, next_observations: bool = True, stacks: Stacks = "copy",
    ) -> dict[str, Any]:
        """Draw windows of ``length`` consecutive steps of one episode of this view (slices, for sequence
        models), with replacement, read as :meth:`steps_at` reads steps (frame stacks rebuilt, the sampling
        cache used where built).

        Every window is equally likely (``by="window"``; long episodes are not under-sampled), or every
        episode first (``by="episode"``). ``pad="none"`` takes windows inside an episode; ``"start"``,
        ``"end"`` and ``"both"`` also take windows reaching before its first or past its last step, whose rows
        outside it are 0 and ``mask`` False (see :mod:`vcollect.slices`). A call costs the batch and a pass
        over the view's episode lengths; the rewards are read once, on the first call, for returns-to-go. A
        window's observations and next observations are read as one run of stored rows (frames, for a
        ``frame_stack`` dataset) and stacked by index.

        Args:
            batch_size: How many windows (0: an empty batch of the right shapes).
            length: Steps per window.
            pad: Where windows may be padded: "none", "start", "end" or "both".
            by: "window" (each window equally likely) or "episode" (each episode, then its windows).
            gamma: The discount of ``returns_to_go`` (1: plain sums).
            seed: Seeds a generator for this call (else ``rng``, else the dataset's, see :meth:`set_seed`).
            rng: The generator to draw with.
            cache_bytes: As :meth:`sample_steps`'.
            next_observations: Whether to return ``next_observations`` (False: a sequence model that reads only
                ``observations`` does not pay for a second copy of every window's observations).
            stacks: ``"copy"`` (default): ``observations`` and ``next_observations`` are arrays of their own,
                writable, as ``sample_steps`` gives them (and as a TorchRL or Tianshou buffer hands out stacks).
                ``"view"``: read-only numpy views over one array per window of its stored rows, read once: for a
                ``frame_stack`` dataset of k frames, each window's ``length + k`` frames, every row's stack
                strided over them (the stack axis one frame apart) and ``next_observations`` the same frames
                shifted by one, about 2k times fewer bytes than materialised stacks (256 windows of 64 Pong
                stacks: 31 MiB instead of 882); without ``frame_stack``, its ``length + 1`` observations, the next
                observations shifted by one row. Rows and stacks overlap in memory: copy before writing (numpy
                refuses writes to them; ``torch.as_tensor`` shares them, with torch's warning about
                non-writable arrays). A padded row must read 0 while sharing frames with the real row beside
                it, which no view can do, so a batch holding a padded window (``pad`` other than ``"none"``) is
                materialised as with ``"copy"``, read-only all the same. Read from Zstandard shards, each
                window's chunks are decoded straight into its place in the batch's array (whole chunks: the
                array holds a chunk's rows less one beside each window); the arrays of the last two calls are
                kept and one is filled again once nothing refers to it (no view of it left), so a loop holding
                one batch while drawing the next reuses memory. ``$VCOLLECT_DECODE_THREADS`` sets how many
                threads decode a call's frames together (each stretch of frames one libzstd call with the GIL
                released, so two threads decode in parallel); by default 2 where the process may run on two
                CPUs or more, else 1 (the calling thread alone), and 1 in a torch DataLoader worker process
                (the workers already decode side by side). A second thread takes about half the decoding
                off the calling thread at no more CPU time in all; set 1 where every core is busy with other
                work. The batch is the same whatever the number.

        Returns:
            :meth:`sample_steps`' keys, each with leading (batch, length) axes, and ``mask`` (bool: the row is a
            step), ``timesteps`` (each row's step in its episode), ``returns_to_go`` (float64: the discounted
            sum of the row's reward and every later one of its episode), ``partial`` (per window; False, a
            stored episode has ended), ``episode_ids`` (global ids, as ``EpisodeData.id``) and
            ``start_indices`` (the window's first step in its episode; negative when padded at the start).
            ``slices_at(batch["episode_ids"], batch["start_indices"], length)`` reads the same windows again.

        Raises:
            SliceLengthError: ``pad="none"`` and every episode of the view is shorter than ``length``.
            ValueError: A bad argument (``cache_bytes`` negative, ``stacks`` not "copy" or "view"), or ``seed`` and
                ``rng`` both given.
        """
        request = check_slice_request(batch_size, length, pad, by, gamma)
        view = check_stacks(stacks)
        limit = _cache_limit(cache_bytes)
        positions, starts = draw_view_windows(self._episode_indices, self.episode_lengths, request,
                                              slice_generator(rng, seed, self._rng))
        return gather_view_windows(self._index, positions, self._episode_indices, starts, request, limit,
                                   bool(next_observations), view)

    def slices_at(self, episodes: Any, starts: Any, length: int, *, gamma: float = 1.0,
                  cache_bytes: int | None = None, next_observations: bool = True,
                  stacks: Stacks = "copy") -> dict[str, Any]:
        """The windows of ``length`` steps of given episodes from given steps, as :meth:`sample_slices` returns
        them (a batch of one for scalars).

        Args:
            episodes: Global episode ids (``EpisodeData.id``, a batch's ``episode_ids``) of this view.
            starts: Each window's first step in its episode; from ``1 - length`` (padded at the start) to the
                episode's last step (padded at the end past it).
            length: Steps per window.
            gamma: The discount of ``returns_to_go``.
            cache_bytes: As :meth:`sample_steps`'.
            next_observations: As :meth:`sample_slices`'.
            stacks: As :meth:`sample_slices`': "copy" or "view".

        Returns:
            :meth:`sample_slices`' dict, one window per (episode, start).

        Raises:
            EpisodeIndexError: An episode is not in this view.
            IndexError: A window holds no step of its episode.
            ValueError: A bad ``length``, ``gamma`` or ``stacks``, or not one start per episode.
        """
        view = check_stacks(stacks)
        ids = np.asarray(episodes, dtype=np.int64).reshape(-1)
        begin = np.asarray(starts, dtype=np.int64).reshape(-1)
        if ids.shape != begin.shape:
            raise ValueError(f"slices_at takes one start per episode, got {ids.size} episodes and {begin.size} starts")
        request = check_slice_request(ids.size, length, "both", "window", gamma)
        positions = view_positions(self._episode_indices, self._index.total_episodes, ids)
        begin = window_at(self._index.length.take(ids), begin, request.length)
        return gather_view_windows(self._index, positions, self._episode_indices, begin, request,
                                   _cache_limit(cache_bytes), bool(next_observations), view)

    def update_dataset_from_buffer(self, buffer: Sequence[EpisodeLists]) -> None:
        """Minari's name: append episodes given as per-step lists (Minari's or vcollect's EpisodeBuffers).

        All are checked against this dataset's spaces first, then committed as one shard. As Minari's, this
        object is updated in place: its totals, iteration and sampling include the new episodes, after the
        ones it had (with the next global ids). Views made from it before, and other loaded copies, stay
        as they were (load_dataset again to see everything, other writers' shards too).

        Args:
            buffer: The episodes to append.

        Raises:
            ValueError: An episode does not fit the spaces (naming it); nothing is written.
        """
        written = append_episode_lists(self.path, self.id, self._root, buffer, self.observation_space,
                                       self.action_space)
        index = self._index
        stored_obs = frame_leaves(index.obs_leaves, index.frame_stack)
        added = [StoredShard(path, stored_obs, index.act_leaves) for path in written]
        grown = DatasetIndex(index.dataset_id, index.path, index.info, [*index.shards, *added],
                             index.files.capacity, index.late_metadata, index.files.before_open)
        first = index.total_episodes
        self._index = grown
        self._episode_indices = np.concatenate(
            [self._episode_indices, np.arange(first, grown.total_episodes, dtype=np.int64)]
        )
        self._cum_lengths = None

    def as_torch_dataset(self, items: Literal["transitions", "episodes", "slices"] = "transitions", *,
                         cache_bytes: int | None = None, length: int | None = None, pad: Pad = "none",
                         gamma: float = 1.0) -> Any:
        """This view as a map-style ``torch.utils.data.Dataset``, read on demand and safe in DataLoader workers
        (each opens its own files).

        A DataLoader reads each batch of transitions (or of slices) at once (torch's ``__getitems__``), as
        :meth:`steps_at` (:meth:`slices_at`) does, and its default collate takes the batch's arrays whole.
        In a DataLoader worker process a read decodes its frames on the worker's own thread unless
        ``$VCOLLECT_DECODE_THREADS`` says otherwise (:meth:`sample_slices`), so as many workers as cores keep
        the cores busy without more threads than cores.

        Args:
            items: What one item is: a transition, a whole episode, or a window of ``length`` steps (every
                window :meth:`sample_slices` could draw with ``pad``, each once: shuffle to draw uniformly).
            cache_bytes: As :meth:`sample_steps`' (default :data:`SAMPLE_CACHE_BYTES`); each DataLoader worker
                builds its own in-memory copy of the sampled columns when they fit (0 never copies).
            length: Steps per window (slices only).
            pad: Where windows may be padded (slices only).
            gamma: The discount of the windows' ``returns_to_go`` (slices only).

        Returns:
            The torch dataset (vcollect/store/read/torch_dataset.py).

        Raises:
            ValueError: ``items`` is not 'transitions', 'episodes' or 'slices', ``cache_bytes`` is negative,
                or slices without a good ``length`` / ``pad`` / ``gamma``.
        """
        from vcollect.store.read.torch_dataset import TorchDataset

        return TorchDataset(self, items, cache_bytes, length=length, pad=pad, gamma=gamma)

    def close(self) -> None:
        """Close the shard files this dataset (and its views) holds open; reading later reopens them."""
        self._index.files.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def verify(self) -> list[str]:
        """Check the dataset on disk (all of it, not only this view); one line per problem, [] when sound.

        See :func:`vcollect.store.read.verify.verify_dataset`: what load_dataset counts as damage (missing,
        truncated, unrecorded and copied shards, stray files, corrupt shards, layouts other than
        dataset.json's), shards altered since commit (SHA-256 against the manifest), manifest lines that
        disagree with their shard, episode tables that disagree with the columns and actions outside the
        action space. Reads every shard whole.

        Returns:
            One line per problem; empty when the dataset is sound.
        """
        return verify_dataset(self._index.path, self._index.info)

    def __repr__(self) -> str:
        return f"Dataset({self.id!r}, episodes={self.total_episodes}, steps={self.total_steps})"

    if not TYPE_CHECKING:  # at run time only, so that mypy flags any use of the deprecated names

        def __getattr__(self, name: str) -> Any:
            """Reached only for attributes not set: the members that moved to StoredDataset or to ``spec``."""
            if name == "combined_datasets":
                warnings.warn("Dataset.combined_datasets is deprecated: use dataset.spec.combined_datasets",
                              DeprecationWarning, stacklevel=2)
                return self.spec.combined_datasets
            if name in _MOVED_TO_STORED:
                warnings.warn(
                    f"Dataset.{name} is deprecated: use vcollect.store.read.reader.StoredDataset(dataset).{name}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(StoredDataset(self), name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class StoredDataset:
    """How a loaded Dataset lies on disk and in memory: its root, shard files, open files, sample cache, frame
    stacking and stored env specs' JSON text. What vcollect's own modules (export, combine, the command line)
    and resource checks read beyond a user's API, composed with the dataset (or view) it is given.
    """

    __slots__ = ("_dataset",)

    def __init__(self, dataset: Dataset) -> None:
        self._dataset = dataset

    @property
    def root(self) -> Path:
        """The datasets root the dataset lies under (its ``path`` less the folders of its id)."""
        return self._dataset._root

    @property
    def shard_paths(self) -> list[Path]:
        """The committed shard files the dataset was loaded from, in episode-id order."""
        return [s.path for s in self._dataset._index.shards]

    @property
    def open_files(self) -> int:
        """Shard files (maps or HDF5 files) the dataset holds open now; at most ``max_open_files``."""
        return len(self._dataset._index.files)

    @property
    def sample_cache_nbytes(self) -> int:
        """Bytes of the in-memory copy ``sample_steps`` made of the sampled columns (0 when it made none)."""
        return self._dataset._index.cache_nbytes

    @property
    def frame_stack(self) -> FrameStack | None:
        """How frame-stacked observations are stored once; None when stored whole."""
        return self._dataset._index.frame_stack

    @property
    def env_spec_json(self) -> str | None:
        """The stored env spec as gymnasium's JSON string (what Minari keeps in its metadata), or None."""
        return self._dataset._spec_json("env_spec")

    @property
    def eval_env_spec_json(self) -> str | None:
        """The stored evaluation env spec as gymnasium's JSON string, or None."""
        return self._dataset._spec_json("eval_env_spec")


def default_max_open_files() -> int:
    """The ``max_open_files`` a dataset loaded without one gets: a quarter of this process's file-descriptor
    limit (RLIMIT_NOFILE's soft limit, read now), between :data:`MIN_OPEN_FILES` and :data:`MAX_OPEN_FILES`.

    A quarter leaves room for other loaded datasets and everything else the process opens; should the
    limit be reached anyway, a dataset closes its older half of files and opens again (OpenShardFiles).
    """
    try:
        import resource
    except ImportError:  # no such limit here (Windows)
        return MIN_OPEN_FILES
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_FILES
    return max(MIN_OPEN_FILES, min(MAX_OPEN_FILES, int(soft) // 4))


def _cache_limit(cache_bytes: int | None) -> int:
    """The sampling cache's most bytes a read allows: ``cache_bytes``, else :data:`SAMPLE_CACHE_BYTES`."""
    limit = SAMPLE_CACHE_BYTES if cache_bytes is None else int(cache_bytes)
    if limit < 0:
        raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
    return limit


def _checked_nstep(n_step: Any, gamma: Any) -> tuple[int, float] | None:
    """``(n_step, gamma)`` checked (an int >= 1 and a real in [0, 1]), or None when neither is given."""
    if n_step is None and gamma is None:
        return None
    if n_step is None or gamma is None:
        raise ValueError(f"n_step and gamma go together: pass both or neither, got n_step={n_step!r}, gamma={gamma!r}")
    if isinstance(n_step, bool) or not isinstance(n_step, (int, np.integer)) or n_step < 1:
        raise ValueError(f"n_step must be an int >= 1, got {n_step!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a discount factor, a real number in [0, 1] (e.g. 0.99), got {gamma!r}")
    return int(n_step), float(gamma)


def _episode_row_ranges(offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``offsets[i] .. offsets[i] + counts[i] - 1`` for every i, concatenated (vectorised)."""
    total = int(counts.sum())
    firsts = np.cumsum(counts) - counts
    return np.repeat(offsets - firsts, counts) + np.arange(total, dtype=np.int64)


def view_of(dataset: Dataset, episode_indices: np.ndarray) -> Dataset:
    """A view of ``dataset`` holding the episodes of the given global ids, sharing its loaded shards.

    For code that picks the episodes itself (``split_dataset``, ``filter_episodes``); the ids are taken
    as they are, unchecked.

    Args:
        dataset: The dataset (or view) whose shards the view reads.
        episode_indices: Global episode ids, in the view's order.

    Returns:
        The view (nothing is copied).
    """
    return Dataset(dataset._index, episode_indices)


def reload_in_place(dataset: Dataset, added_episodes: np.ndarray | Sequence[int] = ()) -> None:
    """Load ``dataset``'s shards from disk again into the same object and add ``added_episodes`` to it.

    For writers that append to a dataset a user holds and keep Minari's promise that the object then
    shows the new episodes (``DataCollector.add_to_dataset``). The episodes the object held keep their
    global ids (new shards sort after the loaded ones); views made from it before keep the old snapshot.

    Args:
        dataset: The dataset (or view) to update.
        added_episodes: Global ids of the episodes to add to it, after those it holds.
    """
    fresh = open_dataset_at(dataset.path, dataset.id, dataset._root)
    dataset._index = fresh._index
    dataset._episode_indices = np.append(dataset._episode_indices, np.asarray(added_episodes, dtype=np.int64))
    dataset._cum_lengths = None


def load_dataset(
    dataset_id: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    on_damage: OnDamage = "raise",
    skip_corrupt: bool = False,
    max_open_files: int | None = None,
) -> Dataset:
    """Open a dataset for reading (a snapshot of its committed shards).

    The shard files found are first compared with the dataset's manifests (names and sizes; no file is
    read for that): a recorded shard missing, an unrecorded one present that is not a whole shard of its
    own (a copy under another name, a stray file), one truncated or altered since its commit, one that
    cannot be read or was written with another layout than dataset.json's, is damage (the policy:
    :mod:`vcollect.store.read.shards.shard_census`; a shard a live writer renamed but has not yet recorded, and
    datasets whose manifest was lost, read as usual). Temporary ``.tmp`` files and anything in ``shards/``
    that is not a regular file are ignored. A manifest line stands in for its shard (no file opened) only
    when the line's checksum holds and the file's size and mtime match it. Counts (total_episodes,
    total_steps) are always those of the episodes the dataset yields.

    Args:
        dataset_id: ``namespace/name-vN``, or the path of a dataset's folder (one ``save_to_disk`` wrote, a
            dataset copied anywhere): a ``pathlib.Path``, or a str that is no id and names an existing folder
            (a str that reads as an id is always an id: :func:`~vcollect.store.layout.naming.locate_dataset`).
            A dataset loaded by its folder has the folder's name as its ``id``, and its parent as its root.
        root: The datasets root of an id (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``);
            None with a path.
        on_damage: ``"raise"`` (default): a damaged dataset raises DamagedDatasetError naming every
            problem and file. ``"skip"``: the damaged shards are left out with a UserWarning listing them,
            and the whole ones are read.
        skip_corrupt: True is ``on_damage="skip"``.
        max_open_files: Most shard files kept open at once (least recently used closed first); default
            :func:`default_max_open_files`.

    Returns:
        The dataset.

    Raises:
        DamagedDatasetError: The shards disagree with the manifests or cannot be read whole (a
            CorruptShardError).
        CorruptDatasetError: dataset.json is malformed, or every shard was written with another layout.
        DatasetNotFoundError: No such dataset under the root (or at the folder given).
        InvalidDatasetIdError: ``dataset_id`` is a str that is neither an id nor an existing folder.
        ValueError: ``on_damage`` is not "raise" or "skip", ``max_open_files`` < 1, or ``root`` is given with
            a path.

    Errors that say nothing about a shard (too many open files, permission denied) are raised as they are.
    """
    name, root_path, path = locate_dataset(dataset_id, root)
    return open_dataset_at(path, name, root_path, on_damage=on_damage, skip_corrupt=skip_corrupt,
                           max_open_files=max_open_files)


def open_dataset_at(
    path: Path,
    dataset_id: str,
    root_path: Path,
    *,
    on_damage: OnDamage = "raise",
    skip_corrupt: bool = False,
    max_open_files: int | None = None,
    before_open: ShardOpener | None = None,
) -> Dataset:
    """:func:`load_dataset` of the dataset folder ``path``, named ``dataset_id`` under ``root_path``.

    For code that holds a dataset's place already (a Dataset reloaded, a writer's own dataset); ``path`` is
    taken as it is.

    Args:
        path: The dataset's folder.
        dataset_id: Its name under ``root_path`` (its id, or its folder's name).
        root_path: The root its renames and deletions are held to.
        on_damage: As :func:`load_dataset`'s.
        skip_corrupt: As :func:`load_dataset`'s.
        max_open_files: As :func:`load_dataset`'s.
        before_open: Called with a shard file's path before the reader opens it (a dataset read in place from
            a remote fetches the shard there, or hands back the ShardRanges to read it through); None: every shard file is here.

    Returns:
        The dataset.

    Raises:
        DamagedDatasetError: As :func:`load_dataset`.
        CorruptDatasetError: As :func:`load_dataset`.
        DatasetNotFoundError: No dataset at ``path``.
        ValueError: As :func:`load_dataset`.
    """
    if on_damage not in ON_DAMAGE:
        raise ValueError(f"on_damage must be one of {', '.join(map(repr, ON_DAMAGE))}, got {on_damage!r}")
    if skip_corrupt:
        on_damage = "skip"
    capacity = default_max_open_files() if max_open_files is None else max_open_files
    recover_publishes(root_path)  # finish what a killed split or overwrite committed (store/layout/publish_journal.py)
    if not os.path.lexists(path) and path.parent.is_dir():
        remove_stale_staging(path.parent, root_path)  # an overwrite killed between its two renames: the old one is back
    info = read_dataset_info(path, dataset_id, root_path)
    obs_space, act_space = dataset_spaces(info)
    stack = FrameStack.from_json(info.get("frame_stack"))  # checked with dataset.json (dataset_info.check_dataset_info)
    expected = shard_layout(leaves(obs_space), leaves(act_space), None if stack is None else stack.to_json())
    obs_leaves, act_leaves = frame_leaves(leaves(obs_space), stack), leaves(act_space)
    with _gc_paused():  # thousands of small parsed objects: collecting meanwhile would only slow loading
        manifest = read_manifest(path)  # before listing shards/: a shard recorded meanwhile is then listed
        committed, _ = dataset_files(path)
        census = take_census(path, manifest, committed, obs_leaves, act_leaves, expected)
    if census.layout_problem is not None:
        raise CorruptDatasetError(census.layout_problem)
    if census.problems:
        taken = f"{len(census.shards)} whole shard(s)"
        listed = "; ".join(census.problems[:_LISTED_PROBLEMS])
        if len(census.problems) > _LISTED_PROBLEMS:
            listed += f"; and {len(census.problems) - _LISTED_PROBLEMS} more"
        if on_damage == "raise":
            raise DamagedDatasetError(
                f"dataset {dataset_id!r} at {str(path)!r} is damaged: {listed}. load_dataset(..., "
                f"on_damage='skip') reads the {taken}; `vcollect verify` lists every problem",
                census.problems,
            )
        warnings.warn(
            f"dataset {dataset_id!r} at {str(path)!r} is damaged; reading its {taken} only: {listed}",
            UserWarning,
            stacklevel=3,  # the caller of load_dataset
        )
    late_metadata = read_episode_metadata(path)
    return Dataset(DatasetIndex(dataset_id, path, info, census.shards, capacity, late_metadata, before_open))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
