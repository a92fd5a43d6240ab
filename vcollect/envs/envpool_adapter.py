"""EnvPoolVectorEnv: an EnvPool pool (``envpool.make(..., env_type="gymnasium")``) behind the VectorEnv protocol.

EnvPool runs its envs on C++ threads. In sync mode (``batch_size == num_envs``) any subset of env ids can
be stepped or reset and ``recv`` waits for all of them; in async mode (``batch_size < num_envs``) ``recv``
returns exactly ``batch_size`` results, of whichever envs finished first (``info["env_id"]``), and can only
be called while at least that many envs are in flight. Needs the ``envpool`` extra.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from vcollect.envs.base import (
    AsyncResetResult,
    AsyncStepResult,
    BaseVectorEnv,
    EnvIds,
    ResetResult,
    Seeds,
    StepResult,
    normalize_seeds,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import check_attr_name
from vcollect.envs.steps import AllEnvStep, StepBlock
from vcollect.errors import EnvAttributeError, EnvWorkerError

__all__ = ["EnvPoolVectorEnv", "is_envpool"]

_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False


def is_envpool(obj: Any) -> bool:
    """Whether obj is an EnvPool pool (its classes are made at run time; its mixins live in ``envpool``).

    Args:
        obj: Anything.
    """
    return any(cls.__module__.startswith("envpool.") for cls in type(obj).__mro__)


class EnvPoolVectorEnv(BaseVectorEnv):
    """Adapter for an EnvPool pool made with ``env_type="gymnasium"``, in sync or async mode.

    EnvPool cannot seed individual resets: every env's generator is seeded once, when the pool is made,
    from the pool's seed (recorded in ``seed``). Reset seeds passed to ``reset`` are ignored and
    ``seeded_resets`` is False, so the Collector stores episodes with ``seed=None``; rebuilding the pool
    with the same seed and replaying each env's actions reproduces the data.

    Sync mode: any subset of env ids can be stepped or reset through the VectorEnv protocol, and
    ``step_all`` steps every env in one pool call, letting EnvPool restart finished envs itself on their
    next step (its NEXT_STEP autoreset) instead of a second pool call for resets; ``steps_all_envs`` makes
    the Collector use it (see GymnasiumVectorEnv for the AllEnvStep it returns).

    Async mode (``batch_size < num_envs``): ``recv_batch_size`` is the pool's batch size (the
    AsyncCollector keeps at least that many envs in flight), ``recv_any`` returns one batch's steps and
    resets together, and ``num_envs`` must be a multiple of ``batch_size`` so that everything in flight can
    be received. EnvPool's receive cannot time out, so ``timeout`` is not applied. Drive an async pool with
    the AsyncCollector; the Collector accepts sync pools only.

    Its ``capabilities``: ``autoresets`` and ``recv_any`` in both modes, never ``seeded_resets``; sync mode
    ``steps_all_envs`` and ``steps_in_blocks`` (``step_into``); async mode ``recv_batch_size=batch_size``
    and ``step_reset`` (BaseVectorEnv's step, then reset of the ended envs).

    No ``timeout`` for synchronous calls either: EnvPool's C++ threads run in this process and a pool call
    that never returns cannot be interrupted from here (``vcollect collect --timeout`` ends the whole process
    instead).

    Args:
        pool: A pool made by ``envpool.make(..., env_type="gymnasium")``.

    Raises:
        TypeError: ``pool`` is not an EnvPool pool.
        ValueError: An async pool whose ``num_envs`` is not a multiple of its ``batch_size``.
    """

    def __init__(self, pool: Any) -> None:
        if not is_envpool(pool):
            raise TypeError(f"EnvPoolVectorEnv wraps a pool made by envpool.make, got {type(pool).__name__}")
        config = pool.config
        num_envs = int(config["num_envs"])
        batch_size = int(config["batch_size"]) or num_envs
        self.is_async = batch_size < num_envs
        if self.is_async and num_envs % batch_size:
            pool.close()
            raise ValueError(
                f"EnvPool async mode needs num_envs ({num_envs}) to be a multiple of batch_size ({batch_size}): "
                "its recv returns exactly batch_size results, so the last ones in flight could never be received"
            )
        self.pool = pool
        self.seed: int = int(config["seed"])
        self.batch_size = batch_size
        self.capabilities = EnvCapabilities(
            steps_all_envs=not self.is_async,
            autoresets=True,
            seeded_resets=False,
            step_reset=self.is_async,
            steps_in_blocks=not self.is_async,
            recv_batch_size=batch_size if self.is_async else 1,
            recv_any=True,
            hands_over_obs=not self.is_async,  # receive returns new arrays and never writes to them again
        )
        super().__init__(num_envs, pool.single_observation_space, pool.single_action_space)
        self.metadata = dict(getattr(pool, "metadata", {}) or {})
        self.env_spec = None
        self._obs_rows = self.obs_layout.allocate(num_envs)
        self._in_pool = np.zeros(num_envs, dtype=bool)  # sent to the pool, result not received from it yet
        self._restarting = np.zeros(num_envs, dtype=bool)  # finished: the pool restarts them on their next step
        self._in_order = np.arange(num_envs, dtype=np.int32).tobytes()  # info["env_id"] of an in-order answer

    @classmethod
    def make(
        cls, task_id: str, num_envs: int, *, batch_size: int | None = None, seed: int | None = None, **kwargs: Any
    ) -> EnvPoolVectorEnv:
        """``envpool.make(task_id, env_type="gymnasium", ...)`` wrapped (``make_vector(..., backend="envpool")``).

        Args:
            task_id: EnvPool's task id.
            num_envs: How many envs.
            batch_size: The pool's batch size (None or ``num_envs``: sync mode; fewer: async mode).
            seed: The pool's seed (None: EnvPool's default).
            **kwargs: Go to ``envpool.make``.

        Returns:
            The wrapped pool.

        Raises:
            ImportError: envpool is not installed.
            ValueError: envpool has no such task.
        """
        try:
            import envpool
        except ImportError as exc:
            raise ImportError(
                "the envpool backend needs envpool (pip install 'vcollect[envpool]'; Linux x86_64 wheels)"
            ) from exc
        if seed is not None:
            kwargs["seed"] = seed
        try:
            pool = envpool.make(task_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size or num_envs, **kwargs)
        except Exception as exc:
            if task_id not in envpool.list_all_envs():
                raise ValueError(f"envpool has no task {task_id!r}: see envpool.list_all_envs()") from exc
            raise
        return cls(pool)

    # -- sync mode: every call completes at once (a sync pool must not mix resets and steps in one receive)
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None) and wait for them.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), fresh arrays in ``env_ids`` order.

        Raises:
            EnvWorkerError: The pool raised.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, or one with a step or reset in flight.
        """
        if self.is_async or self.closed or self._flight.any():
            return super().step(actions, env_ids)
        ids = self._ids(env_ids)
        self._pool_step(ids, self.act_layout.batch_leaves(actions, ids.size))
        return self._gather_step(None if env_ids is None else ids)

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None) and wait for them.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: Ignored: EnvPool seeds each env once, when the pool is made (see the class docstring).
            options: Must be empty: EnvPool resets take no options.

        Returns:
            (batched observations, one info dict per env id), fresh, in ``env_ids`` order.

        Raises:
            EnvWorkerError: The pool raised.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, options given, or an env id with a step or reset in flight.
        """
        if self.is_async or self.closed or self._flight.any():
            return super().reset(env_ids, seeds, options)
        ids = self._ids(env_ids)
        normalize_seeds(seeds, ids.size)
        _check_options(options)
        self._pool_reset(ids)
        return self._gather_reset(ids)

    def _step_every_env(self, actions: Any, caller: str) -> tuple[Any, ...]:
        """One pool call stepping every env (sync mode, nothing in flight): the pool's raw result."""
        if self.closed:
            self._check_open()
        if self.is_async:
            raise ValueError(f"{caller} needs a sync pool (batch_size == num_envs)")
        if np.count_nonzero(self._flight):
            self._check_idle(self._all_ids)
        leaves = self.act_layout.batch_leaves(actions, self.num_envs)
        try:
            return tuple(self.pool.step(self.act_layout.unflatten(leaves)))
        except Exception as exc:
            raise _pool_error("step", exc) from exc

    def step_all(self, actions: Any) -> AllEnvStep:
        """Sync mode: step every env in one pool call; envs that finished in the previous step_all are
        restarted by the pool instead (their rows are new episodes' first observations).

        Args:
            actions: Every env's action, batched in env id order.

        Returns:
            The step of every env.

        Raises:
            EnvWorkerError: The pool raised.
            CollectorStateError: The vector env is closed.
            ValueError: An async pool.
        """
        obs, rewards, terminations, truncations, info = self._step_every_env(actions, "step_all")
        # rows in env id order (a sync pool answers in the order sent, but the env ids say for sure)
        order = np.asarray(info["env_id"])
        if order.tobytes() == self._in_order:  # one C call; any other dtype or order takes the general path
            obs_leaves = [  # copies: the policy keeps them
                np.array(leaf, dtype=dtype, order="C")
                for leaf, dtype in zip(self.obs_layout.flatten(obs), self.obs_layout.dtypes)
            ]
            rewards_out = np.asarray(rewards, dtype=np.float64)
            terminations_out = np.asarray(terminations, dtype=bool)
            truncations_out = np.asarray(truncations, dtype=bool)
        else:
            obs_leaves = []
            for leaf, dtype in zip(self.obs_layout.flatten(obs), self.obs_layout.dtypes):
                rows = np.empty((self.num_envs, *leaf.shape[1:]), dtype)
                rows[order] = leaf
                obs_leaves.append(rows)
            rewards_out = np.empty(self.num_envs, np.float64)
            rewards_out[order] = rewards
            terminations_out = np.empty(self.num_envs, bool)
            terminations_out[order] = terminations
            truncations_out = np.empty(self.num_envs, bool)
            truncations_out[order] = truncations
            info = _in_env_order(info, order)
        restarted = self._restarting
        done = terminations_out | truncations_out
        self._restarting = done  # never written in place (see _absorb), so ``ended`` may share it
        started = restarted.nonzero()[0]
        if started.size:
            transitions: np.ndarray | None = ~restarted
            ended = done & transitions
        else:
            started, transitions, ended = _NO_IDS, None, done
        batch = self.obs_layout.unflatten(obs_leaves)
        return AllEnvStep(
            batch, batch, rewards_out, terminations_out, truncations_out, info, transitions, started, ended
        )

    def step_into(self, actions: Any, block: StepBlock) -> None:
        """step_all (sync mode), its results put in the block's next row in env id order instead of fresh
        arrays (the pool's own observation arrays, handed over: ``capabilities.hands_over_obs``).

        Args:
            actions: Every env's action, batched in env id order.
            block: The block whose next row receives the step.

        Raises:
            EnvWorkerError: The pool raised.
            CollectorStateError: The vector env is closed.
            ValueError: An async pool, or the block is full.
        """
        obs, rewards, terminations, truncations, info = self._step_every_env(actions, "step_into")
        order = np.asarray(info["env_id"])
        env_ids = None if order.tobytes() == self._in_order else order  # a sync pool answers in order
        self._restarting = block.append_row(
            self.obs_layout.flatten(obs), rewards, terminations, truncations, self._restarting, env_ids,
            handed_over=True,
        )

    def _pool_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        if self._restarting[ids].any():
            raise ValueError(
                f"env ids {ids[self._restarting[ids]].tolist()} finished and were not reset: reset them first"
            )
        try:
            result = self.pool.step(self.act_layout.unflatten(action_leaves), env_id=ids.astype(np.int32))
        except Exception as exc:
            raise _pool_error("step", exc) from exc
        self._absorb(result, steps=True)

    def _pool_reset(self, ids: np.ndarray) -> None:
        try:
            obs, info = self.pool.reset(env_id=ids.astype(np.int32))
        except Exception as exc:
            raise _pool_error("reset", exc) from exc
        self._absorb((obs, None, None, None, info), steps=False)

    def _absorb(self, result: tuple[Any, ...], steps: bool) -> np.ndarray:
        """Write the rows of one pool result by its info["env_id"]; returns those env ids."""
        obs, rewards, terminations, truncations, info = result
        ids = np.asarray(info["env_id"], dtype=np.int64)
        for rows, leaf in zip(self._obs_rows, self.obs_layout.flatten(obs)):
            rows[ids] = leaf
        restarting = self._restarting.copy()  # not in place: a step_all's ``ended`` may be this array
        if steps:
            self._rewards[ids] = rewards
            self._terminations[ids] = terminations
            self._truncations[ids] = truncations
            restarting[ids] = self._terminations[ids] | self._truncations[ids]
        else:
            restarting[ids] = False
        self._restarting = restarting
        keys = [k for k, v in info.items() if k != "players" and not isinstance(v, dict)]
        columns = [np.asarray(info[k]).tolist() for k in keys]
        for env_id, values in zip(ids.tolist(), zip(*columns)):
            self._infos[env_id] = dict(zip(keys, values))
        return ids

    # -- the async half ------------------------------------------------------------------------------
    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        if not self.is_async:
            self._complete(ids, lambda: self._pool_step(ids, action_leaves))
            return
        try:
            self.pool.send(self.act_layout.unflatten(action_leaves), env_id=ids.astype(np.int32))
        except Exception as exc:
            self._flight[ids] = 0
            raise _pool_error("send", exc) from exc
        self._in_pool[ids] = True

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        if not self.is_async:
            _check_options(options)
            self._complete(ids, lambda: self._pool_reset(ids))
            return
        try:
            _check_options(options)
            if ids.size == self.num_envs and not self._in_pool.any():
                self.pool.async_reset()
            else:  # what envpool's own reset(env_id) dispatches, without its blocking receive
                self.pool._reset(ids.astype(np.int32))
        except ValueError:
            self._flight[ids] = 0
            raise
        except Exception as exc:
            self._flight[ids] = 0
            raise _pool_error("reset", exc) from exc
        self._in_pool[ids] = True

    def _complete(self, ids: np.ndarray, run: Callable[[], None]) -> None:
        """Run a sync-mode step or reset at dispatch time and mark its results done."""
        try:
            run()
        except BaseException:
            self._flight[ids] = 0
            raise
        self._done[ids] = True

    def _wait(self, timeout: float | None) -> None:
        """Receive one batch from the pool (blocking: EnvPool's receive has no timeout)."""
        waiting = int(np.count_nonzero(self._in_pool))
        if waiting == 0:
            return
        if self.is_async and waiting < self.batch_size:
            raise ValueError(
                f"EnvPool async mode returns results batch_size={self.batch_size} at a time but only {waiting} "
                f"envs are in flight (ids {np.flatnonzero(self._in_pool).tolist()}): send at least "
                f"{self.batch_size - waiting} more first (the AsyncCollector does), or make the pool with "
                "batch_size=num_envs"
            )
        try:
            result = self.pool.recv()
        except Exception as exc:
            raise _pool_error("recv", exc) from exc
        ids = np.asarray(result[4]["env_id"], dtype=np.int64)
        self._in_pool[ids] = False
        live = ids[self._flight[ids] != 0]  # results of discarded env ids are dropped
        if live.size < ids.size:
            keep = self._flight[ids] != 0
            obs_leaves = [leaf[keep] for leaf in self.obs_layout.flatten(result[0])]
            info = {k: (np.asarray(v)[keep] if not isinstance(v, dict) else v) for k, v in result[4].items()}
            result = (self.obs_layout.unflatten(obs_leaves), result[1][keep], result[2][keep], result[3][keep], info)
        self._absorb(result, steps=True)
        self._done[live] = True

    def recv_any(self, timeout: float | None = None) -> tuple[AsyncStepResult | None, AsyncResetResult | None]:
        """Every finished step and every finished reset, receiving one batch from the pool first when nothing
        in flight has finished yet.

        Args:
            timeout: Not applied: EnvPool's receive cannot time out.

        Returns:
            (steps, resets) as ``recv`` and ``recv_reset`` return them; None for a kind with none.

        Raises:
            ValueError: Nothing in flight.
            EnvWorkerError: The pool raised.
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        if not self._flight.any():
            raise ValueError("nothing in flight: call send or reset_async first")
        if not (self._done & (self._flight != 0)).any():
            self._wait(timeout)
        self._raise_failure()
        steps = resets = None
        step_ids = np.flatnonzero((self._flight == 1) & self._done)
        if step_ids.size:
            self._flight[step_ids] = 0
            self._done[step_ids] = False
            steps = (*self._gather_step(step_ids), step_ids)
        reset_ids = np.flatnonzero((self._flight == 2) & self._done)
        if reset_ids.size:
            self._flight[reset_ids] = 0
            self._done[reset_ids] = False
            resets = (*self._gather_reset(reset_ids), reset_ids)
        return steps, resets

    def _check_idle(self, ids: np.ndarray) -> None:
        busy = ids[(self._flight[ids] != 0) | self._in_pool[ids]]
        if busy.size:
            raise ValueError(f"env id(s) {busy.tolist()} already have a step or reset in flight")

    # -- rest of the API -----------------------------------------------------------------------------
    def get_env_attr(self, name: str, env_ids: EnvIds | int = None) -> list[Any]:
        """What EnvPool has: its envs run in C++ inside one pool and have no Python attributes of their own, so
        this reads a key of the pool's ``config`` (e.g. ``max_episode_steps``), else an attribute of the pool
        (``spec``...), the same value for every env id asked for.

        Args:
            name: The config key or pool attribute.
            env_ids: The env ids (None: all; an int: that env).

        Returns:
            The value, once per env id.

        Raises:
            EnvAttributeError: Neither the config nor the pool has it.
            ValueError: Bad env ids, or a step or reset in flight.
        """
        name = check_attr_name(name)
        ids = self._attr_ids(env_ids)
        config = self.pool.config
        if name in config:
            value = config[name]
        else:
            try:
                value = getattr(self.pool, name)
            except AttributeError:
                raise EnvAttributeError(
                    f"reading {name!r} failed for env {ids[0] if ids else 0}: an EnvPool pool has no per-env "
                    f"attributes, and neither its config (keys {sorted(config)}) nor the pool has {name!r}",
                    ids,
                ) from None
        return [value for _ in ids]

    def set_env_attr(self, name: str, value: Any, env_ids: EnvIds | int = None) -> None:
        """Refused: EnvPool's envs are C++ objects with no attributes to set; their settings are fixed when
        the pool is made (``envpool.make(task_id, ..., name=value)``).

        Args:
            name: The attribute.
            value: Its value (not set).
            env_ids: The env ids (None: all; an int: that env).

        Raises:
            EnvAttributeError: Always.
        """
        name = check_attr_name(name)
        ids = self._attr_ids(env_ids)
        raise EnvAttributeError(
            f"setting {name!r} failed for env {ids[0] if ids else 0}: EnvPool's envs run in C++ and have no "
            f"attributes to set; make the pool again with envpool.make(..., {name}=...) if it is a config key",
            ids,
        )

    def render(self) -> list[Any] | None:
        """Render every env.

        Returns:
            Frames of every env when the pool was made with render_mode="rgb_array", else None.

        Raises:
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        if getattr(self.pool, "render_mode", None) != "rgb_array":
            return None
        return list(self.pool.render(env_ids=np.arange(self.num_envs, dtype=np.int32)))

    def close(self) -> None:
        """Close the pool; idempotent."""
        if self.closed:
            return
        self.closed = True
        self.pool.close()


def _check_options(options: dict | None) -> None:
    if options:
        raise ValueError(f"EnvPool resets take no options, got {options!r}")


def _pool_error(what: str, exc: Exception) -> EnvWorkerError:
    return EnvWorkerError(None, f"EnvPool {what} raised {exc!r}", traceback.format_exc())


def _in_env_order(info: dict[str, Any], order: np.ndarray) -> dict[str, Any]:
    """A pool's info dict with its per-env values put in env id order (``order``: the env id of each row);
    values of another length (a multi-player pool's ``players``) stay as they are."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _in_env_order(value, order)
        elif np.ndim(value) and len(value) == len(order):
            rows = np.empty_like(np.asarray(value))
            rows[order] = value
            out[key] = rows
        else:
            out[key] = value
    return out
