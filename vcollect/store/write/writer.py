"""EpisodeStore: append completed episodes to a dataset as crash-safe, columnar HDF5 shards.

Layout (docs/ARCHITECTURE.md, "On disk")::

    <root>/<namespace>/<name>-vN/
      dataset.json                               id, format version, spaces, env spec, metadata
      shards/<commit-time>-<writer>-<seq>.h5     immutable once committed

Episodes are buffered in memory (copies, because callers pass views of ring buffers) and
committed as one shard when ``shard_steps`` steps (or ``shard_bytes`` bytes) are pending, on
``flush()`` and on ``close()``; a batch of episodes that fills more than one shard is cut between
episodes into several. A shard is built in memory, written to ``<name>.h5.<space>.tmp``,
fsynced, renamed and the directory fsynced, so a crash leaves every committed shard whole and at most
the pending episodes lost (see EpisodeStore, "What a crash can lose"); a commit that fails (a full disk)
raises DatasetError and keeps the pending episodes for the next flush(). Each store instance has its own
writer name (pid + uuid), so many processes append to one dataset without coordinating; the next writer to
open a dataset removes the temporary files of crashed ones, and a writer whose dataset was deleted or
replaced fails its next commit. Commits write through a descriptor of the dataset directory held open
since create/open, so a shard never lands in a dataset that an overwrite swapped in at its path. A store nobody closes commits what is pending at interpreter exit or when
it is garbage-collected (vcollect.exit_commits).

This module routes episodes and commits shards; ``dataset_dir`` makes, opens and moves the dataset
directory, ``episode_checks`` checks and copies each episode's arrays, ``dataset_info`` owns ``dataset.json``,
``schema`` the info/extras/metadata structure checks and ``shard`` the pending columns and the shard file write.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from vcollect.errors import DatasetError, EpisodesLostWarning, InfoStructureError
from vcollect.exit_commits import EXIT_WAIT_S, ExitStage, register_exit_close
from vcollect.spaces import flatten_batch, leaves
from vcollect.store.layout.dataset_dir import (
    APPEND_HINT,
    OVERWRITE_HINT,
    HeldDir,
    Identity,
    create_dataset_dir,
    hold_dataset_dir,
    move_dataset_dir,
    open_dataset_dir,
)
from vcollect.store.layout.dataset_info import (
    DATASET_FILE,
    FORMAT_VERSION,
    SHARDS_DIR,
    new_dataset_info,
    read_dataset_info,
    update_dataset_info,
)
from vcollect.store.layout.naming import dataset_path, locate_dataset, parse_dataset_id, resolve_root
from vcollect.store.layout.schema import MetadataSchema, TreeSchema, to_json
from vcollect.store.layout.shard_format import (
    LAYOUT_ATTR,
    SHARD_FORMAT_NAME,
    shard_layout,
    shard_name,
)
from vcollect.store.write.compression import check_compression
from vcollect.store.write.env_spec_record import env_spec_to_record
from vcollect.store.write.episode_checks import (
    batch_lists,
    batch_seeds,
    batch_steps,
    copy_leaves,
    episode_seed,
    episode_steps,
    side_data,
)
from vcollect.store.write.frame_stack import (
    FrameStack,
    batch_frames,
    frame_leaves,
    frame_stack_of,
    rows_as_frames,
)
from vcollect.store.write.options import StoreOptions, merge_store_options
from vcollect.store.write.shard import EpisodeRows, PendingShard
from vcollect.store.write.shard_commits import ShardCommits, ShardJob, commit_shard

# DATASET_FILE and the hints (store/layout/dataset_dir.py) stay importable from here for vcollect.cli, which
# imported them from this module.
__all__ = ["APPEND_HINT", "DATASET_FILE", "OVERWRITE_HINT", "EpisodeStore"]


class EpisodeStore:
    """Writer appending completed episodes to one dataset as columnar HDF5 shards.

    Make one with :meth:`create` (new dataset) or :meth:`open` (append to an existing one); use it as a
    context manager or call :meth:`close`. Not thread-safe; use one store per thread or process. A store left
    open is closed at interpreter exit, or when it is garbage-collected, committing what is pending; what
    cannot be committed then is reported by an EpisodesLostWarning with its counts.

    What a crash can lose (SIGKILL, power loss; committed shards are always whole): the episodes not yet in
    a committed shard. With L the steps of the longest episode:

    - pending in this store: fewer than ``shard_steps`` steps once a write returns (a write fills and
      commits as many shards as its episodes need, cut between episodes, so a shard holds fewer than
      ``shard_steps + L`` steps), and fewer than ``shard_bytes`` bytes;
    - with ``background_commits=True``, also the shards handed to the commit thread: at most two, each of
      fewer than ``shard_steps + L`` steps;
    - in a Collector writing here, the finished episodes queued for the store: fewer than
      ``WRITE_BATCH`` (128) episodes and fewer than ``WRITE_STEPS`` (2,048) steps, plus the one being queued
      (vcollect/collecting/episode_writer.py).

    In all, fewer than ``shard_steps + 2,048 + L`` steps of finished episodes with inline commits and
    ``3 * (shard_steps + L) + 2,048`` with background commits; episodes still running are lost too (they
    were not finished), and so are the steps a blocks backend has staged but not recorded (at most 64 per
    env).
    """

    def __init__(
        self,
        path: Path,
        dataset_id: str,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        options: StoreOptions,
        *,
        frame_stack: FrameStack | None = None,
    ) -> None:
        """Internal: use :meth:`create` or :meth:`open`.

        Args:
            path: The dataset directory.
            dataset_id: The dataset's id.
            observation_space: The space of the observations stored.
            action_space: The space of the actions stored.
            options: How the store writes.
            frame_stack: How stacked frames are stored (None: observations as they are).
        """
        self._path = Path(path)
        self._shards_dir = self._path / SHARDS_DIR
        self._dataset_id = dataset_id
        self.observation_space = observation_space
        self.action_space = action_space
        self._options = options
        self.shard_steps = options.shard_steps
        self.shard_bytes = options.shard_bytes
        self.compression = check_compression(options.compression)  # loads a plugin codec's filters in this process
        self._env_id_offset = options.env_id_offset
        self._obs_leaves = leaves(observation_space)
        self._act_leaves = leaves(action_space)
        self._obs_shapes = [leaf.shape for leaf in self._obs_leaves]
        self._act_shapes = [leaf.shape for leaf in self._act_leaves]
        self._pid = os.getpid()
        self._writer = self._new_writer_name()
        self._seq = 0
        self._last_time_ns = 0
        self._closed = False
        self._identity: Identity | None = None  # set by create/open: see dataset_dir.check_identity
        self._held: HeldDir | None = None  # the dataset directory, held open: commits write through it
        self._schemas = {"infos": TreeSchema("infos"), "extras": TreeSchema("extras")}
        self._metadata = MetadataSchema()
        self._committed_episodes = 0
        self._committed_steps = 0
        self._shards_written: list[Path] = []
        self._frame_stack = frame_stack  # observations stored one frame a row (store/write/frame_stack.py)
        self._pending = PendingShard(frame_leaves(self._obs_leaves, frame_stack), self._act_leaves)
        self._commits = ShardCommits(commit_shard, background=options.background_commits)
        self._made_in = os.getpid()
        register_exit_close(self, ExitStage.STORE)  # commits what is pending if never closed (vcollect.exit_commits)

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
        overwrite: bool = False,
        frame_stack: int | FrameStack | None = None,
        options: StoreOptions | None = None,
        **option_overrides: Any,
    ) -> EpisodeStore:
        """Create a new, empty dataset and return a writer for it.

        Args:
            dataset_id: The new dataset's id, ``namespace/name-vN``.
            observation_space: The space of the observations stored.
            action_space: The space of the actions stored.
            env_spec: A gymnasium EnvSpec or its JSON (for ``recover_environment``).
            eval_env_spec: The same for the evaluation env.
            root: The datasets folder (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``).
            metadata: JSON-able dataset metadata (author, description, ...; Minari's reference scores as
                ``metadata=vcollect.reference_scores(env, ref_max_score=... or expert_policy=...)``).
            overwrite: Replace a dataset of this id: the new one is built aside and swapped in, the old one is
                removed only then, and a concurrent overwrite of the same id fails with DatasetError.
            frame_stack: k or ``FrameStack(k, padding)`` for gymnasium's ``FrameStackObservation`` k-frame Box:
                each frame stored once, stacks rebuilt on read, other observations refused
                (store/write/frame_stack.py).
            options: How the store writes (:class:`StoreOptions`: shard size, compression, background commits,
                env id offset); the defaults when None.
            **option_overrides: Any StoreOptions field by name (``shard_steps=...``, ``compression=...``,
                ``background_commits=...``, ``shard_bytes=...``, ``env_id_offset=...``); each overrides the
                field of ``options``.

        Returns:
            A writer for the new dataset.

        Raises:
            DatasetExistsError: The id exists and ``overwrite`` is False.
            TypeError: A keyword argument that is no StoreOptions field (named), or ``options`` of another type.
            ValueError: A bad dataset id or store option.
        """
        parse_dataset_id(dataset_id)
        resolved = merge_store_options(options, option_overrides, "EpisodeStore.create()")
        return cls.create_at(
            dataset_path(dataset_id, resolve_root(root)), dataset_id, observation_space, action_space,
            env_spec=env_spec, eval_env_spec=eval_env_spec, metadata=metadata, overwrite=overwrite,
            frame_stack=frame_stack, options=resolved,
        )

    @classmethod
    def create_at(
        cls,
        path: Path,
        dataset_id: str,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        env_spec: Any = None,
        eval_env_spec: Any = None,
        metadata: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        frame_stack: int | FrameStack | None = None,
        options: StoreOptions | None = None,
        **option_overrides: Any,
    ) -> EpisodeStore:
        """:meth:`create` in the directory ``path``, for building a dataset in a staging folder.

        Combine, import and Minari's buffers build a dataset under a hidden staging name (``path``, from
        ``vcollect.store.layout.staging``) and rename it to ``dataset_id``'s place when it is whole; ``path``
        is taken as it is (the id is not resolved to a folder).

        Args:
            path: The directory to create the dataset in.
            dataset_id: The id recorded in its ``dataset.json``.
            observation_space: As :meth:`create`'s.
            action_space: As :meth:`create`'s.
            env_spec: As :meth:`create`'s.
            eval_env_spec: As :meth:`create`'s.
            metadata: As :meth:`create`'s.
            overwrite: As :meth:`create`'s.
            frame_stack: As :meth:`create`'s.
            options: As :meth:`create`'s.
            **option_overrides: As :meth:`create`'s.

        Returns:
            A writer for the new dataset at ``path``.

        Raises:
            DatasetExistsError: ``path`` holds a dataset and ``overwrite`` is False.
            TypeError: A keyword argument that is no StoreOptions field (named).
            ValueError: A bad store option.
        """
        resolved = merge_store_options(options, option_overrides, "EpisodeStore.create_at()")
        info = new_dataset_info(dataset_id, observation_space, action_space, env_spec=env_spec,
                                eval_env_spec=eval_env_spec, metadata=metadata)
        if (stack := frame_stack_of(frame_stack, observation_space)) is not None:
            info["frame_stack"] = stack.to_json()
        # Fail on unsupported spaces before touching the disk.
        store = cls(path, dataset_id, observation_space, action_space, resolved, frame_stack=stack)
        create_dataset_dir(path, dataset_id, info, overwrite=overwrite)
        store._held, store._identity = hold_dataset_dir(path, dataset_id, store._root())
        return store

    @classmethod
    def open(
        cls,
        dataset_id: str,
        root: str | os.PathLike[str] | None = None,
        *,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        options: StoreOptions | None = None,
        **option_overrides: Any,
    ) -> EpisodeStore:
        """Open an existing dataset to append episodes (a new writer; existing shards are never touched).

        Temporary shard files that crashed writers left behind are removed (never those of a writer still
        running).

        Args:
            dataset_id: The dataset's id.
            root: The datasets folder (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``).
            observation_space: If given, must equal the stored observation space.
            action_space: If given, must equal the stored action space.
            options: How the store writes (:class:`StoreOptions`); the defaults when None.
            **option_overrides: Any StoreOptions field by name; each overrides the field of ``options``.

        Returns:
            A writer appending to the dataset.

        Raises:
            DatasetNotFoundError: No such dataset (naming the id and the root searched).
            SpaceMismatchError: A given space differs from the stored one.
            TypeError: A keyword argument that is no StoreOptions field (named), or ``options`` of another type.
            ValueError: A bad dataset id or store option.
        """
        parse_dataset_id(dataset_id)
        resolved = merge_store_options(options, option_overrides, "EpisodeStore.open()")
        root_path = resolve_root(root)
        return cls.open_at(
            dataset_path(dataset_id, root_path), dataset_id, root_path, observation_space=observation_space,
            action_space=action_space, options=resolved,
        )

    @classmethod
    def open_at(
        cls,
        path: Path,
        dataset_id: str,
        root_path: Path,
        *,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        options: StoreOptions | None = None,
        **option_overrides: Any,
    ) -> EpisodeStore:
        """:meth:`open` of the dataset directory ``path`` under ``root_path``, for a dataset in a staging folder.

        ``path`` is taken as it is (a staging folder :meth:`create_at` made); the temporary shard files of
        dead writers are removed.

        Args:
            path: The dataset directory.
            dataset_id: The id its ``dataset.json`` records.
            root_path: The datasets root ``path`` lies under.
            observation_space: As :meth:`open`'s.
            action_space: As :meth:`open`'s.
            options: As :meth:`open`'s.
            **option_overrides: As :meth:`open`'s.

        Returns:
            A writer appending to the dataset at ``path``.

        Raises:
            DatasetNotFoundError: No dataset at ``path``.
            SpaceMismatchError: A given space differs from the stored one.
            TypeError: A keyword argument that is no StoreOptions field (named).
            ValueError: A bad store option.
        """
        resolved = merge_store_options(options, option_overrides, "EpisodeStore.open_at()")
        stored_obs, stored_act = open_dataset_dir(path, dataset_id, root_path, observation_space, action_space)
        stack = FrameStack.from_json(read_dataset_info(path, dataset_id, root_path).get("frame_stack"))
        store = cls(path, dataset_id, stored_obs, stored_act, resolved, frame_stack=stack)
        store._held, store._identity = hold_dataset_dir(path, dataset_id, store._root())
        return store

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_made_in", None) is not None and not self._closed:  # _made_in: set when __init__ finished
            self.close_unclosed("garbage-collected without close()")

    def close_unclosed(self, why: str) -> None:
        """Commit the pending episodes of a store nobody closed, and close it (vcollect.exit_commits).

        Runs at interpreter exit for a store still open then, and when an open store is garbage-collected.
        Background commits in flight are waited for (at most ``EXIT_WAIT_S`` seconds each), the rest is
        committed inline. What cannot be committed is reported with an EpisodesLostWarning counting its
        episodes and steps and saying why. A store made in another process (a forked child's copy) is left
        alone; its parent commits it.

        Args:
            why: How the store was left, for the warning.
        """
        if self._closed or os.getpid() != self._made_in:
            return
        self._commits.timeout = min(self._commits.timeout, EXIT_WAIT_S)
        try:
            try:
                self._apply(self._commits.settle(block=True))
            finally:
                # at interpreter exit no thread can be started any more: commit the rest in this one
                self._commits.background = False
            self.close()
        except Exception as exc:
            self._closed = True
            episodes = self._pending.episodes + sum(job.pending.episodes for job in self._unsettled())
            steps = self._pending.steps + sum(job.pending.steps for job in self._unsettled())
            warnings.warn(
                f"EpisodeStore for {self._dataset_id!r} was {why}: {episodes} episodes ({steps} steps) could not "
                f"be committed and are lost ({type(exc).__name__}: {exc}); close the store (or use it in a "
                "with block) to see such errors where they happen",
                EpisodesLostWarning,
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
    def identity(self) -> Identity | None:
        """What tells the dataset this store writes to from one made again at its place (see
        dataset_dir.read_identity); None before create/open."""
        return self._identity

    @property
    def options(self) -> StoreOptions:
        """How this store writes (the StoreOptions it was made with, keyword overrides applied)."""
        return self._options

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
        """Episodes written but not yet committed to a shard (background commits in flight included)."""
        self._reap(raise_errors=False)
        return self._pending.episodes + sum(job.pending.episodes for job in self._unsettled())

    @property
    def pending_steps(self) -> int:
        """Steps written but not yet committed to a shard (background commits in flight included)."""
        self._reap(raise_errors=False)
        return self._pending.steps + sum(job.pending.steps for job in self._unsettled())

    @property
    def committed_episodes(self) -> int:
        """Episodes this writer has committed to shards."""
        self._reap(raise_errors=False)
        return self._committed_episodes

    @property
    def committed_steps(self) -> int:
        """Steps this writer has committed to shards."""
        self._reap(raise_errors=False)
        return self._committed_steps

    @property
    def shards_written(self) -> list[Path]:
        """Paths of the shards this writer has committed, in order."""
        self._reap(raise_errors=False)
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

        Args:
            observations: Nested batch of T+1 rows.
            actions: Nested batch of T rows.
            rewards: (T,) floats.
            terminations: (T,) bools.
            truncations: (T,) bools.
            seed: The seed the episode's reset took (None: unseeded).
            env_id: The env that ran it.
            infos: (Nested) dict of arrays with T or T+1 rows (structure fixed by the first episode).
            extras: The same, for per-step values a hook computed.
            metadata: Per-episode scalars (or fixed-shape arrays, strings) stored as columns of the
                ``episodes/`` table.
            options: The reset options (JSON-able).

        Raises:
            DatasetError: The store is closed.
            ValueError: An array of the wrong shape or dtype, or a seed that does not fit in 64 bits.
            InfoStructureError: Infos, extras or metadata whose structure differs from the first episode's.
        """
        if self._closed:
            raise DatasetError(f"EpisodeStore for {self._dataset_id!r} is closed")
        rew, terms, truncs = episode_steps(rewards, terminations, truncations)
        steps = rew.shape[0]
        obs_copies = copy_leaves("observations", self._obs_leaves, self._obs_shapes,
                                 flatten_batch(self.observation_space, observations), steps + 1)
        act_copies = copy_leaves("actions", self._act_leaves, self._act_shapes,
                                 flatten_batch(self.action_space, actions), steps)
        # Infos, extras and metadata are checked against the structure the first episode fixed.
        trees, structures, meta, meta_fields = side_data(self._schemas, self._metadata, infos, extras, metadata, steps)
        seed_value, seed_valid = episode_seed(seed)
        options_json = None if options is None else to_json(options, "options")
        obs_copies = batch_frames(obs_copies, [steps], self._frame_stack, self._committed_episodes + self._pending.episodes)

        if seed_valid and (
            (seed_value >= 2**63 and self._pending.seed_min < 0) or (seed_value < 0 and self._pending.seed_max >= 2**63)
        ):
            # A shard's seed column is int64, or uint64 when a seed needs 64 bits (Minari's autoseeds do):
            # a negative seed and such a seed cannot share one shard.
            self._commit()
        # Everything validated: only now touch the pending state (the first episode fixes the structure).
        for group in ("infos", "extras"):
            if self._schemas[group].fields is None:
                self._schemas[group].fields = structures.get(group, {})
        if self._metadata.fields is None:
            self._metadata.fields = meta_fields
        self._pending.add_side_data(trees, meta)
        self._pending.append(
            EpisodeRows(obs_copies, act_copies, rew, terms, truncs, [steps]),
            [int(env_id) + self._env_id_offset], [seed_value], [seed_valid], [options_json],
        )
        self._commit_if_full()

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
        """Buffer several completed episodes at once (copied), as ``write_episode`` would one by one.

        Without infos the episodes are appended in one go: for writers that finish many plain episodes (the
        Collector), whose per-episode Python cost this saves. With any info tree they go through
        write_episode one by one, in order.

        Args:
            observations: The episodes' observations concatenated in order (lengths[i] + 1 rows each).
            actions: Their actions concatenated (lengths[i] rows each).
            rewards: Their rewards concatenated.
            terminations: Their terminations concatenated.
            truncations: Their truncations concatenated.
            lengths: The steps of each episode.
            seeds: The seed of each episode's reset (None: unseeded).
            env_ids: The env that ran each episode.
            options: The reset options of each episode (or None for all).
            infos: One info tree (or None) per episode, as write_episode's ``infos=`` (or None for all).

        Raises:
            DatasetError: The store is closed.
            InfoStructureError: The dataset holds episodes with infos, extras or metadata and none are given.
            ValueError: Lists of different lengths, or arrays whose rows do not add up to ``lengths``.
        """
        self._write_batch(observations, actions, rewards, terminations, truncations, lengths, seeds=seeds,
                          env_ids=env_ids, options=options, infos=infos, copy=True)

    def take_episodes(
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
        """``write_episodes`` for arrays handed over (``TakesEpisodes``): the caller never reads or writes them
        again, so arrays already of the stored dtypes are kept without a copy (a collector gathers fresh
        arrays from its rings; copying them again would double the memory traffic of every stored frame).

        Args:
            observations: as ``write_episodes``.
            actions: as ``write_episodes``.
            rewards: as ``write_episodes``.
            terminations: as ``write_episodes``.
            truncations: as ``write_episodes``.
            lengths: as ``write_episodes``.
            seeds: as ``write_episodes``.
            env_ids: as ``write_episodes``.
            options: as ``write_episodes``.
            infos: as ``write_episodes``.

        Raises:
            DatasetError: the store is closed.
            InfoStructureError: as ``write_episodes``.
            ValueError: as ``write_episodes``.
        """
        self._write_batch(observations, actions, rewards, terminations, truncations, lengths, seeds=seeds,
                          env_ids=env_ids, options=options, infos=infos, copy=False)

    def _write_batch(
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
        options: Sequence[Mapping[str, Any] | None] | None,
        infos: Sequence[Mapping[str, Any] | None] | None,
        copy: bool,
    ) -> None:
        if self._closed:
            raise DatasetError(f"EpisodeStore for {self._dataset_id!r} is closed")
        lens, opts, info_list = batch_lists(lengths, seeds, env_ids, options, infos)
        n = len(lens)
        one_by_one = any(info is not None for info in info_list)
        if not one_by_one and (
            self._schemas["infos"].fields or self._schemas["extras"].fields or self._metadata.fields
        ):
            raise InfoStructureError(
                f"dataset {self._dataset_id!r} holds episodes with infos, extras or metadata: write each with "
                "write_episode (or pass their infos)"
            )
        if n == 0:
            return
        steps = int(lens.sum())
        rew, terms, truncs = batch_steps(rewards, terminations, truncations, steps, copy=copy)
        obs_copies = copy_leaves("observations", self._obs_leaves, self._obs_shapes,
                                 flatten_batch(self.observation_space, observations), steps + n, copy=copy)
        act_copies = copy_leaves("actions", self._act_leaves, self._act_shapes,
                                 flatten_batch(self.action_space, actions), steps, copy=copy)
        batch = EpisodeRows(obs_copies, act_copies, rew, terms, truncs, lens.tolist())
        seed_values, valid, given = batch_seeds(seeds)
        if one_by_one or (min([self._pending.seed_min, *given]) < 0 and max([self._pending.seed_max, *given]) >= 2**63):
            # per-episode infos, or negative seeds and seeds that need uint64 (which cannot share a shard):
            # write one by one (write_episode checks each info tree and commits between such seeds)
            for episode, seed, env_id, o, info in zip(batch.episodes(self.observation_space, self.action_space),
                                                      seeds, env_ids, opts, info_list):
                self.write_episode(*episode, seed=seed, env_id=env_id, infos=info, options=o)
            return
        options_json = [None if o is None else to_json(o, "options") for o in opts]
        batch = rows_as_frames(batch, self._frame_stack, self._committed_episodes + self._pending.episodes)
        # Everything validated: only now touch the pending state (no infos, extras or metadata, for good).
        for group in ("infos", "extras"):
            if self._schemas[group].fields is None:
                self._schemas[group].fields = {}
        if self._metadata.fields is None:
            self._metadata.fields = {}
        self._append_in_shards(
            batch, [int(e) + self._env_id_offset for e in env_ids], seed_values, valid, options_json
        )

    def _append_in_shards(
        self, batch: EpisodeRows, env_ids: list[int], seeds: list[int], valid: list[bool], options: list[str | None]
    ) -> None:
        """Append validated episodes to the pending shard, committing it each time it fills (``shard_steps``
        steps or ``shard_bytes`` bytes): a batch larger than a shard becomes several shards, cut between
        episodes (an episode is never split; one longer than a shard fills one by itself)."""
        lengths = np.asarray(batch.lengths, dtype=np.int64)
        sizes = self._pending.episode_nbytes(lengths)
        start, n = 0, len(lengths)
        while start < n:
            full = self._pending.steps + np.cumsum(lengths[start:]) >= self.shard_steps
            if self.shard_bytes is not None:
                full |= self._pending.nbytes + np.cumsum(sizes[start:]) >= self.shard_bytes
            stop = start + int(np.argmax(full)) + 1 if full.any() else n
            # the part left pending is copied, so the rows committed before it can be freed
            part = batch if (start, stop) == (0, n) else batch.select(start, stop, copy=stop == n)
            self._pending.append(part, env_ids[start:stop], seeds[start:stop], valid[start:stop], options[start:stop])
            self._commit_if_full()
            start = stop

    def _commit_if_full(self) -> None:
        """Commit the pending shard once it holds shard_steps steps or shard_bytes bytes (and raise the error
        of a background commit that failed since the last call)."""
        self._reap(raise_errors=True)
        if self._pending.steps >= self.shard_steps or (
            self.shard_bytes is not None and self._pending.nbytes >= self.shard_bytes
        ):
            self._commit()

    def flush(self) -> None:
        """Commit the pending episodes as one shard now, retrying shards whose commit failed, and wait for
        background commits (no-op when nothing is pending, e.g. after close)."""
        self._commit()
        self._apply(self._commits.settle(block=True))
        self._reap(raise_errors=True)

    def close(self) -> None:
        """Commit pending episodes and close; idempotent. Later writes raise DatasetError."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._commits.close()
            if self._held is not None:  # no commit uses it any more
                self._held.close()

    def update_metadata(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        env_spec: Any = None,
        eval_env_spec: Any = None,
    ) -> None:
        """Merge JSON-able ``values`` into the dataset metadata and/or set the (eval) env spec.

        Rewrites ``dataset.json`` atomically. Last writer wins when several processes update the same
        dataset at once.

        Args:
            values: Metadata to merge in (None: leave it as it is).
            env_spec: A gymnasium EnvSpec or its JSON to record (None: leave it as it is).
            eval_env_spec: The same for the evaluation env.
        """
        update_dataset_info(self._path, self._dataset_id, self._root(), metadata=values, env_spec=env_spec,
                            eval_env_spec=eval_env_spec)

    def record_env_spec(self, spec: EnvSpec) -> bool:
        """Record ``spec`` as the dataset's env spec unless it has one (a collector offers its envs' spec:
        vcollect.store.sink.AcceptsEnvSpec). A spec whose kwargs are not JSON-able is skipped.

        Args:
            spec: The envs' spec.

        Returns:
            True when it was recorded.
        """
        spec_json = env_spec_to_record(self._path, self._dataset_id, spec)
        if spec_json is None:
            return False
        self.update_metadata(env_spec=spec_json)
        return True

    def move_to(
        self, dataset_id: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *,
        overwrite: bool = False
    ) -> Path:
        """Commit pending episodes, then rename the whole dataset to ``dataset_id`` (under ``root``).

        For recording into a staging dataset and naming it at the end (``DataCollector.create_dataset``):
        committed shards move with the directory (one rename on the same filesystem), and this store keeps
        writing at the new place. Only safe while no other writer appends to the dataset. With background
        commits, the move waits for the commits in flight first (as :meth:`flush`), so every shard handed
        over lies in the dataset that moves.

        Args:
            dataset_id: The new id, or (a ``pathlib.Path``) the folder the dataset is to be: a dataset of its
                own under the folder's parent, named for the folder (naming.locate_dataset).
            root: The datasets root of an id (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``);
                None with a path.
            overwrite: Replace a dataset there (it is removed only once this one is in place).

        Returns:
            The new path.

        Raises:
            DatasetError: A commit failed (its episodes are kept; nothing moved): flush() retries it.
            DatasetExistsError: A dataset is there and ``overwrite`` is False.
            InvalidDatasetIdError: ``dataset_id`` is a str that is no id.
        """
        name, new_root, new_path = locate_dataset(dataset_id, root, str_paths=False)
        dataset_id = name
        self.flush()  # background commits in flight land before the move: they write through the old place
        if new_path.resolve() == self._path.resolve():
            return self._path
        move_dataset_dir(self._path, new_path, dataset_id, source_root=self._root(), overwrite=overwrite)
        self._path = new_path
        self._shards_dir = new_path / SHARDS_DIR
        self._shards_written = [self._shards_dir / p.name for p in self._shards_written]
        self._dataset_id = dataset_id
        update_dataset_info(new_path, dataset_id, new_root, new_id=dataset_id)
        if self._held is not None:  # no commit is in flight (flushed above): none uses the old descriptor
            self._held.close()
        self._held, self._identity = hold_dataset_dir(new_path, dataset_id, new_root)
        return new_path

    def _root(self) -> Path:
        return self._path.parents[len(self._dataset_id.split("/")) - 1]

    def __repr__(self) -> str:
        return (
            f"EpisodeStore({self._dataset_id!r}, path={str(self._path)!r}, writer={self._writer!r}, "
            f"pending_episodes={self._pending.episodes}, committed_episodes={self._committed_episodes})"
        )

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _new_writer_name() -> str:
        return f"w{os.getpid()}x{uuid.uuid4().hex[:12]}"

    def _commit(self) -> None:
        """Hand the pending episodes over as one shard (after any shards whose commit failed, retried first)."""
        if os.getpid() != self._pid:  # a forked child must not reuse its parent's shard names or commit its jobs
            self._pid = os.getpid()
            self._writer = self._new_writer_name()
            self._commits.forget()
        retry, self._commits.failed = self._commits.failed, []
        for job in retry:
            self._apply(self._commits.submit(job))
        pending = self._pending
        if pending.episodes == 0:
            return
        rows = {group: {name: spec[0] for name, spec in (schema.fields or {}).items()}
                for group, schema in self._schemas.items()}
        now = max(time.time_ns(), self._last_time_ns + 1)
        final = self._shards_dir / shard_name(now, self._writer, self._seq)
        stack = None if self._frame_stack is None else self._frame_stack.to_json()
        layout = shard_layout(self._obs_leaves, self._act_leaves, stack)
        attrs = {"format": SHARD_FORMAT_NAME, "format_version": FORMAT_VERSION, "writer": self._writer,
                 "seq": self._seq, "num_episodes": pending.episodes, "num_steps": pending.steps,
                 LAYOUT_ATTR: json.dumps({**layout, "compression": self.compression})}
        self._last_time_ns = now
        self._seq += 1
        self._pending = PendingShard(frame_leaves(self._obs_leaves, self._frame_stack), self._act_leaves)
        self._apply(self._commits.submit(ShardJob(final, pending, rows, attrs, self.compression, self._path,
                                                  self._dataset_id, self._root(), self._identity, self._writer,
                                                  self._held)))
        if not self._commits.background:
            self._reap(raise_errors=True)

    def _apply(self, done: list[ShardJob]) -> None:
        """Count the shards whose commit finished."""
        for job in done:
            self._committed_episodes += job.pending.episodes
            self._committed_steps += job.pending.steps
            self._shards_written.append(job.final)

    def wait_for_commits(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for background commits in flight, then count those that finished.

        For a watchdog (another thread) that reports what is on disk while the collecting thread is stuck;
        raises nothing (a failed commit is raised by the next flush or close).

        Args:
            timeout: The most seconds to wait.

        Returns:
            Whether every commit has finished (False: one was still running when the wait ended, so
            ``committed_episodes`` may grow by its episodes).
        """
        self._commits.wait(timeout)
        self._reap(raise_errors=False)
        return not self._commits.in_flight

    def _reap(self, raise_errors: bool) -> None:
        """Count background commits that finished; raise the error of one that failed when asked."""
        self._apply(self._commits.settle(block=False))
        if raise_errors:
            error = self._commits.pop_error()
            if error is not None:
                raise error

    def _unsettled(self) -> list[ShardJob]:
        return [*self._commits.in_flight, *self._commits.failed]
