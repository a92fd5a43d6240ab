"""The index a loaded dataset's views share: all shards' episode tables as one, episodes decoded, rows gathered.

Episode ids are global: shards in the order given (by file name, commit time first), then row.
``EpisodeData`` is what decoding one episode gives.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.spaces import Leaf, leaves, unflatten_batch
from vcollect.store.layout.dataset_info import dataset_spaces
from vcollect.store.layout.shard_format import column_path
from vcollect.store.read.shards.shard_reader import OpenShardFiles, ShardOpener, StoredShard, decode_column
from vcollect.store.read.shards.zstd_frames import StretchBatch
from vcollect.store.write.frame_stack import FrameStack, rebuild_episode, stack_rows

__all__ = ["DatasetIndex", "EpisodeData", "FramesInFlight"]


@dataclass(frozen=True, eq=False)
class EpisodeData:
    """One stored episode: T+1 observations, T actions/rewards/flags, infos/extras, seed and env id.

    Attributes:
        id: The episode's index in the dataset.
        observations: T+1 rows (nested for Dict/Tuple spaces).
        actions: T rows (nested for Dict/Tuple spaces).
        rewards: (T,) floats.
        terminations: (T,) bools.
        truncations: (T,) bools.
        infos: The per-step infos recorded with it (name -> array, nested).
        extras: The per-step arrays an episode hook computed (name -> array).
        seed: The seed its reset took; None when unseeded.
        env_id: The env that ran it.
        options: The options its reset took; None when there were none.
        metadata: Its per-episode metadata.
        late_metadata: The part of ``metadata`` set after the fact under keys its shard does not store
            (copies write it to the new dataset's episode_metadata.json, as keys may differ between
            episodes there).
    """

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
    late_metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        """Number of steps T."""
        return int(self.rewards.shape[0])

    def __repr__(self) -> str:
        return (
            f"EpisodeData(id={self.id}, steps={len(self)}, seed={self.seed}, env_id={self.env_id}, "
            f"return={float(self.rewards.sum()):.6g})"
        )


class DatasetIndex:
    """Everything a Dataset view shares: shards, global episode table, spaces, open files and the sampling cache."""

    def __init__(
        self,
        dataset_id: str,
        path: Path,
        info: dict[str, Any],
        shards: list[StoredShard],
        max_open_files: int,
        late_metadata: dict[str, dict[int, dict[str, Any]]] | None = None,
        before_open: ShardOpener | None = None,
    ) -> None:
        self.dataset_id = dataset_id
        #: metadata set after the fact (episode_metadata.json): {shard file name: {row: metadata}}
        self.late_metadata = late_metadata or {}
        self.path = path
        self.info = info
        self.observation_space, self.action_space = dataset_spaces(info)
        self.obs_leaves = leaves(self.observation_space)
        #: frames stored once, stacks rebuilt on read (store/write/frame_stack.py); None for plain observations
        self.frame_stack = FrameStack.from_json(info.get("frame_stack"))
        self.act_leaves = leaves(self.action_space)
        self.shards = shards
        self.files = OpenShardFiles(max_open_files, before_open)
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
        self._cache_size: int | None = None
        self._cache_lock = threading.Lock()
        self._rewards: tuple[np.ndarray, np.ndarray] | None = None
        #: per observation column, the arrays gather_obs_runs filled last (reused when nothing refers to them)
        self._run_buffers: dict[str, list[np.ndarray]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (e.g. into a DataLoader worker) without the sampling cache, its lock or open files: the
        copy rebuilds them on use, so no process reads through another's file handles."""
        state = self.__dict__.copy()
        state["_cache"], state["_cache_lock"], state["_rewards"] = None, None, None
        state["_run_buffers"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
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

        obs_values = leaf_values("observations", self.obs_leaves, obs_rows)
        if self.frame_stack is not None:
            obs_values = [rebuild_episode(frames, self.frame_stack) for frames in obs_values]
        observations = unflatten_batch(self.observation_space, obs_values)
        actions = unflatten_batch(self.action_space, leaf_values("actions", self.act_leaves, step_rows))
        trees: dict[str, dict[str, Any]] = {}
        for group, cols in shard.tree_columns.items():
            tree: dict[str, Any] = {}
            for key, col in cols.items():
                value = decode_column(read(col.path, obs_rows if col.attrs.get("rows") == "obs" else step_rows), col.attrs)
                node = tree
                *parents, last = key.split("/")
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = value
            trees[group] = tree
        options = None
        if shard.options is not None:
            options = json.loads(shard.options[row])
        metadata = self.metadata_at(shard, row)
        late = {k: metadata[k] for k in self.late_metadata.get(shard.path.name, {}).get(row, {}) if k not in shard.metadata}
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
            late_metadata=late,
        )

    def episode_column(self, episode_id: int, name: str, obs_rows: bool) -> np.ndarray:
        """One column's rows of one episode as stored (a frame stack's single frames, not rebuilt): its T+1
        observation rows (``obs_rows``) or T step rows; no other column is read."""
        shard, row = self.locate(episode_id)
        s = int(self.shard_of[episode_id])
        first = int(shard.obs_offset[row] if obs_rows else shard.step_offset[row])
        return self.files.read(s, shard, name, slice(first, first + int(shard.length[row]) + int(obs_rows)))
    def step_rewards(self) -> tuple[np.ndarray, np.ndarray]:
        """Every step's reward in global step order, and their running sums with a leading 0 (for
        returns-to-go); read once, shard by shard, and kept."""
        if self._rewards is None:
            rewards = np.empty(self.total_steps)
            for s, shard in enumerate(self.shards):
                rewards[self.step_base[s] : self.step_base[s + 1]] = self.files.read(s, shard, "rewards", slice(None))
            cum = np.zeros(rewards.size + 1)
            np.cumsum(rewards, out=cum[1:])
            self._rewards = rewards, cum
        return self._rewards

    def locate(self, episode_id: int) -> tuple[StoredShard, int]:
        """(shard, row) of one episode by global id."""
        if not 0 <= episode_id < self.total_episodes:
            raise IndexError(f"episode id {episode_id} out of range [0, {self.total_episodes})")
        s = int(self.shard_of[episode_id])
        return self.shards[s], episode_id - int(self.shard_first_episode[s])

    def metadata_at(self, shard: StoredShard, row: int) -> dict[str, Any]:
        """An episode's metadata: what its shard stores, overlaid by what was set after the fact."""
        metadata = {key: (col[row].item() if col.ndim == 1 else np.array(col[row])) for key, col in shard.metadata.items()}
        for key, value in self.late_metadata.get(shard.path.name, {}).get(row, {}).items():
            metadata[key] = np.asarray(value) if isinstance(value, list) else value
        return metadata

    def minari_episode_metadata(self, episode_id: int) -> dict[str, Any]:
        """What Minari's ``get_episode_metadata`` gives for one episode: id, seed, total_steps, options and
        the episode's metadata, without reading its steps."""
        shard, row = self.locate(episode_id)
        out: dict[str, Any] = {"id": episode_id, "total_steps": int(shard.length[row])}
        if shard.seed_valid[row]:
            out["seed"] = int(shard.seed[row])
        if shard.options is not None:
            options = json.loads(shard.options[row])
            if options is not None:
                out["options"] = options
        return {**out, **self.metadata_at(shard, row)}

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
        """Bytes the in-memory copy of the sampled columns of all shards takes (or would take); computed once
        (the shards do not change), as every gather asks."""
        if self._cache_size is None:
            self._cache_size = self._columns_nbytes()
        return self._cache_size

    def _columns_nbytes(self) -> int:
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

    def gather_obs(self, name: str, dtype: np.dtype[Any], rows: np.ndarray, starts: np.ndarray,
                   cache_bytes: int) -> np.ndarray:
        """Observations at global observation `rows` of episodes starting at `starts`, stacks rebuilt."""
        stack = self.frame_stack
        if stack is None:
            return self.gather(name, dtype, self.row_groups(rows, True), cache_bytes)
        frame_rows, padded = stack_rows(rows, starts, stack.k)
        frames = self.gather(name, dtype, self.row_groups(frame_rows.reshape(-1), True), cache_bytes)
        out = frames.reshape(*frame_rows.shape, *frames.shape[1:])
        if stack.padding == "zero" and padded.any():
            out[padded] = 0
        return out

    def gather_obs_windows(self, name: str, dtype: np.dtype[Any], parts: list[np.ndarray], starts: np.ndarray,
                           cache_bytes: int) -> list[np.ndarray]:
        """Observations of windows, each window's global observation rows in one episode starting at ``starts``:
        ``parts`` are (batch, m_i) row arrays (a window's observations, its next observations), each returned
        (batch, m_i, ...), stacks rebuilt. The stored rows (frames) a window's parts cover, a contiguous run,
        are read once per window, and every part is gathered from them by index."""
        batch = len(starts)
        k = 1 if self.frame_stack is None else self.frame_stack.k
        widths = [part.shape[1] for part in parts]
        rows = np.concatenate([np.asarray(part, dtype=np.int64) for part in parts], axis=1)
        if rows.size == 0:
            flat = self.gather_obs(name, dtype, rows.reshape(-1), np.repeat(starts, rows.shape[1]), cache_bytes)
            return [flat.reshape(batch, width, *flat.shape[1:]) for width in widths]
        padded = None
        if k > 1:
            frame_rows, pad = stack_rows(rows.reshape(-1), np.repeat(starts, rows.shape[1]), k)
            frames = frame_rows.reshape(batch, -1)
            if self.frame_stack is not None and self.frame_stack.padding == "zero" and pad.any():
                padded = pad.reshape(batch, -1, k)
        else:
            frames = rows
        low = frames.min(axis=1)
        count = frames.max(axis=1) + 1 - low
        offsets = np.cumsum(count) - count
        read = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(low - offsets, count)  # each run, in turn
        stored = self.gather(name, dtype, self.row_groups(read, True), cache_bytes)
        at = (frames - (low - offsets)[:, None]).reshape(batch, rows.shape[1], k)
        out, begin = [], 0
        for width in widths:
            where = at[:, begin : begin + width]
            part = stored[where if k > 1 else where[..., 0]]
            if padded is not None:
                part[padded[:, begin : begin + width]] = 0
            out.append(part)
            begin += width
        return out

    def gather_obs_runs(self, name: str, dtype: np.dtype[Any], first: np.ndarray, starts: np.ndarray, count: int,
                        cache_bytes: int, pending: list[FramesInFlight] | None = None) -> np.ndarray:
        """(batch, ``count``, ...) stored observation rows (single frames, for a ``frame_stack`` dataset): for
        each window the ``count`` consecutive global rows from ``first``, inside the episode beginning at global
        row ``starts`` (each run must end there). Rows before the episode's first read as its first (the reset
        stack's padding), or 0 for ``padding="zero"`` frame stacks. Each run is read once, as a run.

        The result is a view of rows ``m`` to ``m + count`` of a (batch, count + 2m, ...) array, m the rows a
        compressed column's chunk holds beyond one where that is at most a quarter of ``count`` (else 0, as
        from the sampling cache): each window's chunks are then decoded straight into its slot, whole, the
        rows of its first and last chunk outside the run landing in the m rows on either side. The arrays of
        the last two calls are kept, and one is filled again by a call of the same shape when nothing refers to
        it any more (no view of it left, which its reference count tells), so a training loop writes into memory
        already mapped instead of faulting in fresh pages.

        Given a ``pending`` list, frames that decode threads are still decoding when this returns are left
        in flight: a FramesInFlight is appended, and the result must not be read before its ``finish()`` (or
        used at all after its ``cancel()``); the caller does other work meanwhile."""
        batch = len(first)
        first = np.asarray(first, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        skip = np.maximum(starts - first, 0)  # rows of each run before its episode
        cache = self.cache(cache_bytes)
        lows = first + skip
        which = np.searchsorted(self.obs_base, lows, side="right") - 1
        stacked = self.files.stacked_tables(name, self.shards) if cache is None and batch else None
        if stacked is not None:  # every shard's runs planned at once
            touched: list[int] = []
            margin = stacked.rows_per_chunk - 1
        else:
            touched = np.unique(which).tolist() if cache is None and batch else []
            margin = max([self.files.run_margin(s, self.shards[s], name) for s in touched], default=0)
        if 4 * margin > count:  # chunks long against a window: copied out of a scratch buffer instead
            margin = 0
            if stacked is not None:
                stacked, touched = None, np.unique(which).tolist()
        slot = count + 2 * margin
        frames = self._run_buffer(name, (batch, slot, *self._row_shape(name)), dtype)
        out = frames[:, margin : margin + count]
        self._run_buffers.setdefault(name, []).append(frames)
        if cache is not None:
            rows = np.maximum(first[:, None] + np.arange(count, dtype=np.int64), starts[:, None])
            np.take(cache[name], rows.reshape(-1), axis=0, out=frames.reshape(batch * count, *frames.shape[2:]))
            self._pad_before_episodes(out, skip, False)
            return out
        if not batch:
            return out
        flat = frames.reshape(batch * slot, *frames.shape[2:])
        places = np.arange(batch, dtype=np.int64) * slot + margin + skip
        together = self.files.runs_batch(flat)  # every shard's frames: threads decode them as they come
        in_flight = None if together is None else FramesInFlight(self.files, together, name,
                                                                 lambda: self._pad_before_episodes(out, skip, True))
        try:
            if stacked is not None and together is not None:
                self.files.read_runs_stacked(name, self.shards, stacked, which, lows - self.obs_base.take(which),
                                             count - skip, places, together)
            for s in touched:
                sel = np.flatnonzero(which == s)
                self.files.read_runs_into(s, self.shards[s], name, lows[sel] - self.obs_base[s],
                                          count - skip[sel], flat, places[sel], margin, together)
        except BaseException:
            if in_flight is not None:
                in_flight.cancel()
            raise
        if in_flight is None:
            self._pad_before_episodes(out, skip, True)
        elif pending is not None and together is not None and together.helping:
            pending.append(in_flight)
        else:
            in_flight.finish()
        return out

    def _pad_before_episodes(self, out: np.ndarray, skip: np.ndarray, copy_first: bool) -> None:
        """The ``skip[i]`` rows of window i before its episode: copies of the episode's first row
        (``copy_first``: read from the files, which gave only the episode's rows), or 0 for ``padding="zero"``
        frame stacks."""
        held = np.flatnonzero(skip)
        if not held.size:
            return
        if copy_first:
            owner = np.repeat(held, skip[held])
            within = np.arange(owner.size) - np.repeat(np.cumsum(skip[held]) - skip[held], skip[held])
            out[owner, within] = out[owner, skip[owner]]
        if self.frame_stack is not None and self.frame_stack.padding == "zero":
            out[np.arange(out.shape[1]) < skip[:, None]] = 0

    def _run_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An array of ``shape``: one of the last two :meth:`gather_obs_runs` filled for column ``name`` that is
        of that shape and referred to by nothing else (the list taken out of the dict first, so two threads
        never share one), else a new one. Two, so that ``batch = ds.sample_slices(...)`` in a loop, which
        still holds the previous batch during the call, finds the one before it free."""
        kept = self._run_buffers.pop(name, [])
        chosen, others = None, []
        while kept:
            array = kept.pop()
            # two references: ``array`` and getrefcount's argument; any view handed out (a batch's) adds one
            if chosen is None and array.shape == shape and array.dtype == dtype and sys.getrefcount(array) == 2:
                chosen = array
            else:
                others.append(array)
        del kept
        if chosen is None:
            chosen = np.empty(shape, dtype=dtype)
        self._run_buffers[name] = others[:1]
        return chosen

    def row_groups(self, rows: np.ndarray, obs_rows: bool, window: int = 1) -> RowGroups:
        """Global observation (``obs_rows``) or step rows split by shard, for gathers of several columns
        (``window``: see :class:`RowGroups`)."""
        return RowGroups(rows, self.obs_base if obs_rows else self.step_base, window)

    def gather(self, name: str, dtype: np.dtype[Any], groups: RowGroups, cache_bytes: int) -> np.ndarray:
        """The rows of ``groups`` of one column, from the cache or else shard by shard in file order."""
        cache = self.cache(cache_bytes)
        if cache is not None:
            return cache[name][groups.rows]
        out = np.empty((len(groups.rows), *self._row_shape(name)), dtype=dtype)
        if self.files.before_open is not None:  # a dataset read in place: every shard's part fetched at once
            self.files.fetch_ahead(name, [(s, self.shards[s], local) for s, _, local in groups.parts])
        for s, where, local in groups.parts:
            self.files.read_into(s, self.shards[s], name, local, out, where)
        return out


class RowGroups:
    """Global rows of one kind split by shard once: per shard touched, (shard, places in the batch, its rows),
    rows ascending (file order). Several columns gathered at the same rows share one split. With ``window`` > 1,
    the rows are windows of that many, each window's rows in one shard (a slice's steps): the windows are
    ordered by their first row, each window's rows kept together (one sort of the windows, not of every row)."""

    def __init__(self, rows: np.ndarray, base: np.ndarray, window: int = 1) -> None:
        self.rows = rows
        if window > 1 and rows.size % window == 0:
            windows = np.argsort(rows[::window], kind="stable")
            order = (windows[:, None] * window + np.arange(window)).reshape(-1)
        else:
            order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        which = np.searchsorted(base, ordered, side="right") - 1
        cuts = (np.flatnonzero(which[1:] != which[:-1]) + 1).tolist()
        self.parts = [(int(which[a]), order[a:b], ordered[a:b] - base[which[a]])
                      for a, b in zip([0, *cuts], [*cuts, len(rows)]) if b > a]


class FramesInFlight:
    """Frames of :meth:`DatasetIndex.gather_obs_runs` that decode threads are still decoding."""

    def __init__(self, files: OpenShardFiles, batch: StretchBatch, name: str, settle: Callable[[], None]) -> None:
        self._files, self._batch, self._name, self._settle = files, batch, name, settle

    def finish(self) -> None:
        """Decode what is left (this thread taking its share), wait for the threads, and fill the rows the
        files do not give (before an episode's first).

        Raises:
            CorruptShardError: A stretch of frames does not decode; the message names its shard.
        """
        try:
            self._files.decode_runs_batch(self._batch, self._name)
        finally:
            self._batch.close()
        self._settle()

    def cancel(self) -> None:
        """Stop the threads, decoding nothing more, and wait for them (the frames are not to be read)."""
        self._batch.close()
