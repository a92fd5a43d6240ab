"""EpisodeStore: append completed episodes to a dataset as crash-safe, columnar HDF5 shards.

Layout (docs/ARCHITECTURE.md, "On disk")::

    <root>/<namespace>/<name>-vN/
      dataset.json                               id, format version, spaces, env spec, metadata
      shards/<commit-time>-<writer>-<seq>.h5     immutable once committed

Episodes are buffered in memory (copies, because callers pass views of ring buffers) and
committed as one shard when ``shard_steps`` steps (or ``shard_bytes`` bytes) are pending, on
``flush()`` and on ``close()``. A shard is built in memory, written to ``<name>.h5.<space>.tmp``,
fsynced, renamed and the directory fsynced, so a crash leaves every committed shard whole and at most
the pending episodes lost; a commit that fails (a full disk) raises DatasetError and keeps the pending
episodes for the next flush(). Each store instance has its own writer name (pid + uuid), so many
processes append to one dataset without coordinating; the next writer to open a dataset removes the
temporary files of crashed ones, and a writer whose dataset was deleted or replaced fails its next commit.

This module validates and routes episodes; ``dataset_info`` owns ``dataset.json``, ``schema`` the
info/extras/metadata structure checks and ``shard`` the pending columns and the shard file write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DiskFullError,
    InfoStructureError,
    SpaceMismatchError,
)
from vcollect.spaces import Leaf, flatten_batch, leaves, unflatten_batch
from vcollect.store.dataset_info import (
    DATASET_FILE,
    FORMAT_VERSION,
    SHARD_SUFFIX,
    SHARDS_DIR,
    dataset_spaces,
    fsync_dir,
    new_dataset_info,
    read_dataset_info,
    update_dataset_info,
    write_json_atomic,
)
from vcollect.store.manifest import record_commit
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.schema import MetadataSchema, TreeSchema, flatten_columns, to_json
from vcollect.store.shard import SHARD_FORMAT_NAME, EpisodeRows, PendingShard, write_shard
from vcollect.store.staging import remove_stale_json_tmps, remove_stale_shard_tmps

# DATASET_FILE stays importable from here for vcollect.cli, which imported it from this module.
__all__ = ["APPEND_HINT", "DATASET_FILE", "OVERWRITE_HINT", "EpisodeStore"]

#: What a DatasetExistsError tells Python callers to do (the CLI says its flags instead).
OVERWRITE_HINT = "pass overwrite=True to replace it"
APPEND_HINT = "EpisodeStore.open() to append to it"

# errnos of a write that failed for want of space (a full disk, or a quota)
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def _make_dirs(path: Path, made: list[Path]) -> None:
    """``mkdir -p path``, appending each directory it creates to ``made`` (outermost first)."""
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to remove
        made.append(directory)


class EpisodeStore:
    """Writer appending completed episodes to one dataset as columnar HDF5 shards.

    Make one with :meth:`create` (new dataset) or :meth:`open` (append to an existing one); use it as a
    context manager or call :meth:`close`. Not thread-safe; use one store per thread or process.
    """

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
        self._pid = os.getpid()
        self._writer = self._new_writer_name()
        self._seq = 0
        self._last_time_ns = 0
        self._closed = False
        self._identity: tuple[int, int, str | None] | None = None  # set by create/open: see _check_identity
        self._schemas = {"infos": TreeSchema("infos"), "extras": TreeSchema("extras")}
        self._metadata = MetadataSchema()
        self._committed_episodes = 0
        self._committed_steps = 0
        self._shards_written: list[Path] = []
        self._pending = PendingShard(self._obs_leaves, self._act_leaves)

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
        return cls._create_at(
            dataset_path(dataset_id, resolve_root(root)), dataset_id, observation_space, action_space,
            env_spec=env_spec, eval_env_spec=eval_env_spec, metadata=metadata, shard_steps=shard_steps,
            shard_bytes=shard_bytes, compression=compression, overwrite=overwrite, env_id_offset=env_id_offset,
        )

    @classmethod
    def _create_at(
        cls,
        path: Path,
        dataset_id: str,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        env_spec: Any = None,
        eval_env_spec: Any = None,
        metadata: Mapping[str, Any] | None = None,
        shard_steps: int = 100_000,
        shard_bytes: int | None = 256 * 2**20,
        compression: str | int | None = None,
        overwrite: bool = False,
        env_id_offset: int = 0,
    ) -> EpisodeStore:
        """:meth:`create` in the directory ``path`` (for combine/import, which build a dataset under a
        hidden staging name and rename it to ``dataset_id``'s place at the end)."""
        info = new_dataset_info(dataset_id, observation_space, action_space, env_spec=env_spec,
                                eval_env_spec=eval_env_spec, metadata=metadata)
        # Fail on unsupported spaces before touching the disk.
        store = cls(path, dataset_id, observation_space, action_space, shard_steps=shard_steps,
                    shard_bytes=shard_bytes, compression=compression, env_id_offset=env_id_offset)
        exists = (path / DATASET_FILE).exists()
        if exists and not overwrite:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} already exists at {str(path)!r}; {OVERWRITE_HINT} or {APPEND_HINT}"
            )
        if exists:
            shutil.rmtree(path)
        made: list[Path] = []
        try:
            _make_dirs(path / SHARDS_DIR, made)
            write_json_atomic(path / DATASET_FILE, info, exclusive=not overwrite)
        except FileExistsError:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} was created at {str(path)!r} by someone else meanwhile"
            ) from None
        except OSError as exc:
            for directory in reversed(made):  # only what this call made, and only while empty
                with contextlib.suppress(OSError):
                    directory.rmdir()
            if exc.errno not in _NO_SPACE:
                raise
            raise DiskFullError(
                f"no space left on device while creating dataset {dataset_id!r} at {str(path)!r}; "
                "nothing was created"
            ) from exc
        fsync_dir(path.parent)
        store._identity = store._read_identity()
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
        added to every env id this writer stores (see :attr:`env_id_offset`). Temporary shard files that
        crashed writers left behind are removed (never those of a writer still running).
        """
        parse_dataset_id(dataset_id)
        root_path = resolve_root(root)
        return cls._open_at(
            dataset_path(dataset_id, root_path), dataset_id, root_path, observation_space=observation_space,
            action_space=action_space, shard_steps=shard_steps, shard_bytes=shard_bytes, compression=compression,
            env_id_offset=env_id_offset,
        )

    @classmethod
    def _open_at(
        cls,
        path: Path,
        dataset_id: str,
        root_path: Path,
        *,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        shard_steps: int = 100_000,
        shard_bytes: int | None = 256 * 2**20,
        compression: str | int | None = None,
        env_id_offset: int = 0,
    ) -> EpisodeStore:
        """:meth:`open` of the dataset directory ``path``; removes the temporary shard files of dead writers."""
        stored_obs, stored_act = dataset_spaces(read_dataset_info(path, dataset_id, root_path))
        for what, given, stored in (
            ("observation", observation_space, stored_obs),
            ("action", action_space, stored_act),
        ):
            if given is not None and given != stored:
                raise SpaceMismatchError(
                    f"dataset {dataset_id!r} stores {what} space {stored}, but {given} was given"
                )
        (path / SHARDS_DIR).mkdir(exist_ok=True)
        remove_stale_shard_tmps(path / SHARDS_DIR)
        remove_stale_json_tmps(path)
        store = cls(path, dataset_id, stored_obs, stored_act, shard_steps=shard_steps,
                    shard_bytes=shard_bytes, compression=compression, env_id_offset=env_id_offset)
        store._identity = store._read_identity()
        return store

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and hasattr(self, "_pending") and self._pending.episodes > 0:
            warnings.warn(
                f"EpisodeStore for {self._dataset_id!r} was garbage-collected without close(); "
                f"{self._pending.episodes} pending episodes were not committed",
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
        return self._pending.episodes

    @property
    def pending_steps(self) -> int:
        """Steps written but not yet committed to a shard."""
        return self._pending.steps

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
                arrays = flatten_columns(tree, group) if tree else {}
                structures[group] = self._schemas[group].check(arrays, steps)
                trees[group] = {name: np.array(arr) for name, arr in arrays.items()}
        meta: dict[str, np.ndarray] = {}
        meta_fields: dict[str, tuple[str, tuple[int, ...]]] = {}
        if metadata or self._metadata.fields:
            meta, meta_fields = self._metadata.check(metadata)
        if seed is None:
            seed_value, seed_valid = -1, False
        else:
            seed_value, seed_valid = int(seed), True
            if not -(2**63) <= seed_value < 2**64:
                raise ValueError(f"seed {seed_value} does not fit in 64 bits (int64 or uint64)")
        options_json = None if options is None else to_json(options, "options")

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
            self._schemas["infos"].fields or self._schemas["extras"].fields or self._metadata.fields
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
        batch = EpisodeRows(obs_copies, act_copies, rew, terms, truncs, lens.tolist())
        seed_values = [-1 if seed is None else int(seed) for seed in seeds]
        valid = [seed is not None for seed in seeds]
        given = [v for v, ok in zip(seed_values, valid) if ok]
        if given and not (min(given) >= -(2**63) and max(given) < 2**64):
            raise ValueError(f"seeds {given} do not all fit in 64 bits (int64 or uint64)")
        if one_by_one or (min([self._pending.seed_min, *given]) < 0 and max([self._pending.seed_max, *given]) >= 2**63):
            # per-episode infos, or negative seeds and seeds that need uint64 (which cannot share a shard):
            # write one by one (write_episode checks each info tree and commits between such seeds)
            self._write_each(batch, seeds, env_ids, opts, info_list)
            return
        options_json = [None if o is None else to_json(o, "options") for o in opts]
        # Everything validated: only now touch the pending state (no infos, extras or metadata, for good).
        for group in ("infos", "extras"):
            if self._schemas[group].fields is None:
                self._schemas[group].fields = {}
        if self._metadata.fields is None:
            self._metadata.fields = {}
        self._pending.append(
            batch, [int(e) + self._env_id_offset for e in env_ids], seed_values, valid, options_json
        )
        self._commit_if_full()

    def _commit_if_full(self) -> None:
        """Commit the pending shard once it holds shard_steps steps or shard_bytes bytes."""
        if self._pending.steps >= self.shard_steps or (
            self.shard_bytes is not None and self._pending.nbytes >= self.shard_bytes
        ):
            self._commit()

    def _write_each(
        self,
        batch: EpisodeRows,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None],
        infos: Sequence[Mapping[str, Any] | None],
    ) -> None:
        """write_episodes' arrays written episode by episode with write_episode."""
        step = row = 0
        for length, seed, env_id, opts, info in zip(batch.lengths, seeds, env_ids, options, infos):
            self.write_episode(
                unflatten_batch(self.observation_space, [a[row : row + length + 1] for a in batch.obs]),
                unflatten_batch(self.action_space, [a[step : step + length] for a in batch.acts]),
                batch.rewards[step : step + length],
                batch.terminations[step : step + length],
                batch.truncations[step : step + length],
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
        update_dataset_info(self._path, self._dataset_id, self._root(), metadata=values, env_spec=env_spec,
                            eval_env_spec=eval_env_spec)

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
                    f"dataset {dataset_id!r} already exists at {str(new_path)!r}; {OVERWRITE_HINT}"
                )
            shutil.rmtree(new_path)
        new_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self._path, new_path)
        except OSError:  # another filesystem: copy, then delete (not atomic, but nothing is lost)
            shutil.move(str(self._path), str(new_path))
        fsync_dir(new_path.parent)
        self._path = new_path
        self._shards_dir = new_path / SHARDS_DIR
        self._shards_written = [self._shards_dir / p.name for p in self._shards_written]
        self._dataset_id = dataset_id
        update_dataset_info(new_path, dataset_id, self._root(), new_id=dataset_id)
        self._identity = self._read_identity()
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

    def _read_identity(self) -> tuple[int, int, str | None]:
        """What tells this dataset from one deleted and made again at its place: the directory's device and
        inode, and the creation time its dataset.json records."""
        info = read_dataset_info(self._path, self._dataset_id, self._root())
        st = os.stat(self._path)
        return st.st_dev, st.st_ino, info.get("created_at")

    def _check_identity(self) -> None:
        """DatasetError when the dataset was deleted, moved or replaced since this writer opened it."""
        if self._identity is None:
            return
        try:
            same = self._read_identity() == self._identity
        except (DatasetError, OSError):
            same = False
        if not same:
            raise DatasetError(
                f"dataset {self._dataset_id!r} at {str(self._path)!r} was deleted, moved or replaced since this "
                f"writer opened it: nothing was committed, and the {self._pending.episodes} pending episodes "
                "stay in memory only (open the dataset again with a new writer to store new episodes)"
            )

    def _commit(self) -> None:
        pending = self._pending
        if pending.episodes == 0:
            return
        self._check_identity()
        if os.getpid() != self._pid:  # a forked child must not reuse its parent's shard names
            self._pid = os.getpid()
            self._writer = self._new_writer_name()
        rows = {group: {name: spec[0] for name, spec in (schema.fields or {}).items()}
                for group, schema in self._schemas.items()}
        now = max(time.time_ns(), self._last_time_ns + 1)
        final = self._shards_dir / f"{now:020d}-{self._writer}-{self._seq:06d}{SHARD_SUFFIX}"
        attrs = {"format": SHARD_FORMAT_NAME, "format_version": FORMAT_VERSION, "writer": self._writer,
                 "seq": self._seq, "num_episodes": pending.episodes, "num_steps": pending.steps}
        try:
            write_shard(final, pending.columns(rows), attrs, self.compression)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
                raise DiskFullError(
                    f"no space left on device while committing shard {str(final)!r} of dataset "
                    f"{self._dataset_id!r} ({exc}); committed shards are intact, {pending.episodes} pending "
                    "episodes are kept in memory; free space and call flush() again"
                ) from exc
            raise DatasetError(
                f"could not commit shard {str(final)!r} of dataset {self._dataset_id!r}: {exc}. "
                f"Committed shards are intact; the {pending.episodes} pending episodes are kept "
                "in memory and flush() can be retried"
            ) from exc
        record_commit(self._path, final, self._writer)  # manifest entry (store/manifest.py); never raises
        self._last_time_ns = now
        self._seq += 1
        self._committed_episodes += pending.episodes
        self._committed_steps += pending.steps
        self._shards_written.append(final)
        pending.clear()
        fsync_dir(self._shards_dir)
