"""FlatRows: a ring's rows addressed by flat index (``env_id * capacity + row``), for code outside the rings
that lays its own index over them (vcollect.tianshou's replay-buffer adapter).

What it reads is the ring's own storage (no copies except where a gather makes one); the one write it offers
replaces the observation of each env's newest row, which holds no step yet.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vcollect.buffers.ring import VectorRingBuffer
from vcollect.buffers.row_writes import scatter_rows
from vcollect.spaces import flatten_batch, unflatten_batch

__all__ = ["FlatRows"]


class FlatRows:
    """Flat-index access to a ring with its spaces bound.

    A *step row* (``has``) holds a transition; the row after it (``next_rows``) its next observation.

    Args:
        ring: The rings to read (their spaces bound).
    """

    __slots__ = ("ring",)

    def __init__(self, ring: VectorRingBuffer) -> None:
        self.ring = ring

    @property
    def has(self) -> np.ndarray:
        """Whether each flat row holds a transition (a view; do not write)."""
        return self.ring._has_flat

    @property
    def rewards(self) -> np.ndarray:
        """Each flat row's reward (a view)."""
        return self.ring._rew_flat

    @property
    def terminations(self) -> np.ndarray:
        """Each flat row's termination flag (a view)."""
        return self.ring._term_flat

    @property
    def truncations(self) -> np.ndarray:
        """Each flat row's truncation flag (a view)."""
        return self.ring._trunc_flat

    @property
    def next_rows(self) -> np.ndarray:
        """The flat index of the row after each flat row, inside its env's ring (a view)."""
        return self.ring._next_flat

    @property
    def writes(self) -> int:
        """A counter of the ring's writes that move rows (adds, episode starts, resets): unchanged while no row
        was written."""
        return self.ring._writes

    @property
    def last_rows(self) -> np.ndarray:
        """Each env's newest flat row (a copy)."""
        return self.ring._last_flat.copy()

    def running(self) -> np.ndarray:
        """Whether each env has an episode going on: started, and its last step (if any) did not end it.

        Returns:
            One bool per env.
        """
        ring = self.ring
        capacity = ring.capacity
        base = ring._all_ids * capacity
        last_step = base + (ring._last_flat - base - 1) % capacity
        ended = ring._has_flat[last_step] & (ring._term_flat[last_step] | ring._trunc_flat[last_step])
        return ring._has_episode & ~ended

    def observations(self, rows: np.ndarray) -> Any:
        """The observations at flat ``rows`` (any shape of index array), batched as the space nests them.

        Args:
            rows: Flat rows.

        Returns:
            Fresh arrays (or a dict/tuple of them), ``rows.shape`` leading.
        """
        return unflatten_batch(self.ring.observation_space, [a.take(rows, axis=0) for a in self.ring._obs_flat])

    def actions(self, rows: np.ndarray) -> Any:
        """The actions at flat ``rows``, batched as the action space nests them.

        Args:
            rows: Flat rows.

        Returns:
            Fresh arrays (or a dict/tuple of them), ``rows.shape`` leading.
        """
        return unflatten_batch(self.ring.action_space, [a.take(rows, axis=0) for a in self.ring._act_flat])

    def any_nan(self, rows: np.ndarray) -> bool:
        """Whether a floating-point observation, action or reward of the transitions at step ``rows``, or the
        next observation of one, is NaN.

        Args:
            rows: Flat step rows.

        Returns:
            True where some value is NaN.
        """
        ring = self.ring
        both = np.concatenate([rows, ring._next_flat.take(rows)])
        for array in ring._obs_flat:
            if array.dtype.kind in "fc" and np.isnan(array.take(both, axis=0)).any():
                return True
        for array in (*ring._act_flat, ring._rew_flat):
            if array.dtype.kind in "fc" and np.isnan(array.take(rows, axis=0)).any():
                return True
        return False

    def set_latest_obs(self, env_ids: np.ndarray, obs_batch: Any) -> None:
        """Replace the observation of each env's newest row (which holds no step): the observation its next
        step starts from.

        Args:
            env_ids: Distinct env ids, each with a started episode.
            obs_batch: Their observations, batched in ``env_ids`` order.
        """
        ring = self.ring
        rows = ring._last_flat[np.asarray(env_ids)]
        nested = ring._obs_nested
        obs = flatten_batch(ring.observation_space, obs_batch) if nested else (obs_batch,)
        for store, items, value in zip(ring._obs_flat, ring._obs_items, obs):
            scatter_rows(store, items, rows, value)
