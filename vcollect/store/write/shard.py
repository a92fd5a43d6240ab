"""One shard file: the episodes a writer has accepted but not committed, and how they reach the disk.

A shard is one HDF5 file of columns: observation/action leaves (Text leaves as UTF-8 strings), rewards and flags (rows of all its
episodes concatenated), ``infos/`` and ``extras/`` columns, and the ``episodes/`` table (one row per
episode: offsets, length, return, env id, seed, options, metadata). It is built in memory, written to a
temporary name with plain file writes, fsynced and renamed, so a committed shard is always whole and a
full disk is an OSError, not a crash.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from vcollect.spaces import Leaf, unflatten_batch
from vcollect.store.layout.manifest import ShardFactsRecorder
from vcollect.store.layout.shard_format import column_path
from vcollect.store.layout.staging import shard_tmp_path
from vcollect.store.write.compression import Compression, column_filter
from vcollect.text_leaves import ENCODING_ATTR, encode_utf8

__all__ = ["EpisodeRows", "PendingShard", "write_shard"]

#: One column of a shard: its HDF5 path, values and attributes.
Column = tuple[str, np.ndarray, dict[str, Any]]


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


def _encode_strings(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "U":
        encoded = np.char.encode(arr, "utf-8")
        return encoded if encoded.dtype.itemsize else encoded.astype("S1")
    return arr


def _row_bytes(leaf_list: list[Leaf]) -> int:
    return sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaf_list)


@dataclass(frozen=True)
class EpisodeRows:
    """Validated copies of episodes' arrays, concatenated in episode order (observation leaves: T+1 rows
    per episode; action leaves, rewards, terminations and truncations: T rows)."""

    obs: list[np.ndarray]
    acts: list[np.ndarray]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    lengths: list[int]

    def select(self, start: int, stop: int, copy: bool) -> EpisodeRows:
        """Episodes ``start`` to ``stop`` (exclusive) of these.

        Args:
            start: The first episode taken.
            stop: One past the last episode taken.
            copy: Copy the rows (so the rest can be freed while these are kept), else views.

        Returns:
            Their rows, in order.
        """
        lengths = self.lengths[start:stop]
        first_step = sum(self.lengths[:start])
        last_step = first_step + sum(lengths)
        steps, rows = slice(first_step, last_step), slice(first_step + start, last_step + stop)

        def take(arr: np.ndarray, part: slice) -> np.ndarray:
            return arr[part].copy() if copy else arr[part]

        return EpisodeRows([take(a, rows) for a in self.obs], [take(a, steps) for a in self.acts],
                           take(self.rewards, steps), take(self.terminations, steps), take(self.truncations, steps),
                           list(lengths))

    def episodes(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> Iterator[tuple[Any, ...]]:
        """(observations, actions, rewards, terminations, truncations) of each episode, in order."""
        step = row = 0
        for length in self.lengths:
            yield (unflatten_batch(observation_space, [a[row : row + length + 1] for a in self.obs]),
                   unflatten_batch(action_space, [a[step : step + length] for a in self.acts]),
                   self.rewards[step : step + length], self.terminations[step : step + length],
                   self.truncations[step : step + length])
            step += length
            row += length + 1


class PendingShard:
    """Validated episodes waiting to be committed, kept as column parts (copies) in episode order."""

    def __init__(self, obs_leaves: list[Leaf], act_leaves: list[Leaf]) -> None:
        self._obs_leaves = obs_leaves
        self._act_leaves = act_leaves
        self._obs_store_dtypes = [_int_storage_dtype(leaf) for leaf in obs_leaves]
        self._act_store_dtypes = [_int_storage_dtype(leaf) for leaf in act_leaves]
        # bytes of one observation / action row in the space dtypes (the pending-bytes estimate)
        self._obs_row_bytes = _row_bytes(obs_leaves)
        self._act_row_bytes = _row_bytes(act_leaves)
        self.clear()

    def clear(self) -> None:
        """Drop everything pending (after a commit)."""
        self._obs: list[list[np.ndarray]] = [[] for _ in self._obs_leaves]
        self._act: list[list[np.ndarray]] = [[] for _ in self._act_leaves]
        self._rew: list[np.ndarray] = []
        self._term: list[np.ndarray] = []
        self._trunc: list[np.ndarray] = []
        self._trees: dict[str, dict[str, list[np.ndarray]]] = {"infos": {}, "extras": {}}
        self._meta: dict[str, list[np.ndarray]] = {}
        self._lengths: list[int] = []
        self._returns: list[float] = []
        self._env_ids: list[int] = []
        self._seeds: list[int] = []
        self._seed_valid: list[bool] = []
        self.seed_min = 0  # over the valid pending seeds (0 when none)
        self.seed_max = 0
        self._options: list[str | None] = []
        self.episodes = 0
        self.steps = 0
        self.nbytes = 0

    def episode_nbytes(self, lengths: np.ndarray) -> np.ndarray:
        """What :meth:`append` adds to ``nbytes`` for episodes of these lengths, one value per episode."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return 10 * lengths + (lengths + 1) * self._obs_row_bytes + lengths * self._act_row_bytes

    def add_side_data(self, trees: Mapping[str, Mapping[str, np.ndarray]], metadata: Mapping[str, np.ndarray]) -> None:
        """The infos/extras columns and metadata values of the one episode appended next."""
        for group, arrays in trees.items():
            pending = self._trees[group]
            for name, arr in arrays.items():
                pending.setdefault(name, []).append(arr)
                self.nbytes += arr.nbytes
        for name, value in metadata.items():
            self._meta.setdefault(name, []).append(value)

    def append(
        self,
        rows: EpisodeRows,
        env_ids: list[int],
        seeds: list[int],
        seed_valid: list[bool],
        options_json: list[str | None],
    ) -> None:
        """Add validated episodes with one env id, seed (valid or not) and options JSON each."""
        rew, lengths = rows.rewards, rows.lengths
        for parts, arr in zip(self._obs, rows.obs):
            parts.append(arr)
        for parts, arr in zip(self._act, rows.acts):
            parts.append(arr)
        self._rew.append(rew)
        self._term.append(rows.terminations)
        self._trunc.append(rows.truncations)
        start = 0
        for length in lengths:  # np.add.reduce: ``rew[a:b].sum()``'s pairwise sum without its Python wrapper
            self._returns.append(float(np.add.reduce(rew[start : start + length])))
            start += length
        self._lengths.extend(lengths)
        self._env_ids.extend(env_ids)
        self._seeds.extend(seeds)
        self._seed_valid.extend(seed_valid)
        given = [seed for seed, valid in zip(seeds, seed_valid) if valid]
        if given:
            self.seed_min = min(self.seed_min, *given)
            self.seed_max = max(self.seed_max, *given)
        self._options.extend(options_json)
        n, steps = len(lengths), start
        self.episodes += n
        self.steps += steps
        # rewards (float64) and the two flag columns, then the copied observation and action rows
        self.nbytes += 10 * steps + (steps + n) * self._obs_row_bytes + steps * self._act_row_bytes

    def columns(self, tree_rows: Mapping[str, Mapping[str, str]]) -> Iterator[Column]:
        """The pending episodes as the columns of one shard, made one at a time (so a commit holds one
        concatenated column besides the parts); ``tree_rows[group][name]`` is "obs" or "step"."""
        for prefix, leaf_list, pending, store_dtypes in (
            ("observations", self._obs_leaves, self._obs, self._obs_store_dtypes),
            ("actions", self._act_leaves, self._act, self._act_store_dtypes),
        ):
            for leaf, parts, small in zip(leaf_list, pending, store_dtypes):
                arr = np.concatenate(parts).astype(leaf.dtype, copy=False)
                if arr.dtype.kind == "U":  # a Text leaf: HDF5 strings in UTF-8, as Minari stores them
                    yield (column_path(prefix, leaf.name), encode_utf8(arr), {ENCODING_ATTR: "utf-8"})
                    continue
                if small is not None and arr.size:
                    info = np.iinfo(small.type)  # type: ignore[type-var]
                    if info.min <= int(arr.min()) and int(arr.max()) <= info.max:
                        arr = arr.astype(small)
                yield (column_path(prefix, leaf.name), arr, {})
        rewards = np.concatenate(self._rew)
        with np.errstate(over="ignore", invalid="ignore"):
            rewards32 = rewards.astype(np.float32)
        if np.array_equal(rewards32, rewards):
            rewards = rewards32
        yield ("rewards", rewards, {})
        yield ("terminations", np.concatenate(self._term), {})
        yield ("truncations", np.concatenate(self._trunc), {})
        for group, pending_tree in self._trees.items():
            for name, parts in pending_tree.items():
                arr = np.concatenate(parts)
                attrs: dict[str, Any] = {"rows": tree_rows[group][name]}
                if arr.dtype.kind == "U":
                    attrs["encoding"] = "utf-8"
                yield (f"{group}/{name}", _encode_strings(arr), attrs)
        lengths = np.asarray(self._lengths, dtype=np.int64)
        step_offset = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=step_offset[1:])
        yield ("episodes/obs_offset", step_offset + np.arange(len(lengths), dtype=np.int64), {})
        yield ("episodes/step_offset", step_offset, {})
        yield ("episodes/length", lengths, {})
        yield ("episodes/return", np.asarray(self._returns, dtype=np.float64), {})
        yield ("episodes/env_id", np.asarray(self._env_ids, dtype=np.int64), {})
        seed_dtype = np.uint64 if self.seed_max >= 2**63 else np.int64
        seeds = [s if valid else 0 for s, valid in zip(self._seeds, self._seed_valid)]
        yield ("episodes/seed", np.asarray(seeds, dtype=seed_dtype), {})
        yield ("episodes/seed_valid", np.asarray(self._seed_valid, dtype=np.bool_), {})
        if any(o is not None for o in self._options):
            opts = np.array(["null" if o is None else o for o in self._options])
            yield ("episodes/options", _encode_strings(opts), {"encoding": "utf-8", "json": True})
        for name, values in self._meta.items():
            arr = np.stack(values)
            attrs = {"encoding": "utf-8"} if arr.dtype.kind == "U" else {}
            yield (f"episodes/metadata/{name}", _encode_strings(arr), attrs)


def _shard_image(
    columns: Iterable[Column], attrs: Mapping[str, Any], compression: Compression,
    facts: ShardFactsRecorder | None = None,
) -> io.BytesIO:
    """The whole shard file built in memory: HDF5 does no disk I/O (a write error inside HDF5 on a full disk
    crashes the process in its cleanup instead of raising). Each column's filter: compression.column_filter.
    ``facts``: told each column once it is written (its data's place in the file is fixed then)."""
    image = io.BytesIO()
    with h5py.File(image, "w") as f:
        f.attrs.update(attrs)
        for path, arr, column_attrs in columns:
            ds = f.create_dataset(path, data=arr, **column_filter(compression, arr))
            for key, value in column_attrs.items():
                ds.attrs[key] = value
            if facts is not None:
                facts.add(path, ds, arr)
    return image


def _write_new_file(path: Path, data: memoryview, dir_fd: int | None) -> None:
    """Create ``path`` (it must not exist) holding ``data``, fsynced; OSError (ENOSPC, EIO...) as the OS gives it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
    try:
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_shard(
    final: Path, columns: Iterable[Column], attrs: Mapping[str, Any], compression: Compression,
    dir_fd: int | None = None, facts: ShardFactsRecorder | None = None,
) -> str:
    """Write a shard file at ``final`` through a temporary name (see ``staging.shard_tmp_path``): build it in
    memory, write and fsync it with plain file writes, rename. Returns the file's SHA-256 (hex), taken from
    the image in memory so the manifest need not read the file back.

    With ``dir_fd`` (an open directory: the writer's dataset directory) ``final`` is relative to it, and
    both the temporary file and the rename stay inside that directory whatever is at its path now.
    On any error the temporary file is removed and the error raised; nothing exists at ``final`` then.
    ``facts`` records the columns as they are written, for the shard's manifest line.
    """
    image = _shard_image(columns, attrs, compression, facts)
    tmp = shard_tmp_path(final)
    try:
        with image.getbuffer() as view:
            digest = hashlib.sha256(view).hexdigest()
            _write_new_file(tmp, view, dir_fd)
        os.replace(tmp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return digest
