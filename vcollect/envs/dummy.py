"""DummyVectorEnv: every env in this process, stepped one after another (the reference backend)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.envs.base import (
    BaseVectorEnv,
    EnvFailure,
    EnvIds,
    ResetResult,
    Seeds,
    StepResetResult,
    StepResult,
    check_reset_options,
    env_spaces,
    normalize_seeds,
    step_values_failure,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply, read_attr, write_attr

__all__ = ["DummyVectorEnv"]


class DummyVectorEnv(BaseVectorEnv):
    """Runs the envs in-process in a loop; async calls complete at dispatch time.

    Observations are written into preallocated rows (cast to the space dtypes) and returned as copies,
    so results are bit-identical to the subprocess backend for the same seeds and actions.

    No ``timeout``: the envs run in this process, and a step or reset that never returns cannot be
    interrupted from here; use SubprocVectorEnv(timeout=) or RayVectorEnv(timeout=) for envs that may
    hang (``vcollect collect --timeout`` ends the whole process instead).

    Args:
        env_fns: One zero-argument factory per env.

    Raises:
        ValueError: No factory, or envs whose spaces differ.
        EnvOutputError: An env has no observation or action space.
    """

    capabilities = EnvCapabilities(step_reset=True)

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        if len(env_fns) == 0:
            raise ValueError("DummyVectorEnv needs at least one env factory")
        self.envs: list[gym.Env] = [fn() for fn in env_fns]
        try:
            spaces = [env_spaces(env, i) for i, env in enumerate(self.envs)]
        except BaseException:
            for e in self.envs:
                with contextlib.suppress(Exception):
                    e.close()
            raise
        first = self.envs[0]
        for i, (obs_space, act_space) in enumerate(spaces[1:], start=1):
            if obs_space != spaces[0][0] or act_space != spaces[0][1]:
                for e in self.envs:
                    e.close()
                raise ValueError(
                    f"env {i} has spaces {obs_space}, {act_space}; env 0 has "
                    f"{spaces[0][0]}, {spaces[0][1]}: all envs must share their spaces"
                )
        super().__init__(len(self.envs), *spaces[0])
        self.env_spec = first.spec
        self.metadata = dict(first.metadata)
        self._obs_rows = self.obs_layout.allocate(self.num_envs)
        self._obs_row_views = self.obs_layout.row_views(self._obs_rows, range(self.num_envs))
        self._reset_rows = self.obs_layout.allocate(self.num_envs)  # first observations of step_reset restarts
        self._reset_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self._restarted: list[int] = []
        self._no_ids = np.zeros(0, dtype=np.int64)  # no env restarted (empty and read-only: safe to share)
        self._no_ids.flags.writeable = False

    # -- the hot path: a synchronous step without the async bookkeeping -----------------------------
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None) in order.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), fresh arrays in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        ids = self._idle_ids(env_ids)
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        self._run_steps(ids, leaves)
        if self._failures:
            self._raise_failure()
        return self._gather_step(None if env_ids is None else ids)

    def step_reset(
        self,
        actions: Any,
        env_ids: EnvIds = None,
        *,
        reset_seeds: Sequence[int | None],
        may_reset: np.ndarray | None = None,
        options: dict | None = None,
    ) -> StepResetResult:
        """Step env_ids (all when None) and reset each env that ends right after its step, in one pass.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).
            reset_seeds: The seed of each env id's reset, should it end.
            may_reset: A bool per env id; False leaves an ended env ended (None: all True).
            options: Passed to every reset.

        Returns:
            The step's results, and the env ids reset with their first observations and infos.

        Raises:
            EnvWorkerError: An env raised (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        ids = self._idle_ids(env_ids)
        leaves = self._step_reset_leaves(actions, ids, reset_seeds, options)
        allowed = None if may_reset is None else may_reset.tolist()
        self._restarted = []
        self._run_steps(ids, leaves, True, reset_seeds, allowed, options)
        if self._failures:
            self._raise_failure()
        obs, rewards, terms, truncs, infos = self._gather_step(None if env_ids is None else ids)
        if not self._restarted:
            return StepResetResult(obs, rewards, terms, truncs, infos, self._no_ids, None, [])
        restarted = np.array(self._restarted, dtype=np.int64)
        reset_obs = self.obs_layout.gather(self._reset_rows, restarted)
        reset_infos = [self._reset_infos[i] for i in self._restarted]
        return StepResetResult(obs, rewards, terms, truncs, infos, restarted, reset_obs, reset_infos)

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None) in order.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), fresh, in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        ids = self._idle_ids(env_ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        self._run_resets(ids, seed_list, options)
        self._raise_failure()
        return self._gather_reset(ids)

    def _run_steps(
        self, ids: np.ndarray, leaves: list[np.ndarray], restart: bool = False, seeds: Sequence[int | None] = (),
        allowed: Sequence[bool] | None = None, options: dict | None = None,
    ) -> None:
        """Step ids in order, writing the step rows; with ``restart``, reset each env that ends at once (with
        the seed of its position in ids, where ``allowed`` (None: all) lets it)."""
        envs = self.envs
        infos = self._infos
        rewards, terms, truncs = self._rewards, self._terminations, self._truncations
        layout = self.obs_layout
        rows = self._obs_rows
        obs_views = self._obs_row_views
        flat_obs = rows[0] if layout.flat else None
        act_layout = self.act_layout
        id_list = ids.tolist()
        actions: Any
        if not act_layout.flat:
            actions = [act_layout.read_row(leaves, j) for j in range(len(id_list))]
        elif act_layout.discrete[0]:  # Discrete actions go to the envs as numpy scalars, like in the workers
            actions = list(leaves[0])
        else:
            actions = leaves[0]
        for i, action in zip(id_list, actions):
            try:
                obs, reward, terminated, truncated, info = envs[i].step(action)
            except Exception as exc:
                self._failures.append(EnvFailure(i, "env", f"step raised {exc!r}", traceback.format_exc()))
                continue
            try:
                if obs_views is not None:
                    obs_views[i][...] = obs
                elif flat_obs is not None:
                    flat_obs[i] = obs
                else:
                    layout.write_row(rows, i, obs)
            except Exception as exc:
                self._failures.append(_obs_failure(i, exc, self.single_observation_space, "step", obs))
                continue
            try:
                rewards[i] = reward
                terms[i] = terminated
                truncs[i] = truncated
            except Exception:
                self._failures.append(step_values_failure(i, (reward, terminated, truncated), traceback.format_exc()))
                continue
            infos[i] = info
            if restart and (terminated or truncated):  # as true as the flags just stored (numpy's bool cast)
                j = id_list.index(i)  # the env's position in this call (rare: only for envs that ended)
                if allowed is None or allowed[j]:
                    self._restart(i, seeds[j], options)

    def _restart(self, i: int, seed: int | None, options: dict | None) -> None:
        """Reset env i inside step_reset: its first observation goes to the reset rows."""
        if self._reset_one(i, seed, options, self._reset_rows, self._reset_infos):
            self._restarted.append(i)

    def _reset_one(
        self, i: int, seed: int | None, options: dict | None, rows: list[np.ndarray], infos: list[dict[str, Any]]
    ) -> bool:
        """Reset env i into row i of ``rows``/``infos``; False (the failure recorded) if that failed."""
        try:
            obs, info = self.envs[i].reset(seed=seed, options=options)
        except Exception as exc:
            self._failures.append(EnvFailure(i, "env", f"reset raised {exc!r}", traceback.format_exc()))
            return False
        try:
            self.obs_layout.write_row(rows, i, obs)
        except Exception as exc:
            self._failures.append(_obs_failure(i, exc, self.single_observation_space, "reset", obs))
            return False
        infos[i] = info
        return True

    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        n_failed = len(self._failures)
        self._run_steps(ids, action_leaves)
        self._mark_done(ids, n_failed)

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        n_failed = len(self._failures)
        self._run_resets(ids, seeds, options)
        self._mark_done(ids, n_failed)

    def _run_resets(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        for i, seed in zip(ids.tolist(), seeds):
            self._reset_one(i, seed, options, self._obs_rows, self._infos)

    def _mark_done(self, ids: np.ndarray, n_failed_before: int) -> None:
        """Mark ids done, except those that failed (they leave the in-flight set)."""
        self._done[ids] = True
        failed = [f.env_id for f in self._failures[n_failed_before:]]
        if failed:
            self._flight[failed] = 0
            self._done[failed] = False

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        envs = self.envs
        if write:
            return [write_attr(envs[i], name, value) for i in ids]
        return [read_attr(envs[i], name) for i in ids]

    def render(self) -> list[Any] | None:
        """Render every env.

        Returns:
            One render() result per env; None when every env returned None.

        Raises:
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        frames = [env.render() for env in self.envs]
        return None if all(f is None for f in frames) else frames

    def close(self) -> None:
        """Close every env; idempotent."""
        if self.closed:
            return
        self.closed = True
        for env in self.envs:
            env.close()


def _obs_failure(env_id: int, exc: Exception, space: gym.Space, call: str, obs: Any) -> EnvFailure:
    message = f"{call} returned an observation of type {type(obs).__name__} that does not fit {space}: {exc!r}"
    return EnvFailure(env_id, "obs", message, traceback.format_exc())
