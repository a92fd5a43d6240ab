"""VectorRingBuffer: one ring of rows per env id, written vectorised over env ids once per step.

Row layout: a row holds an observation and, once the policy acted on it, the
action, reward, termination and truncation that followed. An episode of T steps is T+1 consecutive
rows, the last holding only the final observation; consecutive episodes never share a row.

The rows live in a :class:`~vcollect.buffers.columns.RingColumns` (flat columns, each env's position a flat
row index; one 1-D fancy index per array is the cheapest numpy write, which keeps ``add`` and
``start_episodes`` at a few microseconds); the ring holds the running episodes' bookkeeping and writes the
columns, its samplers read them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from vcollect.buffers.checkpoint import CheckpointReader, write_checkpoint
from vcollect.buffers.columns import RingColumns
from vcollect.buffers.episodes import EpisodeEnds, EpisodeSlice, SpilledChunk
from vcollect.buffers.preload import EpisodeSource, check_ring_takes, check_source, preload
from vcollect.buffers.ring_slices import EpisodeTable, gather_slices
from vcollect.buffers.row_writes import scatter_rows, write_columns, write_extras
from vcollect.buffers.sampling import gather_transitions, ring_capacity, sample_rows, transitions_at
from vcollect.errors import BufferNotReadyError, CheckpointMismatchError, CorruptCheckpointError
from vcollect.held_rows import HeldRows
from vcollect.slices import Pad, Stacks, check_slice_request, check_stacks, draw_windows, slice_generator
from vcollect.spaces import flatten_batch, space_from_dict, space_to_dict, unflatten_batch

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["EpisodeEnds", "EpisodeSlice", "RingWriter", "VectorRingBuffer", "ring_columns", "ring_generator"]

#: Members that left VectorRingBuffer for RingWriter (what a collector uses of a ring). They still work on a
#: ring for one release, with a DeprecationWarning naming the new spelling, and are left out of ``dir(ring)``.
_MOVED_TO_RING_WRITER = frozenset({"episode_truncated_in_ring", "keep_whole_episodes", "last_obs", "set_episode_extras"})


class StorageNeedsSpaces:
    """A ring's storage attribute, which ``bind_spaces`` sets on the instance: read before that (a ring made
    without spaces), it raises BufferNotReadyError.

    A class attribute (one object may stand for several such attributes) rather than a ``__getattr__`` on
    the ring: a class with ``__getattr__`` has every attribute read of its instances go through it, which
    the interpreter cannot specialise (about 0.4% of a collect step on the dummy backend, 0.7% with a store).
    """

    __slots__ = ()

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        raise BufferNotReadyError(
            "this VectorRingBuffer was made without spaces: give it to a Collector (which sets its "
            "envs' spaces) or call bind_spaces(observation_space, action_space) before using it"
        )


class VectorRingBuffer:
    """Rings of ``capacity`` rows for ``num_envs`` envs holding observations once, episodes contiguous.

    ``start_episodes`` and ``add`` take distinct env ids in ``[0, num_envs)``; they are the per-step
    hot path and do not re-validate their arguments (``add`` needs a started episode for every id).

    As a replay buffer: ``VectorRingBuffer(total_size=..., num_envs=...)`` (Tianshou's
    ``VectorReplayBuffer(total_size, buffer_num)``) is made without spaces, which the Collector it is given
    to sets; ``sample`` draws with the generator seeded by ``seed``. A ring of c rows holds c - 1 - (episodes
    in it) transitions: each episode's final observation has its own row instead of a copy in every row.

    Args:
        num_envs: How many rings (one per env id).
        capacity: Rows per ring; or give ``total_size`` instead.
        observation_space: The envs' single observation space (None: set later, by a Collector or
            ``bind_spaces``; give both spaces or neither).
        action_space: The envs' single action space.
        keep_overflow: Copy aside the rows of an episode longer than its ring before overwriting them, so
            that :meth:`episode` is always whole.
        total_size: Rows over all rings, as Tianshou's ``total_size`` (capacity: its ceiling over num_envs).
        seed: Seeds the generator ``sample`` draws with.

    Raises:
        ValueError: ``num_envs < 1``, a capacity under 2, both or neither of ``capacity`` and ``total_size``,
            or one space without the other.
    """

    def __init__(
        self,
        num_envs: int,
        capacity: int | None = None,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        *,
        keep_overflow: bool = False,
        total_size: int | None = None,
        seed: int | np.random.SeedSequence | None = None,
    ) -> None:
        capacity = ring_capacity(num_envs, capacity, total_size)
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if int(capacity) < 2:
            raise ValueError(f"capacity must be >= 2 (an episode step needs two rows), got {capacity}")
        self.num_envs = int(num_envs)
        self.capacity = int(capacity)
        self.keep_overflow = bool(keep_overflow)
        self._rng = np.random.default_rng(seed)  # sample()'s generator unless one is passed
        n = self.num_envs  # the per-env state (the rows come with the spaces: _allocate)
        self._ones = np.ones(n, dtype=np.int64)  # adding an array is cheaper than adding the scalar 1
        self._all_true = np.ones(n, dtype=bool)  # and writing an array cheaper than writing the scalar True
        self.episode_lengths = np.zeros(n, dtype=np.int64)
        self.episode_returns = np.zeros(n, dtype=np.float64)
        self._spilled = np.zeros(n, dtype=np.int64)  # steps of the current episode copied out of the ring
        self._overflow: dict[int, list[SpilledChunk]] = {}
        self._headroom = self.capacity - 1  # adds that surely fit before some env's ring must spill (keep_overflow)
        self._piece_firsts: dict[int, np.ndarray] = {}  # add_steps: which env-major rows are an env's first
        self.observation_space: gym.Space[Any] = None  # type: ignore[assignment]  # set by bind_spaces
        self.action_space: gym.Space[Any] = None  # type: ignore[assignment]
        if (observation_space is None) != (action_space is None):
            raise ValueError("give both observation_space and action_space, or neither (a Collector sets them)")
        if observation_space is not None and action_space is not None:
            self.bind_spaces(observation_space, action_space)

    @property
    def has_spaces(self) -> bool:
        """Whether the ring has its spaces (and storage): given when made, or by a Collector."""
        return self.observation_space is not None

    def bind_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """Give a ring made without spaces its envs' spaces and allocate its rows.

        A Collector calls this with its envs' single spaces, as Tianshou's collector shapes a
        VectorReplayBuffer on first add.

        Args:
            observation_space: The envs' single observation space.
            action_space: The envs' single action space.

        Raises:
            ValueError: The ring has its spaces already.
        """
        if self.has_spaces:
            raise ValueError("this ring already has its spaces; make a new VectorRingBuffer for other spaces")
        self.observation_space = observation_space
        self.action_space = action_space
        self._allocate()

    if not TYPE_CHECKING:  # at run time only, so that mypy still checks the types _allocate sets
        # the storage _allocate sets on the instance (bind_spaces): until then, reading it raises
        _columns = _episodes = StorageNeedsSpaces()

    def __dir__(self) -> Iterable[str]:
        """The ring's attributes, less the deprecated ones that moved to RingWriter."""
        return [name for name in super().__dir__() if name not in _MOVED_TO_RING_WRITER]

    def _moved(self, name: str) -> Any:
        """RingWriter(self)'s member ``name``, after a DeprecationWarning naming it (called from the ring's
        deprecated member of that name)."""
        warnings.warn(
            f"VectorRingBuffer.{name} is deprecated: it is collector plumbing, now "
            f"vcollect.buffers.ring.RingWriter(ring).{name}",
            DeprecationWarning,
            stacklevel=3,
        )
        return getattr(RingWriter(self), name)

    def episode_truncated_in_ring(self, env_id: int) -> bool:
        """Deprecated: ``RingWriter(ring).episode_truncated_in_ring``.

        Args:
            env_id: The env.

        Returns:
            Whether the ring lacks the start of the env's current episode.
        """
        return bool(self._moved("episode_truncated_in_ring")(env_id))

    def keep_whole_episodes(self) -> None:
        """Deprecated: ``RingWriter(ring).keep_whole_episodes`` (episodes longer than their ring kept whole)."""
        self._moved("keep_whole_episodes")()

    def last_obs(self, env_ids: np.ndarray) -> Any:
        """Deprecated: ``RingWriter(ring).last_obs``.

        Args:
            env_ids: The envs.

        Returns:
            A copy of each env's latest observation, batched.
        """
        return self._moved("last_obs")(env_ids)

    def set_episode_extras(self, env_id: int, values: Mapping[str, np.ndarray]) -> None:
        """Deprecated: ``RingWriter(ring).set_episode_extras``.

        Args:
            env_id: The env whose latest episode the arrays belong to.
            values: Per-step arrays by name, one row per step of the episode.
        """
        self._moved("set_episode_extras")(env_id, values)

    def _allocate(self) -> None:
        """The rows for the spaces bound; then :meth:`reset`."""
        self._columns = RingColumns(self.num_envs, self.capacity, self.observation_space, self.action_space)
        self._episodes = EpisodeTable(self._columns)  # the episodes held, for sample_slices (built on first use)
        self.reset()

    @property
    def extras(self) -> dict[str, np.ndarray]:
        """Per-step columns of episode-done hooks by name, (num_envs * capacity, ...) beside the ring's flat rows
        (``RingWriter.set_episode_extras``); ``sample`` returns their values under ``extras``."""
        return self._columns.extras

    # ------------------------------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget everything stored: no episodes, no transitions, no overflow."""
        self._columns.reset()
        self._episodes.forget()
        self.episode_lengths.fill(0)
        self.episode_returns.fill(0.0)
        self._spilled.fill(0)
        self._overflow.clear()
        self._headroom = self.capacity - 1

    def __len__(self) -> int:
        """Number of transitions (step rows whose next observation is still stored)."""
        return int(np.count_nonzero(self._columns.has))

    # ---------------------------------------------------------------------------------------- writing
    def start_episodes(self, env_ids: np.ndarray, obs_batch: Any) -> None:
        """Write the first observation of a new episode for each env id (the row after its last row).

        Args:
            env_ids: Distinct env ids.
            obs_batch: Their first observations, batched in ``env_ids`` order.
        """
        env_ids = np.asarray(env_ids)
        cols = self._columns
        cols.writes += 1
        rows = cols.next_rows[cols.last_rows[env_ids]]
        cols.write_observations(rows, obs_batch)
        cols.has[rows] = False
        cols.last_rows[env_ids] = rows
        cols.has_episode[env_ids] = True
        self.episode_lengths[env_ids] = 0
        self.episode_returns[env_ids] = 0.0
        if self.keep_overflow:
            self._restart_overflow(env_ids)

    def _abandon_episodes(self, env_ids: np.ndarray) -> None:
        """Give up the current episodes of env_ids (their env failed and was replaced): they are no longer
        running (``unfinished`` leaves them out) and their next ``start_episodes`` begins afresh. Their step
        rows stay as transitions whose last next observation is the newest row, which holds no step, so no
        sampled transition crosses into the episode that follows."""
        env_ids = np.asarray(env_ids)
        cols = self._columns
        cols.writes += 1
        cols.has_episode[env_ids] = False
        self.episode_lengths[env_ids] = 0
        self.episode_returns[env_ids] = 0.0
        if self.keep_overflow:
            self._restart_overflow(env_ids)

    def add(
        self,
        env_ids: np.ndarray,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        next_obs: Any,
    ) -> None:
        """Record one step for each env id: action/reward/flags in its current row, next_obs in the next.

        Args:
            env_ids: Distinct env ids, each with a started episode.
            actions: The actions taken, batched in ``env_ids`` order.
            rewards: The rewards that followed.
            terminations: Whether each episode terminated.
            truncations: Whether each episode was truncated.
            next_obs: The observations that followed, batched.
        """
        env_ids = np.asarray(env_ids)
        cols = self._columns
        cols.writes += 1
        if self.keep_overflow:
            if self._headroom <= 0:
                self._spill_full(env_ids)
            self._headroom -= 1
        last, has = cols.last_rows, cols.has
        cur = last[env_ids]
        nxt = cols.next_rows[cur]
        acts = flatten_batch(self.action_space, actions) if cols.act_nested else (actions,)
        for store, items, value in zip(cols.act, cols.act_items, acts):
            scatter_rows(store, items, cur, value)
        cols.rewards[cur] = rewards
        cols.terminations[cur] = terminations
        cols.truncations[cur] = truncations
        has[cur] = True
        obs = flatten_batch(self.observation_space, next_obs) if cols.obs_nested else (next_obs,)
        for store, items, value in zip(cols.obs, cols.obs_items, obs):
            scatter_rows(store, items, nxt, value)
        has[nxt] = False
        last[env_ids] = nxt
        self.episode_lengths[env_ids] += 1
        self.episode_returns[env_ids] += rewards

    def add_all(
        self,
        actions: Any,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        next_obs: Any,
        started: np.ndarray | None = None,
        stepped: np.ndarray | None = None,
    ) -> None:
        """Record one row for every env at once: a step (as ``add``) for each env, except that the envs in
        ``started`` (ascending env ids) begin a new episode with their row of ``next_obs`` as its first
        observation (as ``start_episodes``), their action, reward and flags being ignored. ``stepped``, the
        bool mask of the other envs, may be passed where the caller has it. The other envs need an episode.

        Equal to ``add`` for the other envs followed by ``start_episodes(started, ...)``, with one write per
        array: both put the observation in the row after each env's last row. This is the step of a
        backend that steps every env and restarts ended ones itself on their next step.

        Args:
            actions: Every env's action, batched in env id order.
            rewards: Every env's reward.
            terminations: Every env's termination flag.
            truncations: Every env's truncation flag.
            next_obs: Every env's next observation (a restarting env's first one), batched.
            started: Ascending env ids that begin a new episode with this row (None: none).
            stepped: The bool mask of the other envs, where the caller has it.
        """
        cols = self._columns
        cols.writes += 1
        if started is not None and started.size == 0:
            started = stepped = None
        elif started is not None and stepped is None:
            stepped = np.ones(self.num_envs, dtype=bool)
            stepped[started] = False
        if self.keep_overflow:
            if self._headroom <= 0:
                self._spill_full(cols.env_ids if stepped is None else stepped.nonzero()[0])
            self._headroom -= 1
        cur = cols.last_rows
        nxt = cols.next_rows[cur]
        if cols.act_nested:
            for store, items, value in zip(cols.act, cols.act_items, flatten_batch(self.action_space, actions)):
                scatter_rows(store, items, cur, value)
        else:  # one leaf, written without the loop (this is the per-step path of all-env backends)
            scatter_rows(cols.act[0], cols.act_items[0], cur, actions)
        cols.rewards[cur] = rewards
        cols.terminations[cur] = terminations
        cols.truncations[cur] = truncations
        has = cols.has
        # a restarting env's current row ends its previous episode: it holds no step
        has[cur] = self._all_true if stepped is None else stepped
        if cols.obs_nested:
            for store, items, value in zip(cols.obs, cols.obs_items, flatten_batch(self.observation_space, next_obs)):
                scatter_rows(store, items, nxt, value)
        else:
            scatter_rows(cols.obs[0], cols.obs_items[0], nxt, next_obs)
        has[nxt] = False
        cols.last_rows = nxt
        lengths, returns = self.episode_lengths, self.episode_returns
        lengths += self._ones
        returns += rewards
        if started is not None:
            cols.has_episode[started] = True
            lengths[started] = 0
            returns[started] = 0.0
            if self.keep_overflow:
                self._restart_overflow(started)

    def _add_steps(
        self,
        actions: list[np.ndarray],
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        next_obs: Sequence[np.ndarray | HeldRows],
        restarts: np.ndarray,
    ) -> EpisodeEnds:
        """Record k steps of every env at once: equal to ``add_all`` for each step j with ``started`` the env
        ids of ``restarts[j]``, in one write per array. Arguments are (k, num_envs, ...) arrays (observation
        leaves may be HeldRows), actions and observations in flat leaf form; 1 <= k < ``capacity`` must hold,
        and an env whose step ends an episode must restart in the next step (NEXT_STEP). Returns the episodes
        that ended, whose returns are sums of their rewards (rounded as numpy's sum does, not k additions).

        Every env moves k rows: row j after its last one takes step j's action, reward and flags, row j + 1
        its next observation. Where every env's last row is in the same ring column (an all-env backend
        keeps them so) these are column slices of the (num_envs, capacity) arrays.
        """
        k, n, c = len(rewards), self.num_envs, self.capacity
        if not 1 <= k <= c - 1:
            raise ValueError(f"add_steps takes 1 to {c - 1} steps (capacity - 1) at once, got {k}")
        cols = self._columns
        cols.writes += k
        stepped = ~restarts
        ended = (terminations | truncations) & stepped
        if np.count_nonzero(ended[:-1] > restarts[1:]):
            j, env = np.argwhere(ended[:-1] > restarts[1:])[0].tolist()
            raise ValueError(
                f"env {env} ended an episode in step {j} of {k} but does not restart in step {j + 1}: add_steps "
                "takes NEXT_STEP steps only (an env that is done restarts in its next step); use add_all"
            )
        prefixes: dict[int, list[SpilledChunk]] = {}
        if self.keep_overflow:
            # the episode an env continues (not one it restarts from in row 0) plus k rows must fit its ring,
            # else the rows the block would overwrite (of that episode, whether it ends in the block or
            # not) are copied aside first
            continuing = ~restarts[0]
            in_ring = self.episode_lengths - self._spilled
            self._spill_steps(np.flatnonzero((in_ring + k > c - 1) & continuing))
            ending = np.flatnonzero(ended.any(axis=0) & continuing & (self._spilled > 0))
            for env in ending.tolist():
                end_row = int(ended[:, env].argmax())
                if not restarts[1 : end_row + 1, env].any():  # the spilled episode itself ends (not one after
                    prefixes[env] = list(self._overflow[env])  # a restart): its spilled steps go with its end
            restarted = np.flatnonzero(restarts.any(axis=0))
            if restarted.size:
                self._restart_overflow(restarted)
        base = cols.env_ids * c
        heads = cols.last_rows - base  # each env's last row within its ring
        t = int(heads[0])
        if not np.count_nonzero(heads != t):
            by_env = cols.by_env
            for store, value in zip(cols.act, actions):
                write_columns(by_env(store), t, value)
            write_columns(by_env(cols.rewards), t, rewards)
            write_columns(by_env(cols.terminations), t, terminations)
            write_columns(by_env(cols.truncations), t, truncations)
            has_step = by_env(cols.has)
            write_columns(has_step, t, stepped)
            for store, obs in zip(cols.obs, next_obs):
                write_columns(by_env(store), (t + 1) % c, obs)
            has_step[:, (t + k) % c] = False
            cols.last_rows[:] = base + (t + k) % c
        else:
            grid = (heads + np.arange(k + 1)[:, None]) % c + base  # (k + 1, num_envs) flat rows
            cur, nxt = grid[:-1], grid[1:]
            for store, items, value in zip(cols.act, cols.act_items, actions):
                scatter_rows(store, items, cur.reshape(-1), value.reshape(k * n, *value.shape[2:]))
            cols.rewards[cur] = rewards
            cols.terminations[cur] = terminations
            cols.truncations[cur] = truncations
            cols.has[cur] = stepped
            for store, items, obs in zip(cols.obs, cols.obs_items, next_obs):
                scatter_rows(store, items, nxt.reshape(-1), obs.reshape(k * n, *obs.shape[2:]))
            cols.has[grid[k]] = False
            cols.last_rows[:] = grid[k]
        cols.has_episode |= restarts.any(axis=0)
        ends = self._episode_pieces(k, restarts, np.where(restarts, 0.0, rewards), ended)
        steps, env_ids = ends[0], ends[1]
        spilled: dict[int, list[SpilledChunk]] = {}
        if prefixes:  # an env's first episode end in the block is the episode that had spilled
            first_end: dict[int, int] = {}
            for i, env in enumerate(env_ids.tolist()):
                first_end.setdefault(env, i)
            spilled = {first_end[env]: chunks for env, chunks in prefixes.items()}
        if self.keep_overflow:
            self._headroom = int((c - 1 - (self.episode_lengths - self._spilled)).min())
        return EpisodeEnds(
            steps, env_ids, base[env_ids] + (heads[env_ids] + steps + 1) % c, ends[2], ends[3], ended, spilled
        )

    def _episode_pieces(
        self, k: int, restarts: np.ndarray, rewards: np.ndarray, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Episode accounting for add_steps: each env's k steps cut into pieces at its restarts. Updates
        episode_lengths/returns to each env's last piece; returns the (step, env id, length, return) of the
        pieces that end an episode, in step order (env ids ascending within a step)."""
        n = self.num_envs
        # env-major order: each env's steps consecutive, so every piece is one contiguous run
        at_restart = restarts.T.reshape(-1)
        first_rows = self._piece_firsts.get(k)
        if first_rows is None:
            first_rows = self._piece_firsts[k] = np.arange(n * k) % k == 0
        starts = np.flatnonzero(at_restart | first_rows)
        stops = np.empty_like(starts)
        stops[:-1] = starts[1:]
        stops[-1] = n * k
        piece_env = starts // k
        new = at_restart[starts]  # pieces that start a new episode; the others continue the env's last one
        returns = np.add.reduceat(rewards.T.reshape(-1), starts)  # restart rows' rewards are zeroed
        lengths = stops - starts - new
        old = ~new
        returns[old] += self.episode_returns[piece_env[old]]
        lengths[old] += self.episode_lengths[piece_env[old]]
        last = stops - 1
        final = last % k == k - 1  # one per env, in env id order
        self.episode_lengths[:] = lengths[final]
        self.episode_returns[:] = returns[final]
        done = np.flatnonzero(ended.T.reshape(-1)[last])
        steps, envs = last[done] % k, piece_env[done]
        order = np.argsort(steps * n + envs)
        done = done[order]
        return steps[order], envs[order], lengths[done], returns[done]

    def _restart_overflow(self, env_ids: np.ndarray) -> None:
        """Forget the spilled steps of env_ids, whose episodes were just restarted."""
        self._spilled[env_ids] = 0
        if self._overflow:
            restarted = np.zeros(self.num_envs, dtype=bool)
            restarted[env_ids] = True
            for env in [e for e in self._overflow if restarted[e]]:
                del self._overflow[env]

    def _spill_steps(self, env_ids: np.ndarray) -> None:
        """Copy aside the step rows of the current episode of each env in env_ids that are still in its ring,
        so that it can write up to capacity - 1 rows without overwriting any of them."""
        for env in env_ids.tolist():
            steps = int(self.episode_lengths[env] - self._spilled[env])
            if steps == 0:
                continue
            _, step_rows = self._ring_rows(env, steps + 1)
            idx = np.arange(step_rows.start, step_rows.stop) if isinstance(step_rows, slice) else step_rows
            self._overflow.setdefault(env, []).append(self._copy_rows(idx))
            self._spilled[env] += steps

    def _copy_rows(self, idx: np.ndarray) -> SpilledChunk:
        """Copies of the step rows at flat indices idx (index arrays: reads are copies, never views)."""
        cols = self._columns
        return SpilledChunk(
            [a[idx] for a in cols.obs], [a[idx] for a in cols.act], cols.rewards[idx], cols.terminations[idx],
            cols.truncations[idx],
        )

    def _spill_full(self, env_ids: np.ndarray) -> None:
        """Copy aside the step rows of every env in env_ids whose ring is full of its current episode."""
        c = self.capacity
        steps_in_ring = self.episode_lengths - self._spilled
        for env in env_ids[steps_in_ring[env_ids] >= c - 1].tolist():
            _, steps = self._ring_rows(env, c)
            # Index arrays so that the reads below are copies, never views into the ring.
            idx = np.arange(steps.start, steps.stop) if isinstance(steps, slice) else steps
            self._overflow.setdefault(env, []).append(self._copy_rows(idx))
            self._spilled[env] += c - 1
        self._headroom = int((c - 1 - (self.episode_lengths - self._spilled)).min())

    # ---------------------------------------------------------------------------------------- reading
    def _check_env(self, env_id: int) -> int:
        env = int(env_id)
        if not 0 <= env < self.num_envs:
            raise IndexError(f"env id {env_id} out of range [0, {self.num_envs})")
        if not self._columns.has_episode[env]:
            raise ValueError(f"env {env} has no episode: call start_episodes first")
        return env

    def _ring_rows(self, env: int, rows: int) -> tuple[slice | np.ndarray, slice | np.ndarray]:
        """Flat indices of the env's last ``rows`` rows and of all but the last of them.

        Slices (so reads are views) when the rows are contiguous, index arrays when they wrap.
        """
        c = self.capacity
        last = int(self._columns.last_rows[env])
        first = last - rows + 1
        if first >= env * c:
            return slice(first, last + 1), slice(first, last)
        idx = env * c + (np.arange(first - env * c, last - env * c + 1) % c)
        return idx, idx[:-1]

    def episode(self, env_id: int) -> EpisodeSlice:
        """The current (or just finished) episode of an env: views when contiguous, else copies.

        With keep_overflow=True it is the whole episode (spilled chunks + ring part); otherwise only the
        part still in the ring (see :meth:`RingWriter.episode_truncated_in_ring`).

        Args:
            env_id: The env.

        Returns:
            Its observations (T+1), actions, rewards, terminations and truncations (T).

        Raises:
            IndexError: ``env_id`` is out of range.
            ValueError: The env has no episode.
        """
        env = self._check_env(env_id)
        steps_in_ring = int(self.episode_lengths[env] - self._spilled[env])
        idx, step_idx = self._ring_rows(env, min(steps_in_ring + 1, self.capacity))
        cols = self._columns
        obs = [a[idx] for a in cols.obs]
        acts = [a[step_idx] for a in cols.act]
        rew, term, trunc = cols.rewards[step_idx], cols.terminations[step_idx], cols.truncations[step_idx]
        chunks = self._overflow.get(env)
        if chunks:
            obs = [np.concatenate([*(ch.observations[i] for ch in chunks), o]) for i, o in enumerate(obs)]
            acts = [np.concatenate([*(ch.actions[i] for ch in chunks), a]) for i, a in enumerate(acts)]
            rew = np.concatenate([*(ch.rewards for ch in chunks), rew])
            term = np.concatenate([*(ch.terminations for ch in chunks), term])
            trunc = np.concatenate([*(ch.truncations for ch in chunks), trunc])
        return EpisodeSlice(
            unflatten_batch(self.observation_space, obs),
            unflatten_batch(self.action_space, acts),
            rew,
            term,
            trunc,
        )

    def _set_episode_extras(self, env_id: int, values: Mapping[str, np.ndarray]) -> None:
        """Write per-step arrays (an episode-done hook's) at the step rows of env_id's latest episode still in
        its ring: ``extras[name]``, a flat column beside the ring's rows, made on first use."""
        env = self._check_env(env_id)
        rows = min(int(self.episode_lengths[env] - self._spilled[env]) + 1, self.capacity)
        _, step_idx = self._ring_rows(env, rows)
        write_extras(self.extras, self.num_envs * self.capacity, step_idx, values, rows - 1)

    def _episode_ref(self, env_id: int) -> tuple[int, int] | None:
        """(flat index of the last row, steps) of env_id's current episode when all of it is in the ring, else
        None (part of it spilled, or cut short by the ring): a handle for ``gather_episodes``, valid
        until the env has written ``capacity - steps - 1`` more rows."""
        env = self._check_env(env_id)
        steps = int(self.episode_lengths[env])
        if self._spilled[env] or steps + 1 > self.capacity:
            return None
        return int(self._columns.last_rows[env]), steps

    def _gather_episodes(
        self, env_ids: np.ndarray, last_rows: np.ndarray, steps: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Copies of several episodes' rows, concatenated in order, from their ``episode_ref`` handles:
        (observation leaves, action leaves, rewards, terminations, truncations), in flat leaf form.

        One fancy index per array for all the episodes instead of a slice (and a copy) per episode. Each
        episode's rows must still be in its env's ring (see episode_ref).
        """
        c = self.capacity
        lengths = steps + 1
        offsets = np.cumsum(lengths) - lengths  # where each episode starts in the concatenation
        within = np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)  # 0 .. T per episode
        base = env_ids * c
        first = (last_rows - base - steps) % c  # the episode's first row, inside its env's ring
        rows = np.repeat(base, lengths) + (np.repeat(first, lengths) + within) % c
        step_rows = rows[within < np.repeat(steps, lengths)]  # all but each episode's last row
        cols = self._columns
        return (
            [a[rows] for a in cols.obs],
            [a[step_rows] for a in cols.act],
            cols.rewards[step_rows],
            cols.terminations[step_rows],
            cols.truncations[step_rows],
        )

    def _gather_spilled_episode(
        self, env_id: int, last_row: int, steps: int, chunks: list[SpilledChunk]
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """One episode of :class:`EpisodeEnds` whose first steps were spilled (``EpisodeEnds.spilled``): the
        spilled steps followed by the ``steps`` still in the ring, in ``gather_episodes``' form."""
        obs, acts, rew, term, trunc = self._gather_episodes(
            np.array([env_id]), np.array([last_row]), np.array([steps])
        )
        return (
            [np.concatenate([*(ch.observations[i] for ch in chunks), o]) for i, o in enumerate(obs)],
            [np.concatenate([*(ch.actions[i] for ch in chunks), a]) for i, a in enumerate(acts)],
            np.concatenate([*(ch.rewards for ch in chunks), rew]),
            np.concatenate([*(ch.terminations for ch in chunks), term]),
            np.concatenate([*(ch.truncations for ch in chunks), trunc]),
        )

    def _rows_left(self, env_ids: np.ndarray, last_rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """For episodes given by ``episode_ref`` handles (env id, flat row of the final observation,
        steps): how many more rows each env can write before the episode's first row is overwritten."""
        c = self.capacity
        written_since = (self._columns.last_rows[env_ids] - last_rows) % c
        return c - 1 - steps - written_since

    def unfinished(self) -> np.ndarray:
        """Env ids whose current episode has at least one step and has not ended (its last step neither
        terminated nor truncated): what would be lost if collection stopped now.

        Returns:
            Those env ids, ascending.
        """
        return np.flatnonzero(self._columns.running() & (self.episode_lengths > 0))

    def _keep_whole_episodes(self) -> None:
        """From now on copy aside the rows of an episode longer than its ring before overwriting them
        (``keep_overflow``), so :meth:`episode` is always whole: what a collector writing to a store needs."""
        if self.keep_overflow:
            return
        self.keep_overflow = True
        c = self.capacity
        self._headroom = int((c - 1 - (self.episode_lengths - self._spilled)).min())

    def _episode_truncated_in_ring(self, env_id: int) -> bool:
        """Whether :meth:`episode` lacks the start of the env's episode (too long, keep_overflow=False)."""
        env = self._check_env(env_id)
        return int(self.episode_lengths[env] - self._spilled[env]) + 1 > self.capacity

    def _last_obs(self, env_ids: np.ndarray) -> Any:
        """A copy of the latest observation of each env id, batched."""
        env_ids = np.asarray(env_ids)
        cols = self._columns
        if not cols.has_episode[env_ids].all():
            missing = env_ids[~cols.has_episode[env_ids]].tolist()
            raise ValueError(f"env ids {missing} have no episode: call start_episodes first")
        rows = cols.last_rows[env_ids]
        return unflatten_batch(self.observation_space, [a[rows] for a in cols.obs])

    def sample(
        self, batch_size: int, rng: np.random.Generator | None = None, *, stack_num: int = 1,
        n_step: int | None = None, gamma: float | None = None,
    ) -> dict[str, Any]:
        """Draw transitions uniformly (with replacement) from those stored.

        Args:
            batch_size: How many (0: every stored one, each env's in order, as Tianshou's ``sample(0)``).
            rng: The generator to draw with (None: the ring's own, seeded by ``seed``).
            stack_num: Stack observations this deep (Tianshou's ``stack_num``).
            n_step: With ``gamma``, add n-step returns (Tianshou's ``compute_nstep_return``).
            gamma: The discount of the n-step returns.

        Returns:
            The dict :func:`~vcollect.buffers.sampling.gather_transitions` describes: ``indices``,
            ``observations``, ``actions``, ``rewards``, ``next_observations``, flags, ...

        Raises:
            ValueError: Nothing is stored, or bad ``stack_num`` / ``n_step`` / ``gamma``.
        """
        cols = self._columns
        rows = sample_rows(cols, batch_size, self._rng if rng is None else rng)
        return gather_transitions(cols, rows, stack_num, n_step, gamma)

    def __getitem__(self, indices: Any) -> dict[str, Any]:
        """The transitions at flat rows ``indices`` (a batch's ``indices``), as Tianshou's ``buffer[indices]``."""
        return transitions_at(self._columns, indices)

    # ------------------------------------------------------------------------------ preload, checkpoints
    def extend_from(self, dataset: EpisodeSource, episodes: Iterable[int] | None = None) -> None:
        """Fill the rings with whole episodes of a dataset, read column by column and written at once.

        Episode i (in the order given) goes to env ring ``i % num_envs``, after its last row, exactly as
        ``start_episodes`` and one ``add`` per step would write it; the episodes are then data, not running
        episodes (the next ``start_episodes`` of an env follows them). Where an env's share holds more rows
        than its ring, its oldest rows are overwritten. A ring made without spaces takes the dataset's.

        Args:
            dataset: A vcollect ``Dataset`` (or a view of one).
            episodes: Global episode ids to preload, in order (None: all of the dataset's).

        Raises:
            SpaceMismatchError: The dataset's spaces differ from the ring's (the message names both).
            RingInUseError: Episodes are running in the ring, or it holds episode-hook columns.
            EpisodeIndexError: An episode id is not in the dataset.
            TypeError: ``dataset`` is not a vcollect Dataset.
        """
        self._preload(dataset, episodes)

    def _preload(self, dataset: EpisodeSource, episodes: Iterable[int] | None) -> np.ndarray:
        """extend_from's work; returns the flat rows written."""
        source = check_source(dataset)
        if self.has_spaces:
            check_ring_takes(self._columns, source)
        else:
            self.bind_spaces(source.observation_space, source.action_space)
        self._episodes.forget()
        return preload(self._columns, source.episode_rows(episodes))

    def _checkpoint_header(self) -> dict[str, Any]:
        """The JSON-able part of the ring's state: how to make it again, and its scalars."""
        return {
            "kind": type(self).__name__,
            "num_envs": self.num_envs,
            "capacity": self.capacity,
            "keep_overflow": self.keep_overflow,
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "headroom": int(self._headroom),
            "rng": self._rng.bit_generator.state,
            "extras": list(self.extras),
            "overflow": {str(env): len(chunks) for env, chunks in self._overflow.items()},
        }

    def _row_arrays(self) -> dict[str, np.ndarray]:
        """The arrays every ring of these spaces and sizes has, by checkpoint name (the live arrays)."""
        cols = self._columns
        arrays: dict[str, np.ndarray] = {}
        for i, a in enumerate(cols.obs):
            arrays[f"obs/{i}"] = a
        for i, a in enumerate(cols.act):
            arrays[f"act/{i}"] = a
        arrays.update(rewards=cols.rewards, terminations=cols.terminations, truncations=cols.truncations,
                      has_step=cols.has, episode_lengths=self.episode_lengths,
                      episode_returns=self.episode_returns, last_flat=cols.last_rows, has_episode=cols.has_episode,
                      spilled=self._spilled)
        return arrays

    def _checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The ring's arrays by checkpoint name (the live arrays themselves, never copies)."""
        arrays = self._row_arrays()
        for i, column in enumerate(self.extras.values()):
            arrays[f"extras/{i}"] = column
        for env, chunks in self._overflow.items():
            for k, chunk in enumerate(chunks):
                prefix = f"overflow/{env}/{k}"
                arrays.update({f"{prefix}/obs/{i}": a for i, a in enumerate(chunk.observations)})
                arrays.update({f"{prefix}/act/{i}": a for i, a in enumerate(chunk.actions)})
                arrays.update({f"{prefix}/rewards": chunk.rewards, f"{prefix}/terminations": chunk.terminations,
                               f"{prefix}/truncations": chunk.truncations})
        return arrays

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the ring to a checkpoint file that :meth:`load` makes the same ring again from: every row,
        the episodes running (their lengths, returns and rows copied aside), each env's write position and
        the sampling generator, so collection and sampling go on exactly where they stopped.

        The arrays are streamed into the file chunk by chunk straight from the ring's memory (no copy of the
        ring), each chunk with a checksum; the file is written under a temporary name, fsynced and renamed,
        so a save killed at any point leaves the checkpoint that was at ``path`` before, whole.

        Args:
            path: The checkpoint file to write (its folder must exist).
            overwrite: Replace a checkpoint at ``path`` (it stays readable until the new one is whole).

        Returns:
            The path written.

        Raises:
            CheckpointExistsError: ``path`` exists and ``overwrite`` is false.
            BufferNotReadyError: The ring has no spaces yet.
            FileNotFoundError: The folder of ``path`` does not exist.
        """
        if not self.has_spaces:
            raise BufferNotReadyError("this ring has no spaces (nor rows) yet: there is nothing to save")
        return write_checkpoint(path, self._checkpoint_header(), self._checkpoint_arrays(), overwrite=overwrite)

    @classmethod
    def _checkpoint_kwargs(cls, header: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments that make the ring of a checkpoint's header (allocated, empty)."""
        return {"num_envs": int(header["num_envs"]), "capacity": int(header["capacity"]),
                "observation_space": space_from_dict(header["observation_space"]),
                "action_space": space_from_dict(header["action_space"]),
                "keep_overflow": bool(header["keep_overflow"])}

    def _restore(self, ckpt: CheckpointReader) -> None:
        """Read a checkpoint's arrays and scalars into this ring, made from its header."""
        header = ckpt.header
        for name, arr in self._row_arrays().items():
            ckpt.read_into(name, arr)
        n = self.num_envs * self.capacity
        for i, name in enumerate(header["extras"]):
            column = ckpt.read(f"extras/{i}")
            if column.shape[:1] != (n,):
                raise CorruptCheckpointError(f"{ckpt.path}: extras column {name!r} has {column.shape[:1]} rows, not {n}")
            self.extras[str(name)] = column
        for env, count in header["overflow"].items():
            chunks = []
            for k in range(int(count)):
                prefix = f"overflow/{int(env)}/{k}"
                chunks.append(SpilledChunk(
                    [ckpt.read(f"{prefix}/obs/{i}") for i in range(len(self._columns.obs))],
                    [ckpt.read(f"{prefix}/act/{i}") for i in range(len(self._columns.act))],
                    ckpt.read(f"{prefix}/rewards"), ckpt.read(f"{prefix}/terminations"),
                    ckpt.read(f"{prefix}/truncations"),
                ))
            self._overflow[int(env)] = chunks
        self._headroom = int(header["headroom"])
        state = header["rng"]
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise CorruptCheckpointError(f"{ckpt.path}: the sampling generator's state is not a PCG64 state")
        self._rng = np.random.Generator(np.random.PCG64())
        self._rng.bit_generator.state = state
        last = self._columns.last_rows
        if last.size and (int(last.min()) < 0 or int(last.max()) >= n):
            raise CorruptCheckpointError(f"{ckpt.path}: write positions outside the rings")

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        num_envs: int | None = None,
        capacity: int | None = None,
    ) -> Self:
        """Make the ring a checkpoint written by :meth:`save` holds, as it was: rows, running episodes, write
        positions, sampling generator (and a prioritized ring's priorities). What is given is checked against
        the checkpoint before anything is allocated.

        Args:
            path: The checkpoint file.
            observation_space: The observation space the ring must have (None: any).
            action_space: The action space the ring must have (None: any).
            num_envs: The number of env rings it must have (None: any).
            capacity: The rows per env ring it must have (None: any).

        Returns:
            The ring.

        Raises:
            CheckpointMismatchError: The checkpoint holds another kind of ring, or differs from what was given
                (the message names each difference).
            CorruptCheckpointError: The file is not a ring checkpoint, is truncated, or fails its checksums.
            FileNotFoundError: No file at ``path``.
        """
        with CheckpointReader(path) as ckpt:
            header = ckpt.header
            kind = header.get("kind")
            if kind != cls.__name__:
                raise CheckpointMismatchError(
                    f"{ckpt.path} holds a {kind}, not a {cls.__name__}: load it with {kind}.load"
                )
            try:
                kwargs = cls._checkpoint_kwargs(header)
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptCheckpointError(f"{ckpt.path}: unreadable ring description in its header ({exc!r})") from None
            wanted = {"observation_space": observation_space, "action_space": action_space, "num_envs": num_envs,
                      "capacity": capacity}
            differs = [f"its {name} is {kwargs[name]}, {value} was asked for" for name, value in wanted.items()
                       if value is not None and kwargs[name] != value]
            if differs:
                raise CheckpointMismatchError(f"{ckpt.path} does not hold the ring asked for: " + "; ".join(differs))
            ring = cls(**kwargs)
            try:
                ring._restore(ckpt)
            except (KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, CorruptCheckpointError):
                    raise
                raise CorruptCheckpointError(f"{ckpt.path}: unreadable ring state ({exc!r})") from None
        return ring

    def sample_slices(
        self, batch_size: int, length: int, *, pad: Pad = "none", by: Literal["window", "episode"] = "window",
        gamma: float = 1.0, stack_num: int = 1, seed: int | None = None, rng: np.random.Generator | None = None,
        stacks: Stacks = "copy",
    ) -> dict[str, Any]:
        """Draw windows of ``length`` consecutive steps of one episode (slices, for sequence models), with
        replacement; a window never crosses an episode or an env's ring.

        Every window is equally likely (``by="window"``; long episodes are not under-sampled), or every
        episode first (``by="episode"``). ``pad="none"`` takes windows inside an episode; ``"start"``,
        ``"end"`` and ``"both"`` also take windows reaching before its first or past its last step, whose rows
        outside it are 0 and ``mask`` False (each episode then offers T, T or T + length - 1 windows:
        see :mod:`vcollect.slices`). The episode table is kept up to date from the rows written since the
        last call, so a call costs the batch, the rows written since and a pass over the episodes held.

        Args:
            batch_size: How many windows (0: an empty batch of the right shapes).
            length: Steps per window.
            pad: Where windows may be padded: "none", "start", "end" or "both".
            by: "window" (each window equally likely) or "episode" (each episode, then its windows).
            gamma: The discount of ``returns_to_go`` (1: plain sums).
            stack_num: Stack observations this deep, as :meth:`sample`.
            seed: Seeds a generator for this call (else ``rng``, else the ring's own).
            rng: The generator to draw with.
            stacks: ``"copy"`` (default): ``observations`` and ``next_observations`` are arrays of their own,
                writable, as :meth:`sample` gives them. ``"view"`` (as ``Dataset.sample_slices``'): read-only
                numpy views over one array per window of its ``length + stack_num`` observation rows, gathered
                once (the first step's stack, the window's steps, the last step's next observation), each row's
                stack strided over it and ``next_observations`` the same rows shifted by one: the same values
                as ``"copy"`` in about ``2 * stack_num`` times fewer bytes. Copy before writing (numpy refuses
                writes to them). A batch holding a padded window (``pad`` other than ``"none"``) is
                materialised as with ``"copy"``, read-only all the same (a padded row must read 0).

        Returns:
            :meth:`sample`'s keys, each with leading (batch, length) axes (``indices`` -1 at padded rows), and
            ``mask`` (bool: the row is a step), ``timesteps`` (each row's step in its episode, counted from the
            oldest one the ring holds), ``returns_to_go`` (float64: the discounted sum of the row's reward and
            every later one of its episode; an episode still running sums to its newest step), ``partial``
            (per window: its episode has not ended), ``episode_ids`` (the flat row of the episode's first
            step held) and ``start_indices`` (the window's first step in the episode; negative when padded).

        Raises:
            SliceLengthError: ``pad="none"`` and every episode held is shorter than ``length``.
            ValueError: A bad argument (``stacks`` not "copy" or "view"), or ``seed`` and ``rng`` both given.
        """
        request = check_slice_request(batch_size, length, pad, by, gamma)
        view = check_stacks(stacks)
        episodes = self._episodes.held()
        which, starts = draw_windows(episodes.lengths, request, slice_generator(rng, seed, self._rng), episodes.describe)
        return gather_slices(self._columns, episodes, which, starts, request, stack_num, view)


class RingWriter:
    """What a collector uses of a ring beyond a user's ``add``/``sample``: blocks of steps written at once,
    finished episodes read back by handle while their rows are still in the ring, whole episodes kept for a
    store, the latest observations and an episode-done hook's per-step arrays (composed with the ring, so
    that these stay off VectorRingBuffer's own surface).

    A handle (``episode_ref``) is (flat row of the episode's final observation, steps); it stays valid until
    the env has written ``rows_left`` more rows.
    """

    __slots__ = ("ring",)

    def __init__(self, ring: VectorRingBuffer) -> None:
        self.ring = ring

    def add_steps(
        self,
        actions: list[np.ndarray],
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        next_obs: Sequence[np.ndarray | HeldRows],
        restarts: np.ndarray,
    ) -> EpisodeEnds:
        """Record k steps of every env at once (1 <= k < capacity), each equal to ``add_all`` with the env ids
        of ``restarts[j]`` started; arguments (k, num_envs, ...) in flat leaf form (observation leaves may be
        HeldRows). An env whose step ends an episode must restart in the next step (NEXT_STEP).

        Returns:
            The episodes that ended, step by step (returns summed as numpy sums, not k additions).

        Raises:
            ValueError: k out of range, or an episode end without its restart in the next step.
        """
        return self.ring._add_steps(actions, rewards, terminations, truncations, next_obs, restarts)

    def abandon_episodes(self, env_ids: np.ndarray) -> None:
        """Give up the current episodes of ``env_ids`` (their env failed and was replaced): they are no longer
        running and are never stored; their next ``start_episodes`` begins afresh, and no sampled transition
        crosses into the episode that follows.

        Args:
            env_ids: The env ids whose episodes are abandoned.
        """
        self.ring._abandon_episodes(env_ids)

    def episode_ref(self, env_id: int) -> tuple[int, int] | None:
        """The handle (flat row of the last row, steps) of env_id's current episode when all of it is in the
        ring; None when part of it was spilled or cut short by the ring."""
        return self.ring._episode_ref(env_id)

    def gather_episodes(
        self, env_ids: np.ndarray, last_rows: np.ndarray, steps: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Fresh arrays of several episodes given by their handles, concatenated in order: (observation leaves,
        action leaves, rewards, terminations, truncations), one fancy index per array."""
        return self.ring._gather_episodes(env_ids, last_rows, steps)

    def gather_spilled_episode(
        self, env_id: int, last_row: int, steps: int, chunks: list[SpilledChunk]
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """One episode whose first steps were spilled (``EpisodeEnds.spilled``): those steps, then the
        ``steps`` still in the ring, in ``gather_episodes``' form."""
        return self.ring._gather_spilled_episode(env_id, last_row, steps, chunks)

    def rows_left(self, env_ids: np.ndarray, last_rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """For episodes given by handles: how many more rows each env can write before the episode's first
        row is overwritten."""
        return self.ring._rows_left(env_ids, last_rows, steps)

    def rows_left_after_end(self, steps: int) -> int:
        """``rows_left`` of an episode of ``steps`` steps that ended in its env's last row."""
        return self.ring.capacity - 1 - steps

    def keep_whole_episodes(self) -> None:
        """From now on copy aside the rows of an episode longer than its ring before overwriting them (the
        ring's ``keep_overflow``), so that every episode read from it is whole: what a store needs."""
        self.ring._keep_whole_episodes()

    def episode_truncated_in_ring(self, env_id: int) -> bool:
        """Whether the ring lacks the start of env_id's current episode (too long, and not kept whole).

        Raises:
            IndexError: ``env_id`` is out of range.
            ValueError: the env has no episode.
        """
        return self.ring._episode_truncated_in_ring(env_id)

    def last_obs(self, env_ids: np.ndarray) -> Any:
        """A copy of the latest observation of each env id, batched.

        Raises:
            ValueError: some env id has no episode.
        """
        return self.ring._last_obs(env_ids)

    def set_episode_extras(self, env_id: int, values: Mapping[str, np.ndarray]) -> None:
        """Write per-step arrays (an episode-done hook's) at the step rows of env_id's latest episode still in
        its ring, as ``extras[name]`` columns beside the ring's rows, made on first use."""
        self.ring._set_episode_extras(env_id, values)


def ring_columns(ring: VectorRingBuffer) -> RingColumns:
    """The columns holding a ring's rows, for code that reads the rows by flat index (a sampler of its own, the
    Tianshou adapter's index): kept off the ring's own surface, as :class:`RingWriter` is.

    Read them; write through the ring (its writes keep the columns' heads and write counter in step).

    Args:
        ring: The ring, with its spaces bound.

    Returns:
        Its :class:`~vcollect.buffers.columns.RingColumns` (the live columns, never a copy).

    Raises:
        BufferNotReadyError: The ring has no spaces (nor rows) yet.
    """
    return ring._columns


def ring_generator(ring: VectorRingBuffer) -> np.random.Generator:
    """The generator a ring's ``sample`` draws with when given none (seeded by its ``seed``; saved in its
    checkpoints), for samplers over the ring that draw as it does.

    Args:
        ring: The ring.

    Returns:
        Its generator (the live one: drawing from it moves the ring's own draws on).
    """
    return ring._rng
