"""What backends hand the collectors besides the plain protocol results: a step of every env
(``AllEnvStep``), a step with restarts (``StepResetResult``) and several staged steps (``StepBlock``),
whose observations may be arrays the backend handed over (``HeldRows``, from vcollect.held_rows, which the
rings import too).

They live with the env protocol because backends fill them; the collectors only read them (and write
the actions they chose into a StepBlock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from numpy.typing import ArrayLike

from vcollect.held_rows import HeldRows
from vcollect.spaces import allocate, leaves, unflatten_batch

__all__ = ["AllEnvStep", "HeldRows", "StepBlock", "StepResetResult"]  # HeldRows: vcollect.held_rows


class StepResetResult(NamedTuple):
    """What ``step_reset`` returns: the step of every env id, then the envs it restarted.

    Every array is fresh: the backend keeps no reference to it.

    Attributes:
        obs: The step's observations, one row per stepped env id (an env that ended: its final one).
        rewards: The rewards (float64).
        terminations: The terminations (bool).
        truncations: The truncations (bool).
        infos: One info dict per stepped env id.
        reset_ids: The env ids restarted, a subsequence of the stepped ones.
        reset_obs: Their first observations after the restart, in ``reset_ids`` order (None: none).
        reset_infos: Their reset infos, in ``reset_ids`` order.
    """

    obs: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: list[dict[str, Any]]
    reset_ids: np.ndarray
    reset_obs: Any
    reset_infos: list[dict[str, Any]]


@dataclass(slots=True)
class AllEnvStep:
    """One step of every env of a backend that cannot step a subset.

    Attributes:
        obs: The latest observation of every env (what the policy sees next), fresh arrays.
        next_obs: The next observation of each transition row (``obs``, except SAME_STEP rows of envs that
            finished, which hold ``info["final_obs"]``).
        rewards: One per row (float64), possibly an array the env reuses: read it before the next step.
        terminations: One per row (bool), the same.
        truncations: One per row (bool), the same.
        infos: The vector info dict in gymnasium's layout (values batched in env id order, ``_key`` masks;
            vcollect.infos.split_vector_infos), a restart row's entries from its reset.
        transitions: Bool mask of the rows that are transitions, None when all are; where given, the other
            rows are exactly the restarts of ``started`` (NEXT_STEP).
        started: Env ids whose next episode the env started by itself in this step (its first observation
            is their row of ``obs``).
        ended: Bool mask of the transition rows that ended an episode, a fresh array the backend never
            writes to.
    """

    obs: Any
    next_obs: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, Any]
    transitions: np.ndarray | None
    started: np.ndarray
    ended: np.ndarray


class StepBlock:
    """Up to ``size`` steps of ``num_envs`` envs, row k holding step k: ``obs``/``actions`` (flat leaf form,
    each (size, num_envs, ...)), ``rewards`` (float64), ``terminations`` and ``truncations``, all
    (size, num_envs); :meth:`done_rows` gives ``terminations | truncations`` of the rows, worked out when
    first read (one operation for many rows, not one a step).

    A backend that steps every env at once and restarts finished envs on their next step (NEXT_STEP
    autoreset: gymnasium vector entry points, EnvPool) gives one row per env every step, some of them
    restarts; staged here (a row copy per array) the steps go to the rings in one write per array, which
    keeps the Collector near the raw loop's speed. An env that was done in a step restarts in the next
    one: that row holds the first observation of its next episode, not a transition. ``first_restarts``
    marks the envs restarting in row 0 (done before the block); :meth:`restarts` gives that mask for every
    row. Backends add rows with :meth:`append_row`, the collector their actions with :meth:`set_actions` (one
    action leaf: through ``action_rows``).

    ``hold_obs=True`` (a backend whose observation arrays are fresh every step and never written to again:
    EnvPool) keeps each row's observation arrays by reference instead of copying them into ``obs``
    (then empty): the rings copy every frame once, from the backend's array. Read observations through
    :meth:`obs_leaf_row`, :meth:`obs_row`, :meth:`obs_rows` and :meth:`obs_leaves`, which serve both modes.

    Args:
        num_envs: The envs of the backend.
        size: The most steps (rows) the block holds.
        observation_space: The single observation space.
        action_space: The single action space.
        hold_obs: Keep observation arrays by reference instead of copying them (see above).

    Raises:
        ValueError: ``size < 1``.
    """

    def __init__(
        self, num_envs: int, size: int, observation_space: gym.Space[Any], action_space: gym.Space[Any],
        *, hold_obs: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError(f"a StepBlock holds at least one step, got size={size}")
        self.num_envs = int(num_envs)
        self.size = int(size)
        self.observation_space = observation_space
        self.action_space = action_space
        self.hold_obs = bool(hold_obs)
        self._obs_shapes = [(self.num_envs, *leaf.shape) for leaf in leaves(observation_space)]
        self._obs_dtypes = [leaf.dtype for leaf in leaves(observation_space)]
        self._env_order = np.arange(self.num_envs)
        shape = (self.size, self.num_envs)
        self.obs: list[np.ndarray] = [] if self.hold_obs else allocate(self.observation_space, shape)
        self.actions: list[np.ndarray] = allocate(self.action_space, shape)
        self.rewards = np.empty(shape, dtype=np.float64)
        self.terminations = np.empty(shape, dtype=bool)
        self.truncations = np.empty(shape, dtype=bool)
        self._done = np.empty(shape, dtype=bool)  # rows [0, _done_filled) hold terminations | truncations
        self._done_filled = 0
        self.count = 0
        # views of each row, made once: writing through one (view[...] = value) makes no view per write
        self._step_rows = list(zip(self.rewards, self.terminations, self.truncations, self._done))
        self.action_rows: list[np.ndarray] = list(self.actions[0]) if len(self.actions) == 1 else []
        """Views of the rows of the one action leaf (empty where actions have several leaves): the collector
        writes a row's actions as ``action_rows[k][...] = actions``."""
        self._obs_rows = self._row_views(self.obs)
        self.clear()

    def _row_views(self, arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
        """Per row, a view of that row of each array."""
        if not arrays:
            return [[] for _ in range(self.size)]
        return [list(rows) for rows in zip(*arrays)]

    @property
    def obs_leaf_count(self) -> int:
        """Observation leaves per row."""
        return len(self._obs_shapes)

    def renew(self) -> None:
        """Start empty with fresh observation arrays, so that views of rows handed out before (observations a
        policy acted on) stay as they were; the other arrays, of which no views are handed out, are written
        over."""
        if not self.hold_obs:
            self.obs = allocate(self.observation_space, (self.size, self.num_envs))
            self._obs_rows = self._row_views(self.obs)
        self.clear()

    def clear(self) -> None:
        """Start empty, writing over the same arrays (the done rows of the steps staged are worked out first:
        a backend may hold the last one as its restarts, see :meth:`append_row`)."""
        self._fill_done(self.count)
        self._done_filled = 0
        self.first_restarts = np.zeros(self.num_envs, dtype=bool)
        self._held: list[list[np.ndarray]] = [[] for _ in self._obs_shapes]  # hold_obs: [leaf][row]
        self.count = 0
        self.checked = 0  # rows whose observations were checked already (the Collector checks a policy's)

    def append_row(
        self,
        obs_leaves: Sequence[ArrayLike],
        rewards: ArrayLike,
        terminations: ArrayLike,
        truncations: ArrayLike,
        restarting: np.ndarray,
        env_ids: np.ndarray | None = None,
        *,
        handed_over: bool = False,
    ) -> np.ndarray:
        """Write the next row (cast to the block's dtypes).

        Args:
            obs_leaves: One array per observation leaf, each (num_envs, ...).
            rewards: One per env.
            terminations: One per env.
            truncations: One per env.
            restarting: The envs that were done before this step (the caller's state; copied as
                ``first_restarts`` when this is row 0).
            env_ids: The env id of each position of the arrays when they are not in env id order (an
                all-env backend answering out of order); None: in order.
            handed_over: The caller never writes to ``obs_leaves`` again, so a ``hold_obs`` block keeps
                those of the block's dtype and shape as they are (any other value is copied).

        Returns:
            The row's ``done`` mask (``terminations | truncations``), a view of the block's row, worked out
            when the block's done rows are next read or the block is cleared: a backend passes it as
            ``restarting`` to the next block's row 0 (after the flush that clears this one).

        Raises:
            ValueError: The block is full, the observation leaves do not match, or ``env_ids`` is not an
                ordering of every env id.
        """
        k = self.count
        if k == self.size:
            raise ValueError(f"the StepBlock is full ({self.size} rows): record and clear it first")
        if len(obs_leaves) != len(self._obs_shapes):
            raise ValueError(f"got {len(obs_leaves)} observation leaves, the block holds {self.obs_leaf_count}")
        if env_ids is not None and not np.array_equal(np.sort(env_ids), self._env_order):
            raise ValueError(f"env_ids must name each of the {self.num_envs} env ids once, got {env_ids!r}")
        if k == 0:
            self.first_restarts = np.array(restarting, dtype=bool)  # a copy: it may be a view of a row to reuse
        at: Any = ... if env_ids is None else env_ids  # in row k: every env, or the envs in the given order
        if self.hold_obs:
            for held, value, shape, dtype in zip(self._held, obs_leaves, self._obs_shapes, self._obs_dtypes):
                held.append(_own_row(value, shape, dtype, env_ids, handed_over))
        else:
            views = self._obs_rows[k]
            if len(views) == 1:  # (no loop for the commonest case)
                views[0][at] = obs_leaves[0]
            else:
                for view, value in zip(views, obs_leaves):
                    view[at] = value
        reward_row, termination_row, truncation_row, done = self._step_rows[k]
        reward_row[at] = rewards
        termination_row[at] = terminations
        truncation_row[at] = truncations
        self.count = k + 1
        return done

    def done_rows(self, stop: int | None = None) -> np.ndarray:
        """Which envs' episodes ended in each of the rows [0, stop).

        Args:
            stop: The row to stop before (None: every staged row).

        Returns:
            (rows, num_envs) bool, ``terminations | truncations``: a view of the block's array.

        Raises:
            IndexError: A row past those staged.
        """
        stop = self.count if stop is None else stop
        if stop > self.count:
            raise IndexError(f"rows up to {stop} asked for, the block holds {self.count}")
        self._fill_done(stop)
        return self._done[:stop]

    def _fill_done(self, stop: int) -> None:
        """Work out the done rows up to ``stop`` (staged rows) not worked out yet, in one operation."""
        first = self._done_filled
        if stop > first:
            np.logical_or(self.terminations[first:stop], self.truncations[first:stop], out=self._done[first:stop])
            self._done_filled = stop

    def set_actions(self, k: int, action_leaves: Sequence[ArrayLike]) -> None:
        """Store the actions taken in a row.

        Args:
            k: The row.
            action_leaves: One array per action leaf, each (num_envs, ...).

        Raises:
            IndexError: Row ``k`` is not staged.
            ValueError: Not one array per action leaf.
        """
        if not 0 <= k < self.count:
            raise IndexError(f"row {k} is not staged (the block holds {self.count} rows)")
        if len(action_leaves) != len(self.actions):
            raise ValueError(f"got {len(action_leaves)} action leaves, the block holds {len(self.actions)}")
        for leaf, value in zip(self.actions, action_leaves):
            leaf[k] = value

    def restarts(self, stop: int | None = None) -> np.ndarray:
        """Which envs restart in each of the rows [0, stop).

        Args:
            stop: The row to stop before (None: every staged row).

        Returns:
            (rows, num_envs) bool, a new array.
        """
        stop = self.count if stop is None else stop
        out = np.empty((stop, self.num_envs), dtype=bool)
        if stop:
            out[0] = self.first_restarts
            out[1:] = self.done_rows(stop - 1)
        return out

    def restart_row(self, k: int) -> np.ndarray:
        """Which envs restart in a row.

        Args:
            k: The row.

        Returns:
            (num_envs,) bool, a view.
        """
        return self.first_restarts if k == 0 else self.done_rows(k)[k - 1]

    def transitions(self) -> int:
        """Transitions staged: rows that are not restarts.

        Returns:
            Their count over every env.
        """
        k = self.count
        if k == 0:
            return 0
        return k * self.num_envs - int(np.count_nonzero(self.first_restarts)) - int(np.count_nonzero(self.done_rows(k - 1)))

    def obs_leaf_row(self, k: int) -> list[np.ndarray]:
        """A row's observations in flat leaf form.

        Args:
            k: The row.

        Returns:
            One array (num_envs, ...) per leaf (views, or the held arrays); the list is the block's own: read
            it, do not change it.
        """
        if self.hold_obs:
            return [held[k] for held in self._held]
        return self._obs_rows[k]

    def obs_leaves(self, stop: int) -> list[np.ndarray] | list[HeldRows]:
        """The observations of rows [0, stop) in flat leaf form.

        Args:
            stop: The row to stop before.

        Returns:
            One per leaf, each (stop, num_envs, ...): slices of ``obs``, or HeldRows of the held arrays
            (the rings take both).
        """
        if self.hold_obs:
            return [HeldRows(held[:stop]) for held in self._held]
        return [leaf[:stop] for leaf in self.obs]

    def obs_rows(self, first: int, stop: int) -> Any:
        """The observations of rows [first, stop) as one batch.

        Args:
            first: The first row.
            stop: The row to stop before.

        Returns:
            (stop - first) * num_envs observations, batched (views; with ``hold_obs`` a copy, joined from
            the held arrays).
        """
        if self.hold_obs:
            return unflatten_batch(self.observation_space, [np.concatenate(held[first:stop]) for held in self._held])
        return unflatten_batch(
            self.observation_space, [leaf[first:stop].reshape(-1, *leaf.shape[2:]) for leaf in self.obs]
        )

    def obs_row(self, k: int) -> Any:
        """The observations of a row.

        Args:
            k: The row.

        Returns:
            One observation per env, batched (views, or the held arrays).
        """
        return unflatten_batch(self.observation_space, self.obs_leaf_row(k))


def _own_row(
    value: ArrayLike, shape: tuple[int, ...], dtype: np.dtype[Any], env_ids: np.ndarray | None, handed_over: bool
) -> np.ndarray:
    """A row of one leaf for a hold_obs block: ``value`` itself where it was handed over and is already a
    C-contiguous array of the leaf's dtype and shape in env id order, else a new array holding it."""
    if env_ids is not None:
        row = np.empty(shape, dtype)
        row[env_ids] = value
        return row
    if (handed_over and type(value) is np.ndarray and value.dtype == dtype and value.shape == shape
            and value.flags.c_contiguous):
        return value
    row = np.empty(shape, dtype)
    row[...] = value
    return row
