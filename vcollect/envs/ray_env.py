"""RayVectorEnv: every env in its own Ray actor, so envs can live anywhere on a Ray cluster.

Each step or reset of an env is one actor call; its reply (observation, reward, flags, info) is small
and travels inline with the task reply, not through the object store. The async half waits with
``ray.wait`` on the calls in flight. Envs never raise through Ray: the actor catches what the env raises
and replies with the message and traceback, so the error names the env id and keeps the original
traceback. An actor that dies (its process crashed or was killed) raises EnvWorkerError naming the env id
and closes the vector env, like a dead worker process of SubprocVectorEnv.

Ray is imported lazily: importing this module works without Ray; building a RayVectorEnv does not.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from vcollect.envs.base import (
    BaseVectorEnv,
    EnvFailure,
    EnvIds,
    ResetResult,
    Seeds,
    StepResult,
    check_reset_options,
    check_timeout,
    normalize_seeds,
    spaces_problem,
    step_values_failure,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply, read_attr, write_attr
from vcollect.envs.restarts import RestartBudget
from vcollect.errors import EnvOutputError, EnvWorkerError

__all__ = ["RayVectorEnv", "ensure_ray", "require_ray"]

_OK, _ERR, _VALUE = 0, 1, 2  # _VALUE: the env was built without spaces
_STEP, _RESET = 1, 2
_CLOSE_TIMEOUT_S = 5.0


def require_ray() -> Any:
    """Import and return the ``ray`` module; ImportError telling how to install it when it is missing."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "this feature needs Ray, which is not installed: install it with `pip install 'vcollect[ray]'` "
            f"(or `pip install ray`); the import failed with: {exc}"
        ) from exc
    return ray


def ensure_ray() -> Any:
    """The ``ray`` module, initialised: an existing connection (``ray.init(address=...)`` done by the
    caller, or ``$RAY_ADDRESS``) is used as it is, else a local Ray instance is started."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init()
    return ray


class _EnvActor:
    """The body of one env actor. Every method returns a tagged tuple instead of raising, so the
    caller gets the env's own message and traceback rather than a Ray wrapper."""

    def __init__(self, env_fn: Callable[[], gym.Env]) -> None:
        self.env: gym.Env | None = None
        self.error: tuple[int, str, str] | None = None
        try:
            self.env = env_fn()
        except Exception as exc:
            self.error = (_ERR, f"env factory raised {exc!r}", traceback.format_exc())

    def describe(self) -> tuple[Any, ...]:
        """(OK, observation space, action space, picklable spec or None, metadata, pid) or the error."""
        if self.env is None:
            assert self.error is not None
            return self.error
        env = self.env
        problem = spaces_problem(env)
        if problem is not None:
            return _VALUE, problem, ""
        try:
            spec = pickle.loads(pickle.dumps(env.spec))
        except Exception:
            spec = None
        return _OK, env.observation_space, env.action_space, spec, dict(env.metadata), os.getpid()

    def step(self, action: Any) -> tuple[Any, ...]:
        """(OK, obs, reward, terminated, truncated, info) or (ERR, message, traceback)."""
        assert self.env is not None
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            return _ERR, f"step raised {exc!r}", traceback.format_exc()
        return _OK, obs, reward, terminated, truncated, info

    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, ...]:
        """(OK, obs, info) or (ERR, message, traceback)."""
        assert self.env is not None
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except Exception as exc:
            return _ERR, f"reset raised {exc!r}", traceback.format_exc()
        return _OK, obs, info

    def attr(self, name: str, write: bool, value: Any) -> tuple[Any, ...]:
        """(OK, value) of reading or writing an attribute (env_attrs), or (ERR, reason, "")."""
        assert self.env is not None
        ok, result = write_attr(self.env, name, value) if write else read_attr(self.env, name)
        return (_OK, result) if ok else (_ERR, result, "")

    def render(self) -> Any:
        """The env's render() result."""
        assert self.env is not None
        return self.env.render()

    def close(self) -> None:
        """Close the env (errors ignored: the actor is killed right after)."""
        if self.env is not None:
            with contextlib.suppress(Exception):
                self.env.close()


@functools.lru_cache(maxsize=1)
def _remote_env_actor() -> Any:
    return require_ray().remote(_EnvActor)


class RayVectorEnv(BaseVectorEnv):
    """Envs as Ray actors (one per env), stepped in parallel; async `recv` waits with `ray.wait`.

    `env_fns` are zero-argument env factories (lambdas are fine: Ray pickles them with cloudpickle); the
    envs are built inside the actors. `actor_options` go to the actor class's `.options(...)` (e.g.
    ``num_cpus``, ``resources``, ``scheduling_strategy``); Ray's defaults otherwise. Ray is initialised if
    it is not (a local instance). Each call costs one actor round trip per env (about a millisecond), so
    this backend pays off for envs whose steps take milliseconds or more, or that must run on other nodes.

    `timeout`: seconds each synchronous step or reset may take (``ray.get`` with that timeout); past it the
    call raises EnvWorkerError naming the env ids still running, kills every actor and closes the vector
    env. None (the default) waits forever: how long a call may normally take depends on the env
    and the cluster, so pick several times the slowest call you expect. Building the envs is not bounded.
    A step or reset sent asynchronously is bounded by it too (``recv`` raises past it).

    `max_restarts` (default 0): how many times an actor that died, or whose env raised in a synchronous
    step or reset, is replaced by a new actor for the same env id (a new env, built but not reset) instead
    of raising; the replaced env ids are listed by ``take_restarts()`` (vcollect.envs.restarts), as for
    SubprocVectorEnv(max_restarts=). Past the budget the failure raises EnvWorkerError, saying so. The async
    half restarts the same way while ``recv``/``recv_reset`` wait (the replaced env's step or reset in flight
    is dropped, never returned).

    Args:
        env_fns: One zero-argument factory per env.
        actor_options: Go to the actor class's ``.options(...)``.
        timeout: Seconds each synchronous step or reset may take (None: no limit).
        max_restarts: Actor replacements allowed over the vector env's life.

    Raises:
        ValueError: No factory, envs whose spaces differ, or a bad ``timeout``.
        EnvWorkerError: An env factory raised.
        EnvOutputError: An env has no observation or action space.
    """

    capabilities = EnvCapabilities(step_reset=True)

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        actor_options: dict[str, Any] | None = None,
        timeout: float | None = None,
        max_restarts: int = 0,
    ) -> None:
        if len(env_fns) == 0:
            raise ValueError("RayVectorEnv needs at least one env factory")
        self.timeout = check_timeout(timeout)
        budget = RestartBudget(max_restarts)
        self.capabilities = EnvCapabilities(step_reset=True, restarts_envs=budget.max_restarts > 0)
        self.restarts = budget
        self._ray = ensure_ray()
        self.closed = False
        actor_cls = _remote_env_actor()
        if actor_options:
            actor_cls = actor_cls.options(**actor_options)
        self._actor_cls = actor_cls
        self._env_fns = list(env_fns)
        self._catching = False  # a synchronous call under way may lose actors (within the budget)
        self._lost: dict[int, tuple[str, str]] = {}  # env id -> (how its actor died, Ray's text), in this call
        self._actors: list[Any] = [actor_cls.remote(fn) for fn in env_fns]
        self._pending: dict[Any, tuple[int, int]] = {}  # ObjectRef -> (env id, _STEP or _RESET)
        self._pids: list[int | None] = [None] * len(env_fns)
        try:
            refs = [a.describe.remote() for a in self._actors]
            described = [self._get_one(i, ref) for i, ref in enumerate(refs)]
            for i, reply in enumerate(described):
                if reply[0] == _ERR:
                    raise EnvWorkerError(i, reply[1], reply[2])
                if reply[0] == _VALUE:
                    raise EnvOutputError(i, reply[1], reply[2])
            _, obs_space, act_space, spec, metadata, _ = described[0]
            for i, reply in enumerate(described[1:], start=1):
                if reply[1] != obs_space or reply[2] != act_space:
                    raise ValueError(
                        f"env {i} has spaces {reply[1]}, {reply[2]}; env 0 has {obs_space}, {act_space}: "
                        "all envs must share their spaces"
                    )
            self._pids = [reply[5] for reply in described]
        except BaseException:
            self._kill_actors(gentle=False)
            self.closed = True
            raise
        super().__init__(len(env_fns), obs_space, act_space)
        self.restarts = budget
        self.env_spec = spec
        self.metadata = metadata
        self._obs_rows = self.obs_layout.allocate(self.num_envs)

    # -- synchronous calls while nothing is in flight: dispatch all, then one ray.get ---------------
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None): one actor call per env, in parallel.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), fresh arrays in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised, its actor died, or the call ran past ``timeout`` (the vector env is then
                closed) (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        if self.closed or self._pending:
            return super().step(actions, env_ids)
        ids = self._ids(env_ids)
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        refs = self._step_refs(ids, leaves)
        for env_id, reply in zip(ids.tolist(), self._get_all(ids, refs, "step")):
            self._store(env_id, _STEP, reply)
        self._replace_failed()
        self._raise_failure()
        return self._gather_step(None if env_ids is None else ids)

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None): one actor call per env, in parallel.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), fresh, in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised, its actor died, or the call ran past ``timeout`` (the vector env is then
                closed) (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        if self.closed or self._pending:
            return super().reset(env_ids, seeds, options)
        ids = self._ids(env_ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        refs = [self._actors[i].reset.remote(s, options) for i, s in zip(ids.tolist(), seed_list)]
        for env_id, reply in zip(ids.tolist(), self._get_all(ids, refs, "reset")):
            self._store(env_id, _RESET, reply)
        self._replace_failed()
        self._raise_failure()
        return self._gather_reset(ids)

    def _step_refs(self, ids: np.ndarray, leaves: list[np.ndarray]) -> list[Any]:
        layout = self.act_layout
        if layout.flat:  # Discrete actions go to the envs as Python ints, like in the other backends
            flat = leaves[0].tolist() if layout.discrete[0] else list(leaves[0])
            return [self._actors[i].step.remote(a) for i, a in zip(ids.tolist(), flat)]
        return [self._actors[i].step.remote(layout.read_row(leaves, j)) for j, i in enumerate(ids.tolist())]

    def _get_all(self, ids: np.ndarray, refs: list[Any], what: str) -> list[Any]:
        """The replies of refs (one per env id); a dead actor, or no reply within self.timeout, raises
        EnvWorkerError and closes the env."""
        ray = self._ray
        self._catching = self.restarts.max_restarts > 0 and what in ("step", "reset")
        try:
            return list(ray.get(refs, timeout=self.timeout))
        except ray.exceptions.GetTimeoutError:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            done = set(ready)
            self._timed_out([i for i, ref in zip(ids.tolist(), refs) if ref not in done], what)
        except ray.exceptions.RayError:
            # find which one failed (and keep the others' replies)
            return [self._get_one(i, ref) for i, ref in zip(ids.tolist(), refs)]
        finally:
            self._catching = False

    def _get_one(self, env_id: int, ref: Any) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:  # died, killed, or its node is gone
            budget = self.restarts
            if self._catching and budget.allows(len(self._lost) + 1):
                self._lost[env_id] = (self._death_text(env_id, exc), str(exc))
                return (_ERR, "", "")  # not stored: replaced by _replace_failed
            self._actor_died(env_id, exc, budget.spent_note() if self._catching else "")
        except ray.exceptions.RayError as exc:  # e.g. an info Ray could not serialise
            return _ERR, f"the Ray call failed: {exc}", ""

    def _store(self, env_id: int, op: int, reply: tuple[Any, ...]) -> bool:
        """Write one reply into env_id's rows; record a failure instead (returns False) if it is one."""
        if reply[0] == _ERR:
            if env_id not in self._lost:
                self._failures.append(EnvFailure(env_id, "env", reply[1], reply[2]))
            return False
        try:
            self.obs_layout.write_row(self._obs_rows, env_id, reply[1])
        except Exception as exc:
            space = self.single_observation_space
            call = "step" if op == _STEP else "reset"
            message = f"{call} returned an observation of type {type(reply[1]).__name__} that does not fit {space}: {exc!r}"
            self._failures.append(EnvFailure(env_id, "obs", message, traceback.format_exc()))
            return False
        if op == _STEP:
            try:
                self._rewards[env_id] = reply[2]
                self._terminations[env_id] = reply[3]
                self._truncations[env_id] = reply[4]
            except Exception:
                self._failures.append(step_values_failure(env_id, reply[2:5], traceback.format_exc()))
                return False
            self._infos[env_id] = reply[5]
        else:
            self._infos[env_id] = reply[2]
        return True

    def _replace_failed(self) -> None:
        """After a synchronous call's replies, or an async wait's: replace the actors it lost and those whose envs
        raised, while the restart budget allows, zeroing their step rows and dropping their steps and resets in
        flight (vcollect.envs.restarts); other failures stay."""
        if self.restarts.max_restarts == 0 or not (self._lost or self._failures):
            return
        budget = self.restarts
        reasons = {env_id: (text, trace) for env_id, (text, trace) in self._lost.items()}
        self._lost = {}
        kept = []
        for failure in self._failures:
            if failure.kind == "env" and budget.allows(len(reasons) + 1):
                reasons.setdefault(failure.env_id, (f"env {failure.env_id}: {failure.message}", failure.traceback_text))
                continue
            if failure.kind == "env":
                failure.message += budget.spent_note()
            kept.append(failure)
        self._failures = kept
        for env_id, (text, trace) in sorted(reasons.items()):
            self._replace(env_id)
            budget.spend([env_id], text, trace)
            self._rewards[env_id] = 0.0
            self._terminations[env_id] = False
            self._truncations[env_id] = False
            self._infos[env_id] = {}
            self._flight[env_id] = 0  # its async step or reset went with the actor
            self._done[env_id] = False

    def _replace(self, env_id: int) -> None:
        """Kill env_id's actor and start a new one with a new env (built, not reset).

        Raises:
            EnvWorkerError: the new actor's env could not be built, or has other spaces (the env is closed).
        """
        ray = self._ray
        with contextlib.suppress(Exception):
            ray.kill(self._actors[env_id])
        actor = self._actor_cls.remote(self._env_fns[env_id])
        self._actors[env_id] = actor
        try:
            reply = ray.get(actor.describe.remote())
        except ray.exceptions.RayError as exc:
            self._actor_died(env_id, exc)
        problem = None
        if reply[0] != _OK:
            problem = EnvFailure(env_id, "value" if reply[0] == _VALUE else "env", reply[1], reply[2])
        elif reply[1] != self.single_observation_space or reply[2] != self.single_action_space:
            text = f"the actor started in place of env {env_id}'s built an env with spaces {reply[1]}, {reply[2]}"
            problem = EnvFailure(env_id, "env", text, "")
        if problem is not None:
            self.close()
            raise problem.to_exception()
        self._pids[env_id] = reply[5]

    def _death_text(self, env_id: int, exc: BaseException) -> str:
        """How env_id's actor died, from Ray's error."""
        cause = str(exc).strip().splitlines()
        reason = next((line.strip() for line in cause if "dead because" in line or "died" in line), "")
        return f"the Ray actor running env {env_id} (pid {self._pids[env_id]}) died{': ' + reason if reason else ''}"

    def _actor_died(self, env_id: int, exc: BaseException, note: str = "") -> NoReturn:
        message = f"{self._death_text(env_id, exc)}; the vector env has been closed{note}"
        if not self.closed:
            self.close()
        raise EnvWorkerError(env_id, message, str(exc))

    def _timed_out(self, running: list[int], what: str) -> NoReturn:
        """A synchronous call ran past self.timeout: kill the actors at once (a hung actor would not run
        its close call), close this vector env and raise EnvWorkerError naming the env ids still running."""
        if not self.closed:
            self.closed = True
            self._pending.clear()
            self._kill_actors(gentle=False)
        super()._timed_out(running, what)

    # -- async half ------------------------------------------------------------------------------
    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        for env_id, ref in zip(ids.tolist(), self._step_refs(ids, action_leaves)):
            self._pending[ref] = (env_id, _STEP)

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        for env_id, seed in zip(ids.tolist(), seeds):
            self._pending[self._actors[env_id].reset.remote(seed, options)] = (env_id, _RESET)

    def _wait(self, timeout: float | None) -> None:
        if not self._pending:
            return
        ray = self._ray
        refs = list(self._pending)
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:  # take everything else that is done by now as well
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            env_id, op = self._pending.pop(ref)
            if self._store(env_id, op, self._get_one(env_id, ref)):
                self._done[env_id] = True
            else:
                self._flight[env_id] = 0

    def _wait_received(self, timeout: float | None) -> None:
        """``_wait`` for recv/recv_reset; with restarts, the actors that died or whose envs raised meanwhile are
        replaced (within the budget) and their steps and resets in flight dropped."""
        if self.restarts.max_restarts == 0:
            self._wait(timeout)
            return
        self._catching = True
        try:
            self._wait(timeout)
        finally:
            self._catching = False
        self._replace_failed()

    def _discard(self, ids: np.ndarray) -> None:
        super()._discard(ids)
        dropped = set(ids.tolist())
        for ref in [r for r, (env_id, _) in self._pending.items() if env_id in dropped]:
            del self._pending[ref]

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        """One actor call per env, in parallel, bounded by ``timeout`` like a step."""
        refs = [self._actors[i].attr.remote(name, write, value) for i in ids]
        replies = self._get_all(np.asarray(ids, np.int64), refs, "set_env_attr" if write else "get_env_attr")
        return [(True, reply[1]) if reply[0] == _OK else (False, reply[1]) for reply in replies]

    # -- rest of the API ------------------------------------------------------------------------
    def render(self) -> list[Any] | None:
        """Render every env.

        Returns:
            One render() result per env; None when every env returned None.

        Raises:
            EnvWorkerError: An env's render() raised, or its actor died.
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        ray = self._ray
        refs = [a.render.remote() for a in self._actors]
        frames = []
        for env_id, ref in enumerate(refs):
            try:
                frames.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                self._actor_died(env_id, exc)
            except ray.exceptions.RayError as exc:  # render() raised in the actor
                raise EnvWorkerError(env_id, "render raised", str(exc)) from None
        return None if all(f is None for f in frames) else frames

    def close(self) -> None:
        """Close the envs and kill their actors; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._pending.clear()
        self._kill_actors(gentle=True)

    def _kill_actors(self, gentle: bool) -> None:
        ray = self._ray
        if not ray.is_initialized():  # Ray was shut down first: the actors are gone with it
            return
        with contextlib.suppress(Exception):
            if gentle:
                refs = [a.close.remote() for a in self._actors]
                ray.wait(refs, num_returns=len(refs), timeout=_CLOSE_TIMEOUT_S)
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
