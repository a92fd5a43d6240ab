"""GymnasiumVectorEnv: a gymnasium vector env (SyncVectorEnv, AsyncVectorEnv, ``gym.make_vec``, vector
entry points such as CartPole's numpy-batched env) behind the vcollect VectorEnv protocol.

Gymnasium vector envs step every env at once and may restart finished envs themselves. The adapter
follows each autoreset mode:

- ``DISABLED``: nothing restarts by itself; finished envs are reset with ``reset(options={"reset_mask":
  ...})`` and a seed per env, so the data equals the dummy backend's for the same seeds.
- ``NEXT_STEP``: an env that finished is restarted by the next ``step``, whose row for it is not a
  transition (the action is ignored): the adapter drops that row and reports the new episode instead.
- ``SAME_STEP``: an env that finishes is restarted in the same ``step``; the transition's next
  observation is ``info["final_obs"]`` and the returned observation starts the next episode.

``step_all`` reports all of that per step (``AllEnvStep``); the Collector uses it and keeps counts exact by
carrying surplus transitions over to its next call. Episodes an env starts by itself have no seed.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.async_vector_env import AsyncState

from vcollect.envs.base import (
    BaseVectorEnv,
    EnvIds,
    ResetResult,
    Seeds,
    StepResult,
    check_reset_options,
    normalize_seeds,
    timeout_message,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply, read_attr, write_attr
from vcollect.envs.steps import AllEnvStep, StepBlock
from vcollect.errors import EnvAttributeError, EnvWorkerError, ObservationError
from vcollect.infos import split_vector_infos

__all__ = ["GymnasiumVectorEnv"]

_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False
_NEXT_STEP, _SAME_STEP = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP


class GymnasiumVectorEnv(BaseVectorEnv):
    """Adapter for a ``gymnasium.vector.VectorEnv`` (steps every env at once; see the module docstring).

    Its ``capabilities``: ``steps_all_envs`` always (the Collector steps all envs each time);
    ``autoresets`` unless the autoreset mode is DISABLED (finished envs restart by themselves instead of
    through ``reset``); ``steps_in_blocks`` in NEXT_STEP mode (``step_into``); ``seeded_resets`` for
    SyncVectorEnv/AsyncVectorEnv (vector entry points take one seed for all envs).
    Errors raised by the wrapped env surface as EnvWorkerError (env id None: the vector env does not say
    which env failed) with the original traceback.

    No ``timeout``: the wrapped vector env is called in this process (a SyncVectorEnv runs its envs here),
    and a step or reset that never returns cannot be interrupted from here; use SubprocVectorEnv(timeout=)
    or RayVectorEnv(timeout=) for envs that may hang (``vcollect collect --timeout`` ends the whole process
    instead).

    Args:
        vector_env: The gymnasium vector env to wrap.

    Raises:
        TypeError: ``vector_env`` is no ``gymnasium.vector.VectorEnv``.
    """

    attr_timeout: float = 60.0
    """Seconds an AsyncVectorEnv worker may take to answer get_env_attr/set_env_attr (then the vector env is
    closed and EnvWorkerError raised). Sync envs run here and are not bounded."""

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        if not isinstance(vector_env, gym.vector.VectorEnv):
            raise TypeError(f"GymnasiumVectorEnv wraps a gymnasium.vector.VectorEnv, got {type(vector_env).__name__}")
        self.env = vector_env
        mode = vector_env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.autoreset_mode = mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)
        autoresets = self.autoreset_mode != AutoresetMode.DISABLED
        per_env = isinstance(vector_env.unwrapped, SyncVectorEnv | AsyncVectorEnv)
        self.capabilities = EnvCapabilities(
            steps_all_envs=True,
            autoresets=autoresets,
            seeded_resets=per_env,
            steps_in_blocks=self.autoreset_mode is _NEXT_STEP,
        )
        # DISABLED vector envs must take a reset_mask (gymnasium >= 1.1); Sync/Async take one in every mode
        self.supports_reset_mask = per_env or not autoresets
        super().__init__(vector_env.num_envs, vector_env.single_observation_space, vector_env.single_action_space)
        self.metadata = dict(vector_env.metadata)
        self.env_spec = single_env_spec(vector_env.spec)
        self._obs_rows = self.obs_layout.allocate(self.num_envs)
        # finished envs whose next episode has not been handed out yet (by a reset, or by step_all)
        self._finished = np.zeros(self.num_envs, dtype=bool)
        self._obs_dtypes = self.obs_layout.dtypes
        self._obs_batch_shapes = [(self.num_envs, *shape) for shape in self.obs_layout.shapes]

    @classmethod
    def make(
        cls,
        env: str | Callable[[], gym.Env],
        num_envs: int,
        *,
        vectorization_mode: str | None = None,
        autoreset_mode: str | AutoresetMode | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **vector_kwargs: Any,
    ) -> GymnasiumVectorEnv:
        """Build the gymnasium vector env and wrap it (``make_vector(..., backend="gymnasium")``).

        Args:
            env: A registered id (``gym.make_vec``; its vector entry point by default when it has one) or a
                zero-argument factory (SyncVectorEnv, or AsyncVectorEnv with ``vectorization_mode="async"``).
            num_envs: How many envs.
            vectorization_mode: "sync", "async" or "vector_entry_point" (None: as above).
            autoreset_mode: Defaults to DISABLED for sync/async vectorization (seeded resets per env) and to
                the env's own mode for vector entry points.
            env_kwargs: Go to each env (or the vector entry point).
            **vector_kwargs: Go to the vector env.

        Returns:
            The wrapped vector env.

        Raises:
            ValueError: An unknown ``autoreset_mode``, or a ``vectorization_mode`` factories cannot take.
        """
        env_kwargs = dict(env_kwargs or {})
        if isinstance(env, str):
            spec = gym.spec(env)
            mode = vectorization_mode or ("vector_entry_point" if spec.vector_entry_point else "sync")
            if mode != "vector_entry_point":
                vector_kwargs = {"autoreset_mode": _autoreset_mode(autoreset_mode), **vector_kwargs}
            elif autoreset_mode is not None:
                env_kwargs["autoreset_mode"] = _autoreset_mode(autoreset_mode)
            return cls(
                gym.make_vec(env, num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs, **env_kwargs)
            )
        factory = functools.partial(env, **env_kwargs) if env_kwargs else env
        return cls.from_env_fns(
            [factory] * num_envs, vectorization_mode=vectorization_mode, autoreset_mode=autoreset_mode, **vector_kwargs
        )

    @classmethod
    def from_env_fns(
        cls,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        vectorization_mode: str | None = None,
        autoreset_mode: str | AutoresetMode | None = None,
        **vector_kwargs: Any,
    ) -> GymnasiumVectorEnv:
        """A SyncVectorEnv (AsyncVectorEnv for ``vectorization_mode="async"``) of env_fns, wrapped.

        Args:
            env_fns: One zero-argument factory per env.
            vectorization_mode: None or "sync" (SyncVectorEnv), or "async" (AsyncVectorEnv).
            autoreset_mode: The vector env's autoreset mode (None: DISABLED).
            **vector_kwargs: Go to the vector env.

        Returns:
            The wrapped vector env.

        Raises:
            ValueError: Another ``vectorization_mode``, or an unknown ``autoreset_mode``.
        """
        if vectorization_mode not in (None, "sync", "async"):
            raise ValueError(
                f"vectorization_mode {vectorization_mode!r} needs a registered env id; with env factories "
                "use 'sync' or 'async'"
            )
        vector_cls = AsyncVectorEnv if vectorization_mode == "async" else SyncVectorEnv
        mode = _autoreset_mode(autoreset_mode)
        return cls(vector_cls(list(env_fns), autoreset_mode=mode, **vector_kwargs))

    # -- the Collector's path ----------------------------------------------------------------------
    def step_all(self, actions: Any) -> AllEnvStep:
        """Step every env once and report transitions and self-started episodes (see AllEnvStep).

        Args:
            actions: Every env's action, batched in env id order.

        Returns:
            The step of every env.

        Raises:
            EnvWorkerError: The wrapped vector env raised (env id None: it does not say which env failed).
            ObservationError: Observations that do not fit the observation space.
            CollectorStateError: The vector env is closed.
        """
        if self.closed:
            self._check_open()
        if self._went_async and np.count_nonzero(self._flight):
            self._check_idle(self._all_ids)
        return self._step_all(actions)

    def step_into(self, actions: Any, block: StepBlock) -> None:
        """step_all (NEXT_STEP only: ``capabilities.steps_in_blocks``, every step one row per env, a
        transition or the restart of an env that finished the step before), its results copied into the block's next row (cast to the block's
        dtypes) instead of fresh arrays.

        Args:
            actions: Every env's action, batched in env id order.
            block: The block whose next row receives the step.

        Raises:
            EnvWorkerError: The wrapped vector env raised (env id None: it does not say which env failed).
            ObservationError: Observations that do not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: The block is full.
        """
        if self.closed:
            self._check_open()
        if self._went_async and np.count_nonzero(self._flight):
            self._check_idle(self._all_ids)
        try:  # _env_step's work, written out here: one call less a step
            obs, rewards, terminations, truncations, _infos = self.env.step(actions)
        except Exception as exc:
            raise self._step_failed(exc) from exc
        if self.obs_layout.flat:
            obs_leaves = [obs]
            if type(obs) is not np.ndarray or obs.shape != self._obs_batch_shapes[0]:
                self._check_batch_shape(obs, self._obs_batch_shapes[0])
        else:
            obs_leaves = self.obs_layout.flatten(obs)
            for value, shape in zip(obs_leaves, self._obs_batch_shapes):
                self._check_batch_shape(value, shape)
        self._finished = block.append_row(obs_leaves, rewards, terminations, truncations, self._finished)

    def _env_step(self, actions: Any) -> tuple[Any, ...]:
        """The wrapped vector env's step; what it raises becomes EnvWorkerError (the vector env does not
        say which env failed) with the original traceback."""
        try:
            return tuple(self.env.step(actions))
        except Exception as exc:
            raise self._step_failed(exc) from exc

    def _step_failed(self, exc: Exception) -> EnvWorkerError:
        """The EnvWorkerError for an exception the wrapped vector env's step raised (being handled)."""
        return EnvWorkerError(None, f"{type(self.env).__name__}.step raised {exc!r}", traceback.format_exc())

    def _check_batch_shape(self, value: Any, shape: tuple[int, ...]) -> None:
        """ObservationError unless value has the shape of a batch of observations: a row copy would
        broadcast a wrong shape without a word."""
        if np.shape(value) != shape:
            raise ObservationError(
                f"{type(self.env).__name__}.step returned observations of shape {np.shape(value)}, expected "
                f"{shape} (num_envs, *observation shape); fix the vector env"
            )

    def _step_all(self, actions: Any) -> AllEnvStep:
        finished = self._finished
        if not self.capabilities.autoresets and np.count_nonzero(finished):
            raise ValueError(
                f"env ids {np.flatnonzero(finished).tolist()} finished and were not reset; this vector env has "
                "autoreset_mode=DISABLED: reset them (reset_mask) before the next step"
            )
        obs, rewards, terminations, truncations, infos = self._env_step(actions)
        if self.obs_layout.flat:
            obs = np.array(obs, dtype=self._obs_dtypes[0], order="C")  # as _fresh_leaves, one call less
            leaves = [obs]
        else:
            leaves = self._fresh_leaves(obs)
            obs = self.obs_layout.unflatten(leaves)
        rewards = np.asarray(rewards, dtype=np.float64)  # converted once here, the rings take float64 fastest
        terminations = np.asarray(terminations, dtype=bool)
        truncations = np.asarray(truncations, dtype=bool)
        done = terminations | truncations  # fresh; self._finished is never written in place, so it may share it
        ended = done
        next_obs = obs
        transitions: np.ndarray | None = None
        started = _NO_IDS
        if self.autoreset_mode is _NEXT_STEP:
            restarts = finished.nonzero()[0]
            if restarts.size:  # these rows are the restarts: not transitions
                started = restarts
                transitions = ~finished
                ended = done & transitions
            self._finished = done
        elif self.autoreset_mode is _SAME_STEP:
            done_ids = done.nonzero()[0]
            if done_ids.size:
                started = done_ids
                next_leaves = [leaf.copy() for leaf in leaves]
                final_obs = infos["final_obs"]
                for i in started.tolist():
                    self.obs_layout.write_row(next_leaves, i, final_obs[i])
                next_obs = self.obs_layout.unflatten(next_leaves)
        else:
            self._finished = done
        return AllEnvStep(obs, next_obs, rewards, terminations, truncations, infos, transitions, started, ended)

    def _fresh_leaves(self, obs: Any) -> list[np.ndarray]:
        """C-ordered copies of the observation leaves in the layout dtypes (the vector env may reuse its
        arrays). C order because vector entry points often return transposed (Fortran-ordered) batches,
        which numpy compares and scatters into the rings several times slower."""
        return [
            np.array(leaf, dtype=dtype, order="C")
            for leaf, dtype in zip(self.obs_layout.flatten(obs), self._obs_dtypes)
        ]

    # -- the VectorEnv protocol ---------------------------------------------------------------------
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step every env (env_ids must be None or all ids); finished envs must be reset before the next step.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), fresh arrays in ``env_ids`` order.

        Raises:
            EnvWorkerError: The wrapped vector env raised (env id None: it does not say which env failed).
            ObservationError: Observations that do not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Not every env id, or finished envs not reset.
        """
        ids = self._idle_ids(env_ids)
        self._check_all(ids)
        return self._protocol_step(actions, ids)

    def _protocol_step(self, actions: Any, ids: np.ndarray) -> StepResult:
        if self._finished.any():
            raise ValueError(
                f"env ids {np.flatnonzero(self._finished).tolist()} finished and were not reset: reset them first "
                "(the Collector instead follows the vector env's own autoreset through step_all)"
            )
        result = self._step_all(actions)
        self._finished = result.terminations | result.truncations
        infos = split_vector_infos(result.infos, self.num_envs)
        rewards = np.array(result.rewards, dtype=np.float64)  # copies: the caller keeps them
        if ids is not self._all_ids and not np.array_equal(ids, self._all_ids):
            return (
                self.obs_layout.gather(self.obs_layout.flatten(result.next_obs), ids),
                rewards[ids],
                result.terminations[ids],
                result.truncations[ids],
                [infos[i] for i in ids.tolist()],
            )
        return result.next_obs, rewards, result.terminations.copy(), result.truncations.copy(), infos

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None): all at once, or through ``reset_mask`` where the env takes one.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), fresh, in ``env_ids`` order.

        Raises:
            EnvWorkerError: The wrapped vector env raised.
            CollectorStateError: The vector env is closed.
            ValueError: Some env ids of a vector env that takes no ``reset_mask``, or bad seeds or options.
        """
        ids = self._idle_ids(env_ids)
        return self._protocol_reset(ids, normalize_seeds(seeds, ids.size), options)

    def _protocol_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> ResetResult:
        check_reset_options(options)
        n = self.num_envs
        per_env: list[int | None] = [None] * n
        for env_id, seed in zip(ids.tolist(), seeds):
            per_env[env_id] = seed
        seed_arg: Any = per_env if self.capabilities.seeded_resets else seeds[0]
        if ids.size == n:
            call_options = dict(options) if options is not None else None
        else:
            if not self.supports_reset_mask:
                raise ValueError(
                    f"{type(self.env.unwrapped).__name__} resets all its envs at once (it takes no reset_mask): "
                    "reset with env_ids=None"
                )
            mask = np.zeros(n, dtype=bool)
            mask[ids] = True
            call_options = {**(options or {}), "reset_mask": mask}
            if not self.capabilities.seeded_resets:
                seed_arg = None
        try:
            obs, infos = self.env.reset(seed=seed_arg, options=call_options)
        except Exception as exc:
            raise EnvWorkerError(
                None, f"{type(self.env).__name__}.reset raised {exc!r}", traceback.format_exc()
            ) from exc
        leaves = self._fresh_leaves(obs)
        finished = self._finished.copy()  # not in place: a step's ``ended`` may be this array
        finished[ids] = False
        self._finished = finished
        split = split_vector_infos(infos, n)
        return self.obs_layout.gather(leaves, ids), [split[i] for i in ids.tolist()]

    def send(self, actions: Any, env_ids: EnvIds = None) -> None:
        """Step every env (env_ids must be None or all ids); the results wait for recv().

        Args:
            actions: A batch of actions, one row per env.
            env_ids: None, or every env id.

        Raises:
            ValueError: Not every env id.
        """
        self._check_all(self._ids(env_ids))
        super().send(actions, env_ids)

    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        try:
            result = self._protocol_step(self.act_layout.unflatten(action_leaves), ids)
        except BaseException:
            self._flight[ids] = 0
            raise
        self._store_rows(ids, result[0], result[4])
        self._rewards[ids], self._terminations[ids], self._truncations[ids] = result[1], result[2], result[3]

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        try:
            obs, infos = self._protocol_reset(ids, seeds, options)
        except BaseException:
            self._flight[ids] = 0
            raise
        self._store_rows(ids, obs, infos)

    def _store_rows(self, ids: np.ndarray, obs: Any, infos: list[dict[str, Any]]) -> None:
        for rows, leaf in zip(self._obs_rows, self.obs_layout.flatten(obs)):
            rows[ids] = leaf
        for env_id, info in zip(ids.tolist(), infos):
            self._infos[env_id] = info
        self._done[ids] = True

    def _wait(self, timeout: float | None) -> None:
        """Nothing to wait for: steps and resets complete when dispatched."""

    def _check_all(self, ids: np.ndarray) -> None:
        if ids.size != self.num_envs:
            raise ValueError(
                f"a gymnasium vector env steps all its {self.num_envs} envs at once; got env ids {ids.tolist()} "
                "(pass env_ids=None)"
            )

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        """SyncVectorEnv: each env directly. AsyncVectorEnv: its workers' own commands, sent to the env ids
        asked for only, each reply awaited at most ``attr_timeout`` seconds. Vector entry points (one
        batched env, e.g. CartPole's) have no envs to ask."""
        vector_env = self.env.unwrapped
        if isinstance(vector_env, SyncVectorEnv):
            envs = vector_env.envs
            if write:
                return [write_attr(envs[i], name, value) for i in ids]
            return [read_attr(envs[i], name) for i in ids]
        if isinstance(vector_env, AsyncVectorEnv):
            return self._async_attr_replies(vector_env, ids, name, write, value)
        raise EnvAttributeError(
            f"{type(vector_env).__name__} is one batched env (a vector entry point), with no per-env envs whose "
            f"attribute {name!r} could be read or set; use its own attributes (GymnasiumVectorEnv.env), or make "
            "the envs with vectorization_mode='sync' or 'async'",
            ids,
        )

    def _async_attr_replies(
        self, vector_env: AsyncVectorEnv, ids: list[int], name: str, write: bool, value: Any
    ) -> list[AttrReply]:
        """Ask AsyncVectorEnv's workers through its pipes (its get_attr/set_attr ask every env, and set_attr
        waits without a timeout). A read asks ``has_wrapper_attr`` first: a worker whose command raises exits.
        Writes use gymnasium's ``_setattr`` (``set_wrapper_attr``: a new attribute goes on the outermost
        wrapper)."""
        if vector_env._state != AsyncState.DEFAULT:
            raise ValueError(f"the AsyncVectorEnv is waiting for a {vector_env._state.value} call to complete")
        if write:
            return [(True, None) for _ in self._ask_workers(vector_env, ids, ("_setattr", (name, value)))]
        has = self._ask_workers(vector_env, ids, ("_call", ("has_wrapper_attr", (name,), {})))
        present = [i for i, ok in zip(ids, has) if ok]
        values = dict(zip(present, self._ask_workers(vector_env, present, ("_call", ("get_wrapper_attr", (name,), {})))))
        return [(True, values[i]) if i in values else (False, f"the env has no attribute {name!r}") for i in ids]

    def _ask_workers(self, vector_env: AsyncVectorEnv, ids: list[int], command: tuple[str, Any]) -> list[Any]:
        """Send ``command`` to the workers of ids and return their results; no reply within ``attr_timeout``
        closes this vector env and raises EnvWorkerError, as does a worker that failed (it has exited)."""
        pipes = [vector_env.parent_pipes[i] for i in ids]
        for pipe in pipes:
            pipe.send(command)
        deadline = time.monotonic() + self.attr_timeout
        replies = []
        for i, pipe in zip(ids, pipes):
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                vector_env.close(terminate=True)  # its polite close would wait for the hung worker
                self.close()
                raise EnvWorkerError(i, timeout_message(self.attr_timeout, [i], f"{command[0]} command"))
            result, ok = pipe.recv()
            if not ok:
                _, _, error, trace = vector_env.error_queue.get(timeout=self.attr_timeout)
                self.close()
                raise EnvWorkerError(i, f"the AsyncVectorEnv worker raised {error!r} and exited", trace)
            replies.append(result)
        return replies

    def render(self) -> list[Any] | None:
        """Render the vector env.

        Returns:
            Its render() result as a list (one frame per env where it gives one), or None.

        Raises:
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        frames = self.env.render()
        if frames is None:
            return None
        return list(frames) if isinstance(frames, list | tuple) else [frames]

    def close(self) -> None:
        """Close the wrapped vector env; idempotent."""
        if self.closed:
            return
        self.closed = True
        self.env.close()


def _autoreset_mode(mode: str | AutoresetMode | None) -> AutoresetMode:
    """An AutoresetMode from itself, its value ("NextStep") or its name in any case ("next_step"); None: DISABLED."""
    if mode is None:
        return AutoresetMode.DISABLED
    if isinstance(mode, AutoresetMode):
        return mode
    for member in AutoresetMode:
        if mode in (member.value, member.name) or mode.upper() == member.name:
            return member
    raise ValueError(f"unknown autoreset_mode {mode!r}; use one of {[m.name.lower() for m in AutoresetMode]}")


# What gymnasium.make_vec adds to the spec it gives the vector env; gymnasium.make of one env refuses them.
_VECTOR_KWARGS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers", "max_episode_steps")


def single_env_spec(spec: gym.envs.registration.EnvSpec | None) -> gym.envs.registration.EnvSpec | None:
    """The spec of one of the vector env's envs (what a dataset records): ``spec`` less make_vec's keys."""
    if spec is None:
        return None
    return dataclasses.replace(spec, kwargs={k: v for k, v in spec.kwargs.items() if k not in _VECTOR_KWARGS})
