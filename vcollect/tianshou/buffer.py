"""VectorReplayBuffer (and ReplayBuffer): Tianshou's replay-buffer protocol over vcollect's rings.

The transitions stay in a ``VectorRingBuffer`` (``.ring``), which vcollect's Collector writes with its fast
path; nothing is copied into a Tianshou buffer. Indices are Tianshou's (vcollect.tianshou.slots): env ``e``'s
``m``-th transition since the buffer was emptied is ``e * size + m % size``, ``size = ceil(total_size /
buffer_num)``, each env keeping its newest ``size`` transitions, so ``sample``, ``prev``/``next``,
``unfinished_index`` and the whole-buffer arrays Tianshou's return computations read (``rew``, ``done``,
``terminated``, ``truncated``) mean what they mean in Tianshou. Each env's ring has ``2 * size + 1`` rows: it
stores every observation once, a step's next observation being the next row's, so it holds the newest
``size`` transitions whatever their episodes' lengths, in the memory Tianshou spends on ``obs`` and
``obs_next``.

Members of Tianshou's ReplayBuffer that are not implemented raise UnsupportedBufferMethodError (an
AttributeError, so ``hasattr`` is False, as Tianshou's algorithms test for ``update_weight``).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np
import tianshou.data as ts
from tianshou.data import Batch

import vcollect
from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.columns import RingColumns
from vcollect.buffers.ring import ring_columns
from vcollect.errors import UnsupportedBufferMethodError
from vcollect.tianshou.batches import as_nested, batch_of, batch_space, to_batch
from vcollect.tianshou.hdf5 import fill_from_tianshou, layout_of, read_tianshou, to_tianshou
from vcollect.tianshou.infos import RowInfos
from vcollect.tianshou.slots import SlotLayout

__all__ = ["ReplayBuffer", "VectorReplayBuffer"]

_ARRAY_KEYS = ("rew", "terminated", "truncated", "done")
_KEYS = ("obs", "act", "obs_next", "info", *_ARRAY_KEYS)


class VectorReplayBuffer:
    """Tianshou's ``VectorReplayBuffer(total_size, buffer_num)`` over one vcollect ring per env.

    Give it to ``vcollect.tianshou.Collector`` (which sets the envs' spaces), or fill it with ``add`` as
    Tianshou's buffers are filled (spaces taken from the first batch). Differences from Tianshou's, on
    purpose: ``policy`` entries are not stored (a batch's ``policy`` is the empty Batch); each step's ``info``
    is, beside its ring row (``infos``: numbers and arrays keep their dtype, other values are kept as objects),
    written by ``add`` or, for a Collector's steps on envs stepped on request (vcollect's dummy, subprocess
    and Ray backends, and Tianshou's vector envs), by the Collector, which adds ``env_id`` as Tianshou's
    vector envs do; indexing a
    slot that holds no transition raises IndexError instead of returning zeros. As in Tianshou's, ``sample``
    draws from numpy ``RandomState`` generators seeded with ``random_seed`` (the whole buffer's picks each
    draw's sub-buffer by its share of the transitions, then each sub-buffer's own its slots), so a buffer
    given the same transitions samples the same indices; and ``prev``/``next`` walk slots, stopping only at
    a step that ended its episode or at a sub-buffer's oldest/newest transition (a step whose episode a reset
    cut short is followed by the next episode's first step, as in Tianshou's).

    Args:
        total_size: Transitions held in all (``buffer_num`` sub-buffers of ``ceil(total_size / buffer_num)``).
        buffer_num: Sub-buffers: one per env of the collector it is given to.
        stack_num: Frame stacking of ``obs``/``obs_next`` in batches (Tianshou's ``stack_num``).
        ignore_obs_next: Read a batch's ``obs_next`` as Tianshou does when it stores none: the observation (stack)
            at ``next(index)``, which at a step that ended its episode is the step's own. Observations are
            stored once either way.
        save_only_last_obs: Must be False (stack frames with ``stack_num`` instead).
        sample_avail: With ``stack_num > 1``, sample only indices with a whole stack behind them.
        random_seed: Seeds the generators ``sample`` draws with (Tianshou's).
        single: Take ``add``'s batches unbatched when no ``buffer_ids`` are given (Tianshou's ReplayBuffer).

    Raises:
        ValueError: A size under 1, ``stack_num < 1``, or ``save_only_last_obs=True``.
    """

    def __init__(
        self,
        total_size: int,
        buffer_num: int,
        *,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        save_only_last_obs: bool = False,
        sample_avail: bool = False,
        random_seed: int = 42,
        single: bool = False,
    ) -> None:
        if int(buffer_num) < 1 or int(total_size) < 1:
            raise ValueError(f"total_size and buffer_num must be >= 1, got {total_size} and {buffer_num}")
        if int(stack_num) < 1:
            raise ValueError(f"stack_num must be >= 1, got {stack_num}")
        if save_only_last_obs:
            raise ValueError(
                "save_only_last_obs is not supported: store single frames and sample stacks with stack_num"
            )
        size = -(-int(total_size) // int(buffer_num))
        self.buffer_num = int(buffer_num)
        self.stack_num = int(stack_num)
        self.options = {"stack_num": self.stack_num, "ignore_obs_next": bool(ignore_obs_next),
                        "save_only_last_obs": False, "sample_avail": bool(sample_avail)}
        self.ring = VectorRingBuffer(self.buffer_num, capacity=2 * size + 1)
        self.layout = SlotLayout(self.buffer_num, size)
        self.infos = RowInfos(self.buffer_num, 2 * size + 1)
        """Each transition's info, beside its ring row (``info`` of batches)."""
        self._sample_avail = bool(sample_avail)
        self._ignore_obs_next = bool(ignore_obs_next)
        self._single = bool(single)
        self._random_state = np.random.RandomState(random_seed)  # picks each draw's sub-buffer
        self._sub_random_states = [np.random.RandomState(random_seed) for _ in range(self.buffer_num)]
        self._pending = 0  # rows any env may have written since the last sync (0: unknown where changed)

    # ------------------------------------------------------------------ Tianshou's members

    @property
    def maxsize(self) -> int:
        """Slots in all (``buffer_num * size``)."""
        return self.layout.maxsize

    @property
    def size(self) -> int:
        """Slots per sub-buffer."""
        return self.layout.size

    @property
    def subbuffer_edges(self) -> np.ndarray:
        """The first index of each sub-buffer, then ``maxsize``."""
        return np.arange(self.buffer_num + 1) * self.size

    @property
    def last_index(self) -> np.ndarray:
        """Each sub-buffer's newest index (its first slot while empty)."""
        layout = self._synced()
        return np.arange(self.buffer_num) * self.size + np.maximum(layout.count - 1, 0) % self.size

    def __len__(self) -> int:
        return int(self._synced().lengths.sum())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)}, maxsize={self.maxsize}, buffer_num={self.buffer_num})"

    @property
    def rew(self) -> np.ndarray:
        """Every slot's reward (0 where empty): the buffer's own array (do not write it)."""
        return self._synced().rew

    @property
    def terminated(self) -> np.ndarray:
        """Every slot's termination flag: the buffer's own array (do not write it)."""
        return self._synced().terminated

    @property
    def truncated(self) -> np.ndarray:
        """Every slot's truncation flag: the buffer's own array (do not write it)."""
        return self._synced().truncated

    @property
    def done(self) -> np.ndarray:
        """Every slot's ``terminated | truncated``: the buffer's own array (do not write it)."""
        return self._synced().done

    @property
    def obs(self) -> Any:
        """Every slot's observation (zeros where empty): a gathered copy."""
        return self._whole("obs")

    @property
    def obs_next(self) -> Any:
        """Every slot's next observation (zeros where empty): a gathered copy."""
        return self._whole("obs_next")

    @property
    def act(self) -> Any:
        """Every slot's action (zeros where empty): a gathered copy."""
        return self._whole("act")

    @property
    def info(self) -> Batch:
        """Every slot's info (zeros where empty, None in columns of objects): a gathered copy."""
        return self._whole("info")

    def reset(self, keep_statistics: bool = False) -> None:
        """Empty the buffer (every ring, every slot).

        Args:
            keep_statistics: Accepted as Tianshou's is; the running episodes' returns and lengths are the
                collector's (``Collector.reset_buffer`` keeps them).
        """
        self.ring.reset()
        if self.ring.has_spaces:
            self.layout.clear(self._rows.last_rows.copy(), self._rows.writes)
        else:
            self.layout.clear(None)
        self._pending = 0

    def note_written(self, max_rows_written: int) -> None:
        """Tell the buffer that its rings were written (by a collector that knows a bound on it), so the next
        read gives the new transitions their indices by walking only the new rows.

        Args:
            max_rows_written: An upper bound on the rows any one env wrote since the last note (or read).
        """
        self._pending += int(max_rows_written)

    def sample_indices(self, batch_size: int | None) -> np.ndarray:
        """Indices drawn with replacement, as Tianshou's buffers draw them: every index (each env's oldest
        first) for 0, and for None where the buffer has several sub-buffers; none for a negative size.

        A VectorReplayBuffer picks each draw's sub-buffer with probability proportional to its transitions,
        then draws that many slots from each sub-buffer (the indices come grouped by sub-buffer, in order); a
        ReplayBuffer draws its slots directly (None: ``len(self)`` of them).

        Args:
            batch_size: How many.

        Returns:
            The indices (int64).

        Raises:
            ValueError: A positive ``batch_size`` while the buffer is empty.
        """
        layout = self._synced()
        if batch_size is not None and batch_size < 0:
            return np.array([], dtype=np.int64)
        lengths = layout.lengths
        total = int(lengths.sum())
        starts = np.cumsum(lengths) - lengths
        if self._single and batch_size is None:
            batch_size = total
        if self._sample_avail and self.stack_num > 1:
            every = self._every(lengths, starts, total)
            prev = every
            for _ in range(self.stack_num - 2):
                prev = self.prev(prev)
            every = every[prev != self.prev(prev)]
            if not batch_size:
                return every
            if not self._single:
                return self._random_state.choice(every, batch_size).astype(np.int64)
            return self._sub_random_states[0].choice(every, batch_size).astype(np.int64)
        if not batch_size:
            return self._every(lengths, starts, total)
        if total == 0:
            raise ValueError("cannot sample from an empty buffer: collect some steps first")
        if self._single:
            per_env = np.array([batch_size])
        else:
            picked = self._random_state.choice(self.buffer_num, batch_size, p=lengths / total)
            per_env = np.bincount(picked, minlength=self.buffer_num)
        parts = [
            self._sub_random_states[env].choice(int(lengths[env]), int(count)) + env * self.size
            for env, count in enumerate(per_env.tolist()) if count > 0
        ]
        return np.concatenate(parts).astype(np.int64)

    def sample(self, batch_size: int | None) -> tuple[Batch, np.ndarray]:
        """A batch of transitions and their indices (``sample_indices``' draw).

        Args:
            batch_size: How many (0 or None: every transition).

        Returns:
            ``(self[indices], indices)``.
        """
        indices = self.sample_indices(batch_size)
        return self[indices], indices

    def prev(self, index: int | np.ndarray) -> Any:
        """The index of the step before each index (the index itself where the step before ended its episode,
        or at the oldest step held), as Tianshou's ``prev``.

        Args:
            index: An index or an array of them.

        Returns:
            The same shape of indices.
        """
        return self._step(index, -1)

    def next(self, index: int | np.ndarray) -> Any:
        """The index of the step after each index (the index itself at a step that ended its episode, or at
        the newest step held), as Tianshou's ``next``.

        Args:
            index: An index or an array of them.

        Returns:
            The same shape of indices.
        """
        return self._step(index, 1)

    def unfinished_index(self) -> np.ndarray:
        """Each env's newest index unless its step ended the episode (Tianshou's).

        Returns:
            Those indices, ascending.
        """
        layout = self._synced()
        env = np.flatnonzero(layout.count > 0)
        newest = env * self.size + (layout.count[env] - 1) % self.size
        return newest[~layout.done[newest]]

    def get_buffer_indices(self, start: int, stop: int) -> np.ndarray:
        """The indices from ``start`` to ``stop`` (exclusive) inside one sub-buffer, wrapping at its end.

        Args:
            start: The first index.
            stop: One past the last (may be below ``start``: the interval wraps).

        Returns:
            The indices.

        Raises:
            ValueError: ``start`` and ``stop`` lie in different sub-buffers.
        """
        size = self.size
        if start // size != (stop - 1) // size:
            raise ValueError(
                f"start and stop indices must lie in the same sub-buffer (of {size} slots), got {start=}, {stop=}"
            )
        if stop >= start:
            return np.arange(start, stop, dtype=int)
        base = start // size * size
        return np.concatenate([np.arange(start, base + size, dtype=int), np.arange(base, stop, dtype=int)])

    def get(
        self, index: int | list[int] | np.ndarray, key: str, default_value: Any = None, stack_num: int | None = None
    ) -> Any:
        """``key``'s values at ``index``, stacked over the ``stack_num`` steps up to each (oldest first, the
        episode's first repeated before its start), as Tianshou's ``get``.

        Args:
            index: An index or indices.
            key: ``obs``, ``obs_next``, ``act``, ``info``, ``rew``, ``terminated``, ``truncated`` or ``done``.
            default_value: Returned for any other key (None: KeyError).
            stack_num: Stack depth (None: the buffer's).

        Returns:
            An array (a Batch for nested observations).

        Raises:
            KeyError: Another key, without a default.
            IndexError: An index out of range or of an empty slot.
        """
        if key not in _KEYS:
            if default_value is not None:
                return default_value
            raise KeyError(f"{key!r}: vcollect's rings hold {', '.join(_KEYS)}")
        depth = self.stack_num if stack_num is None else int(stack_num)
        indices = np.asarray(index)
        if depth == 1:
            return to_batch(self._values(indices, key))
        frames: list[Any] = []
        for _ in range(depth):
            frames.insert(0, self._values(indices, key))
            indices = self.prev(indices)
        return to_batch(_stack(frames, np.ndim(index)))

    def __getitem__(self, index: Any) -> Batch:
        """The transitions at ``index`` (an index, an array of them, or a slice: ``[:]`` is every one, in
        order) as Tianshou's Batch: obs, act, rew, terminated, truncated, done, obs_next, info, policy."""
        if isinstance(index, slice):
            indices = self.sample_indices(0) if index == slice(None) else np.arange(len(self))[index]
        else:
            indices = index
        if self.stack_num == 1 and not self._ignore_obs_next:
            return self._transitions(indices)
        return Batch(
            obs=self.get(indices, "obs"),
            act=self.get(indices, "act", stack_num=1),
            rew=self._values(np.asarray(indices), "rew"),
            terminated=self._values(np.asarray(indices), "terminated"),
            truncated=self._values(np.asarray(indices), "truncated"),
            done=self._values(np.asarray(indices), "done"),
            obs_next=self.get(self.next(indices), "obs") if self._ignore_obs_next else self.get(indices, "obs_next"),
            info=self.get(indices, "info"),
            policy=Batch(),
        )

    def add(self, batch: Batch, buffer_ids: np.ndarray | list[int] | None = None) -> tuple[np.ndarray, ...]:
        """Add one step per sub-buffer of ``buffer_ids`` (all, in order, by default), as Tianshou's ``add``.

        A step continues its sub-buffer's episode unless that episode ended (or none began): then it starts
        one. Its ``obs`` becomes the observation the step starts from; ``obs_next`` (optional) its next
        observation, which the following step's ``obs`` replaces while the episode goes on (as Tianshou reads
        ``obs_next`` from the next step where it is not stored).

        Args:
            batch: ``obs``, ``act``, ``rew``, ``terminated``, ``truncated`` and optionally ``obs_next``, batched
                along ``buffer_ids`` (one unbatched step for a ReplayBuffer without ``buffer_ids``).
            buffer_ids: The sub-buffers.

        Returns:
            ``(indices, episode returns, episode lengths, episode start indices)``, one per sub-buffer; the
            return and length are 0 where the episode goes on.

        Raises:
            ValueError: A required key is missing, or a batch key holds values the rings cannot store.
        """
        missing = {"obs", "act", "rew", "terminated", "truncated"} - set(batch.get_keys())
        if missing:
            raise ValueError(f"add needs the batch keys obs, act, rew, terminated, truncated; missing {sorted(missing)}")
        ids = np.arange(self.buffer_num) if buffer_ids is None else np.asarray(buffer_ids, dtype=np.intp).reshape(-1)
        lead = self._single and buffer_ids is None  # one unbatched step: give it its batch axis
        value = {key: _with_axis(as_nested(batch[key]), lead) for key in batch.get_keys() if key in _KEYS}
        info = value.pop("info", {})
        ring = self.ring
        if not ring.has_spaces:
            ring.bind_spaces(batch_space(value["obs"], "obs"), batch_space(value["act"], "act"))
            self.layout.clear(self._rows.last_rows.copy(), self._rows.writes)
        self._synced()
        rows = self._rows
        running = rows.running()[ids]
        if not running.all():
            ring.start_episodes(ids[~running], _select(value["obs"], ~running))
        if running.any():  # the newest row of a running env holds no step yet: its observation is replaced
            rows.write_observations(rows.last_rows[ids[running]], _select(value["obs"], running))
        rew = np.asarray(value["rew"], dtype=np.float64).reshape(len(ids))
        term = np.asarray(value["terminated"]).reshape(len(ids)).astype(bool)
        trunc = np.asarray(value["truncated"]).reshape(len(ids)).astype(bool)
        self.infos.write_batched(self._rows.last_rows[ids], info)
        ring.add(ids, value["act"], rew, term, trunc, value.get("obs_next", value["obs"]))
        self.note_written(2)
        layout, size = self._synced(), self.size
        base = ids * size
        ended = term | trunc
        lengths = ring.episode_lengths[ids]
        returns = np.where(ended, ring.episode_returns[ids], 0.0)
        return (
            base + (layout.count[ids] - 1) % size,
            returns,
            np.where(ended, lengths, 0),
            base + (layout.count[ids] - lengths) % size,
        )

    def update(self, buffer: Any) -> np.ndarray:
        """Append another buffer's transitions, its oldest first, as Tianshou's ``ReplayBuffer.update``: each
        takes the next slot and continues the episode of the one before unless that one ended it.

        Observations are stored once (a step's next observation is the following step's observation): where
        the other buffer holds a step whose next observation differs from the following step's observation
        with no episode end between them (an episode cut by a reset), the step reads the following step's
        observation as its ``obs_next`` here, where Tianshou keeps its own copy.

        Args:
            buffer: A ReplayBuffer of this module or Tianshou's (``self`` included).

        Returns:
            The indices the transitions took, in order (empty if the other buffer is empty).

        Raises:
            UnsupportedBufferMethodError: On a buffer of more than one sub-buffer (as Tianshou's
                VectorReplayBuffer, which raises NotImplementedError, this error is one).
        """
        if self.buffer_num != 1:
            raise UnsupportedBufferMethodError(
                f"{type(self).__name__}.update merges into a buffer of one sub-buffer (a ReplayBuffer), as "
                f"Tianshou's does; this one has {self.buffer_num} (vcollect {vcollect.__version__})"
            )
        if len(buffer) == 0:
            return np.array([], dtype=int)
        stack_num, buffer.stack_num = buffer.stack_num, 1
        try:
            indices = buffer.sample_indices(0)
            steps = buffer[indices]
            if isinstance(steps.obs_next, Batch) and not steps.obs_next.get_keys():  # a buffer without obs_next
                steps.obs_next = buffer[buffer.next(indices)].obs
        finally:
            buffer.stack_num = stack_num
        updated = np.empty(len(indices), dtype=int)
        for i in range(len(indices)):
            step = steps[i : i + 1]
            updated[i] = self.add(Batch(
                obs=step.obs, act=step.act, rew=step.rew, terminated=step.terminated, truncated=step.truncated,
                obs_next=step.obs_next, info=step.info,
            ), buffer_ids=[0])[0][0]
        return updated

    @property
    def is_single(self) -> bool:
        """Whether ``add`` takes one unbatched step without ``buffer_ids`` (a ReplayBuffer)."""
        return self._single

    def save_hdf5(self, path: str, compression: str | None = None) -> None:
        """Save in Tianshou's HDF5 layout: Tianshou's ``load_hdf5`` reads the file as the Tianshou buffer of the
        same transitions at the same indices (a ReplayBuffer or VectorReplayBuffer).

        Args:
            path: The file to write.
            compression: h5py's compression of every array (e.g. "gzip").
        """
        to_tianshou(self).save_hdf5(path, compression=compression)

    @classmethod
    def load_hdf5(cls, path: str, device: str | None = None) -> VectorReplayBuffer:
        """Load a buffer saved by Tianshou's ``save_hdf5`` (or this class's) into vcollect's rings.

        Args:
            path: The HDF5 file.
            device: Accepted as Tianshou's is (tensors in the file are read as arrays).

        Returns:
            The buffer: the file's transitions at their indices.
        """
        return cls.from_tianshou(read_tianshou(path))

    @classmethod
    def from_tianshou(cls, source: Any) -> VectorReplayBuffer:
        """A buffer holding a Tianshou ReplayBuffer's or VectorReplayBuffer's transitions at their indices.

        Args:
            source: The Tianshou buffer.

        Returns:
            The new buffer (same size and sub-buffers, stack_num).
        """
        size, num, single = layout_of(source)
        buffer = cls(size * num, num, stack_num=source.stack_num, single=single)
        fill_from_tianshou(buffer, source)
        return buffer

    @classmethod
    def from_data(
        cls, obs: Any, act: Any, rew: Any, terminated: Any, truncated: Any, done: Any, obs_next: Any
    ) -> VectorReplayBuffer:
        """A ReplayBuffer of the given per-step arrays (h5py datasets, as Tianshou's ``from_data``), in order.

        Args:
            obs: Observations.
            act: Actions.
            rew: Rewards.
            terminated: Termination flags.
            truncated: Truncation flags.
            done: Either flag (as Tianshou takes it).
            obs_next: Next observations.

        Returns:
            One sub-buffer of ``len(obs)`` slots holding them.
        """
        return cls.from_tianshou(ts.ReplayBuffer.from_data(obs, act, rew, terminated, truncated, done, obs_next))

    def hasnull(self) -> bool:
        """Whether a NaN was stored (observations, actions, rewards) since the buffer was last emptied."""
        return self._synced().has_null

    if not TYPE_CHECKING:  # at run time only, so that mypy still checks every attribute of the class

        def __getattr__(self, name: str) -> Any:
            """Members of Tianshou's ReplayBuffer not implemented here: a specific error naming them."""
            if name.startswith("__"):
                raise AttributeError(name)
            raise UnsupportedBufferMethodError(
                f"{type(self).__name__}.{name} is not implemented by vcollect {vcollect.__version__}'s Tianshou "
                "replay-buffer adapter (vcollect.tianshou); it implements sample, sample_indices, indexing, get, "
                "prev, next, unfinished_index, get_buffer_indices, add, update, reset, hasnull, save_hdf5/load_hdf5/"
                "from_data and the rew/done/terminated/truncated/obs/act/obs_next/info arrays"
            )

    # ------------------------------------------------------------------ internals

    @property
    def _rows(self) -> RingColumns:
        """The ring's rows by flat index (its spaces bound)."""
        return ring_columns(self.ring)

    def _synced(self) -> SlotLayout:
        """The layout, brought up to date with the rings' writes (rebuilt where the writer is unknown)."""
        if self.ring.has_spaces and self.layout.changed(self._rows):
            self.layout.sync(self._rows, self._pending or None)
        self._pending = 0
        return self.layout

    def _every(self, lengths: np.ndarray, starts: np.ndarray, total: int) -> np.ndarray:
        """Every held index, env by env, each env's oldest first."""
        env = np.repeat(np.arange(self.buffer_num), lengths)
        return self._indices_of(env, np.arange(total) - starts[env], lengths)

    def _indices_of(self, env: np.ndarray, age: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The index of each env's ``age``-th oldest held step."""
        count = self.layout.count[env]
        return (env * self.size + (count - lengths[env] + age) % self.size).astype(np.int64)

    def _flat(self, index: Any) -> np.ndarray:
        """Indices as an intp array in [0, maxsize) (negative ones counted from the end), else IndexError."""
        indices = np.asarray(index)
        if indices.dtype.kind not in "iu":
            if indices.size:
                raise IndexError(f"indices must be integers, got {index!r}")
            indices = indices.astype(np.intp)
        if indices.size and (indices.max() >= self.maxsize or indices.min() < -self.maxsize):
            raise IndexError(f"index out of range for a buffer of {self.maxsize} slots: {index!r}")
        return indices.astype(np.intp) % self.maxsize

    def _row_of(self, indices: np.ndarray) -> np.ndarray:
        """The ring row of each index's transition, else IndexError."""
        rows = self._synced().row_of[indices]
        if rows.size and rows.min() < 0:
            empty = indices[rows < 0].reshape(-1)[:8].tolist()
            raise IndexError(f"slots {empty} hold no transition yet (len={len(self)}): index with sampled indices")
        return rows

    def _values(self, index: np.ndarray, key: str) -> Any:
        """``key`` at the indices ``index`` (any shape)."""
        indices = self._flat(index)
        if key in _ARRAY_KEYS:
            self._row_of(indices)
            return getattr(self.layout, key)[indices]
        rows = self._row_of(indices)
        if key == "info":
            return self.infos.read(rows)
        if key == "obs":
            return self._rows.observations(rows)
        if key == "obs_next":
            return self._rows.observations(self._rows.next_rows[rows])
        return self._rows.actions(rows)

    def _transitions(self, index: Any) -> Batch:
        """``self[index]`` without frame stacks: each key gathered from the rows the indices look up once."""
        indices = self._flat(index)
        rows = self._row_of(indices)
        layout = self.layout
        flat = self._rows
        return batch_of({
            "obs": flat.observations(rows),
            "act": flat.actions(rows),
            "rew": layout.rew[indices],
            "terminated": layout.terminated[indices],
            "truncated": layout.truncated[indices],
            "done": layout.done[indices],
            "obs_next": flat.observations(flat.next_rows[rows]),
            "info": self.infos.read(rows),
            "policy": Batch(),
        })

    def _whole(self, key: str) -> Any:
        """``key`` at every slot, zeros where empty."""
        layout = self._synced()
        filled = layout.row_of >= 0
        rows = np.where(filled, layout.row_of, 0)
        if key == "obs_next":
            rows = self._rows.next_rows[rows]
        if key == "info":
            values = self.infos.read(rows)
        else:
            values = self._rows.actions(rows) if key == "act" else self._rows.observations(rows)
        return to_batch(_zero_where(values, ~filled))

    def _step(self, index: int | np.ndarray, direction: int) -> Any:
        """prev (direction -1) or next (+1) of Tianshou's index: the neighbouring slot of the sub-buffer's held
        ones, unless a step ending an episode or the sub-buffer's newest step lies between (an index of an
        empty slot is its own)."""
        scalar = np.ndim(index) == 0
        indices = self._flat(index).reshape(-1) if not scalar else self._flat([operator.index(index)])  # type: ignore[arg-type]
        layout = self._synced()
        size = self.size
        env, slot = np.divmod(indices, size)
        base = env * size
        held = np.maximum(layout.lengths[env], 1)
        newest = np.maximum(layout.count[env] - 1, 0) % size
        if direction > 0:
            stop = layout.done[indices] | (slot == newest)
            moved = (slot + 1 - stop) % held
        else:
            before = (slot - 1) % held
            stop = layout.done[base + before] | (before == newest)
            moved = (before + stop) % held
        result = np.where(layout.row_of[indices] >= 0, base + moved, indices)
        if scalar:
            return int(result[0])
        return result.reshape(np.shape(index))


def ReplayBuffer(size: int, **kwargs: Any) -> VectorReplayBuffer:  # noqa: N802  (Tianshou's class name)
    """Tianshou's ``ReplayBuffer(size)``: one sub-buffer, whose ``add`` takes one unbatched step.

    Args:
        size: Transitions held.
        **kwargs: VectorReplayBuffer's keyword options (stack_num, sample_avail, random_seed, ...).

    Returns:
        A VectorReplayBuffer of one sub-buffer.
    """
    return VectorReplayBuffer(size, 1, single=True, **kwargs)


def _with_axis(value: Any, lead: bool) -> Any:
    """``value`` (nested) with a leading batch axis of 1 added where ``lead``."""
    if not lead:
        return value
    if isinstance(value, dict):
        return {key: _with_axis(item, lead) for key, item in value.items()}
    return np.asarray(value)[None]


def _select(value: Any, mask: np.ndarray) -> Any:
    """The rows of a nested batched value where ``mask``."""
    if isinstance(value, dict):
        return {key: _select(item, mask) for key, item in value.items()}
    return np.asarray(value)[mask]


def _stack(frames: list[Any], axis: int) -> Any:
    """Nested values stacked along ``axis``."""
    if isinstance(frames[0], dict):
        return {key: _stack([frame[key] for frame in frames], axis) for key in frames[0]}
    return np.stack(frames, axis=axis)


def _zero_where(value: Any, empty: np.ndarray) -> Any:
    """A nested value with the rows of empty slots zeroed (None for objects)."""
    if isinstance(value, dict):
        return {key: _zero_where(item, empty) for key, item in value.items()}
    value[empty] = None if value.dtype == object else 0
    return value
