"""StepBlock: several steps of every env, time-major, staged on their way to the rings.

A backend that steps every env at once and restarts finished envs by itself on their next step
(NEXT_STEP autoreset: gymnasium vector entry points, EnvPool) gives the same bookkeeping every step:
one row per env, some of them restarts. Writing each step to the rings, the ledger and the checks
costs a dozen small numpy calls per step, as much as a fast vector env's own step. Staged here
instead (a row copy per array), the steps go to the rings in one write per array
(VectorRingBuffer.add_steps), which is what keeps the Collector near the raw loop's speed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.spaces import allocate, unflatten_batch

__all__ = ["StepBlock"]


class StepBlock:
    """Up to ``size`` steps of ``num_envs`` envs, row k holding step k: ``obs``/``actions`` (flat leaf form,
    each (size, num_envs, ...)), ``rewards`` (float64), ``terminations``, ``truncations`` and ``done``
    (``terminations | truncations``), all (size, num_envs).

    An env that was done in a step restarts in the next one: that row holds the first observation of its
    next episode, not a transition. ``first_restarts`` marks the envs restarting in row 0 (done before the
    block); :meth:`restarts` gives that mask for every row.
    """

    def __init__(
        self, num_envs: int, size: int, observation_space: gym.Space[Any], action_space: gym.Space[Any]
    ) -> None:
        if size < 1:
            raise ValueError(f"a StepBlock holds at least one step, got size={size}")
        self.num_envs = int(num_envs)
        self.size = int(size)
        self.observation_space = observation_space
        self.action_space = action_space
        self.renew()

    def renew(self) -> None:
        """Start empty with fresh arrays, so that views of rows handed out before (observations a policy
        acted on) stay as they were."""
        shape = (self.size, self.num_envs)
        self.obs: list[np.ndarray] = allocate(self.observation_space, shape)
        self.actions: list[np.ndarray] = allocate(self.action_space, shape)
        self.rewards = np.empty(shape, dtype=np.float64)
        self.terminations = np.empty(shape, dtype=bool)
        self.truncations = np.empty(shape, dtype=bool)
        self.done = np.empty(shape, dtype=bool)
        self.clear()

    def clear(self) -> None:
        """Start empty, writing over the same arrays."""
        self.first_restarts = np.zeros(self.num_envs, dtype=bool)
        self.count = 0
        self.checked = 0  # rows whose observations were checked already (the Collector checks a policy's)

    def restarts(self, stop: int | None = None) -> np.ndarray:
        """(rows, num_envs) bool, a new array: which envs restart in each of the rows [0, stop)."""
        stop = self.count if stop is None else stop
        out = np.empty((stop, self.num_envs), dtype=bool)
        if stop:
            out[0] = self.first_restarts
            out[1:] = self.done[: stop - 1]
        return out

    def restart_row(self, k: int) -> np.ndarray:
        """Which envs restart in row k (a view)."""
        return self.first_restarts if k == 0 else self.done[k - 1]

    def transitions(self) -> int:
        """Transitions staged: rows that are not restarts."""
        k = self.count
        if k == 0:
            return 0
        return k * self.num_envs - int(np.count_nonzero(self.first_restarts)) - int(np.count_nonzero(self.done[: k - 1]))

    def obs_rows(self, first: int, stop: int) -> Any:
        """The observations of rows [first, stop) as one batch of (stop - first) * num_envs values (views)."""
        return unflatten_batch(
            self.observation_space, [leaf[first:stop].reshape(-1, *leaf.shape[2:]) for leaf in self.obs]
        )

    def obs_row(self, k: int) -> Any:
        """The observations of row k, one per env (views)."""
        return unflatten_batch(self.observation_space, [leaf[k] for leaf in self.obs])
