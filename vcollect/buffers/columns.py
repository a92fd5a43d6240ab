"""RingColumns: the rows of a ring's envs in preallocated columns addressed by flat row, and each env's head.

Every per-leaf array of shape (num_envs, capacity, ...) is held as one flat (num_envs * capacity, ...) column,
row ``env_id * capacity + row``: one 1-D fancy index per column is the cheapest numpy write and gather. The
ring writes these columns; its samplers, slice tables, preloading and adapters read them.

A row holds an observation and, once the policy acted on it, the action, reward, termination and truncation
that followed; a *step row* (``has``) holds a transition, and the row after it (``next_rows``) its next
observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.buffers.row_writes import row_items, scatter_rows
from vcollect.spaces import allocate, flatten_batch, leaves, unflatten_batch

__all__ = ["RingColumns"]


def gather(space: gym.Space, columns: Sequence[np.ndarray], rows: np.ndarray) -> Any:
    """The values of ``space`` at flat ``rows`` of its leaf ``columns``, batched as the space nests them.

    Args:
        space: The space the columns hold (one column per leaf, in ``leaves`` order).
        columns: Its flat columns.
        rows: Flat rows (any shape of index array).

    Returns:
        Fresh arrays (or a dict/tuple of them), ``rows.shape`` leading.
    """
    return unflatten_batch(space, [column.take(rows, axis=0) for column in columns])


class RingColumns:
    """The columns of ``num_envs`` rings of ``capacity`` rows, one flat row per (env, row), and each env's
    newest row.

    Read them freely; write them through the ring that holds them (its writes keep ``writes`` and the heads
    in step with the rows). Made empty (see :meth:`reset`).

    Args:
        num_envs: How many rings.
        capacity: Rows per ring.
        observation_space: The envs' single observation space.
        action_space: The envs' single action space.

    Attributes:
        num_envs: How many rings.
        capacity: Rows per ring.
        observation_space: The envs' single observation space.
        action_space: The envs' single action space.
        obs_nested: Whether observations are a Dict or Tuple (several leaves, flattened when written).
        act_nested: Whether actions are a Dict or Tuple.
        obs: One flat column per observation leaf (``vcollect.spaces.leaves`` order),
            (num_envs * capacity, *leaf shape).
        act: One flat column per action leaf.
        obs_items: Per observation column, its rows as opaque items for ``scatter_rows`` (None: single values).
        act_items: Per action column, the same.
        rewards: Each row's reward (float64).
        terminations: Each row's termination flag.
        truncations: Each row's truncation flag.
        has: Whether each row holds a transition (a step row).
        next_rows: The flat row after each flat row, wrapping inside its env's own ring.
        last_rows: Each env's newest flat row (the ring writes it in place or replaces it: read it anew after a
            write, and copy it to keep it).
        has_episode: Whether each env has a started episode that was not given up.
        env_ids: ``0 .. num_envs - 1`` (read-only use).
        writes: A count of the writes that moved rows (adds, episode starts, resets), each counted at least as
            many times as rows it moved any env forward: unchanged while no row was written.
        extras: Per-step columns of episode-done hooks by name, (num_envs * capacity, ...), made on first use.
    """

    __slots__ = (
        "act", "act_items", "act_nested", "action_space", "capacity", "env_ids", "extras", "has", "has_episode",
        "last_rows", "next_rows", "num_envs", "obs", "obs_items", "obs_nested", "observation_space", "rewards",
        "terminations", "truncations", "writes",
    )

    def __init__(
        self, num_envs: int, capacity: int, observation_space: gym.Space[Any], action_space: gym.Space[Any]
    ) -> None:
        n, c = int(num_envs), int(capacity)
        self.num_envs, self.capacity = n, c
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_nested = isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self.act_nested = isinstance(action_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self.obs = [a.reshape((n * c, *leaf.shape))
                    for a, leaf in zip(allocate(observation_space, (n, c)), leaves(observation_space))]
        self.act = [a.reshape((n * c, *leaf.shape)) for a, leaf in zip(allocate(action_space, (n, c)), leaves(action_space))]
        self.obs_items = [row_items(a) for a in self.obs]
        self.act_items = [row_items(a) for a in self.act]
        self.rewards = np.zeros(n * c, dtype=np.float64)
        self.terminations = np.zeros(n * c, dtype=bool)
        self.truncations = np.zeros(n * c, dtype=bool)
        self.has = np.zeros(n * c, dtype=bool)
        self.next_rows = np.arange(1, n * c + 1, dtype=np.intp)
        self.next_rows[c - 1 :: c] -= c
        self.env_ids = np.arange(n)
        self.last_rows = np.zeros(n, dtype=np.intp)
        self.has_episode = np.zeros(n, dtype=bool)
        self.writes = 0
        self.extras: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        """Forget every row: no step rows, no episodes, no hook columns; each env's next row is its row 0."""
        c = self.capacity
        self.writes += 1
        self.has.fill(False)
        # the row "before" row 0, so that an env's first episode starts in its row 0
        self.last_rows[:] = np.arange(self.num_envs, dtype=np.intp) * c + (c - 1)
        self.has_episode.fill(False)
        self.extras.clear()

    def by_env(self, column: np.ndarray) -> np.ndarray:
        """A flat column seen as (num_envs, capacity, ...) (a view).

        Args:
            column: One of the flat columns (``obs``, ``act``, ``rewards``, ...).

        Returns:
            The same memory, one ring per env.
        """
        return column.reshape((self.num_envs, self.capacity, *column.shape[1:]))

    def observations(self, rows: np.ndarray) -> Any:
        """The observations at flat ``rows`` (any shape of index array), batched as the space nests them.

        Args:
            rows: Flat rows.

        Returns:
            Fresh arrays (or a dict/tuple of them), ``rows.shape`` leading.
        """
        return gather(self.observation_space, self.obs, rows)

    def actions(self, rows: np.ndarray) -> Any:
        """The actions at flat ``rows``, batched as the action space nests them.

        Args:
            rows: Flat rows.

        Returns:
            Fresh arrays (or a dict/tuple of them), ``rows.shape`` leading.
        """
        return gather(self.action_space, self.act, rows)

    def write_observations(self, rows: np.ndarray, obs_batch: Any) -> None:
        """Put a batch of observations at flat ``rows``, nothing else changed (the ring's writes call this; on
        its own, only to replace the observation of an env's newest row, which holds no step).

        Args:
            rows: Distinct flat rows.
            obs_batch: Their observations, batched in ``rows`` order.
        """
        obs = flatten_batch(self.observation_space, obs_batch) if self.obs_nested else (obs_batch,)
        for store, items, value in zip(self.obs, self.obs_items, obs):
            scatter_rows(store, items, rows, value)

    def running(self) -> np.ndarray:
        """Whether each env has an episode going on: started, and its last step (if any) did not end it.

        Returns:
            One bool per env.
        """
        capacity = self.capacity
        base = self.env_ids * capacity
        last_step = base + (self.last_rows - base - 1) % capacity
        ended = self.has[last_step] & (self.terminations[last_step] | self.truncations[last_step])
        return self.has_episode & ~ended

    def any_nan(self, rows: np.ndarray) -> bool:
        """Whether a floating-point observation, action or reward of the transitions at step ``rows``, or the
        next observation of one, is NaN.

        Args:
            rows: Flat step rows.

        Returns:
            True where some value is NaN.
        """
        both = np.concatenate([rows, self.next_rows.take(rows)])
        for array in self.obs:
            if array.dtype.kind in "fc" and np.isnan(array.take(both, axis=0)).any():
                return True
        for array in (*self.act, self.rewards):
            if array.dtype.kind in "fc" and np.isnan(array.take(rows, axis=0)).any():
                return True
        return False
