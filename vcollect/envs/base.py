"""The VectorEnv protocol and the machinery its backends share.

A backend keeps one row per env id in preallocated arrays (observation leaves, rewards, flags); steps
and resets write rows, and results are handed out as fresh copies gathered by env id. The async half
(send/recv, reset_async/recv_reset) is bookkept here with per-env masks; a backend only dispatches
work and, for out-of-process backends, waits for replies.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeAlias, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector.utils import batch_space

from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply, check_attr_name, values_or_raise
from vcollect.envs.layout import FixedLayout
from vcollect.envs.restarts import EnvRestart, RestartBudget
from vcollect.envs.steps import StepResetResult
from vcollect.errors import CollectorStateError, EnvOutputError, EnvWorkerError, ObservationError

__all__ = [
    "AsyncResetResult",
    "AsyncStepResult",
    "BaseVectorEnv",
    "EnvFailure",
    "ResetResult",
    "env_spaces",
    "spaces_problem",
    "step_values_failure",
    "StepResult",
    "VectorEnv",
]

ResetResult: TypeAlias = tuple[Any, list[dict[str, Any]]]
"""(batched nested observations, one info dict per env id)."""
StepResult: TypeAlias = tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]
"""(observations, rewards float64 (k,), terminations bool (k,), truncations bool (k,), infos)."""
AsyncStepResult: TypeAlias = tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray]
"""A StepResult followed by the env ids (int64) the rows belong to."""
AsyncResetResult: TypeAlias = tuple[Any, list[dict[str, Any]], np.ndarray]
"""(observations, infos, env ids) of the resets that finished."""

EnvIds: TypeAlias = "np.ndarray | Sequence[int] | None"
Seeds: TypeAlias = "int | Sequence[int | None] | None"


@runtime_checkable
class VectorEnv(Protocol):
    """N environments addressed by env id, stepped or reset in any subset, synchronously or not.

    Through these methods backends never autoreset: an env that terminated or truncated stays so until it
    is reset. ``capabilities`` says what else a backend can do (step all envs at once, restart envs by
    itself in ``step_all``/``step_into``, ``step_reset``, ``recv_any``...); collectors choose their loop
    from it.
    """

    capabilities: EnvCapabilities
    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space
    observation_space: gym.Space
    action_space: gym.Space

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        ...

    @property
    def in_flight(self) -> np.ndarray:
        """Env ids with a step or reset dispatched whose result has not been received yet."""
        ...

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None) and return their first observations and infos.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), in ``env_ids`` order.
        """
        ...

    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None) with a batch of actions, one row per env id.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), one row per env id.
        """
        ...

    def send(self, actions: Any, env_ids: EnvIds = None) -> None:
        """Dispatch steps for env_ids without waiting for them.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).
        """
        ...

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> AsyncStepResult:
        """Return the dispatched steps that are done, once at least min_ready of them are.

        Args:
            min_ready: How many must be done before it returns.
            timeout: Seconds to wait at most (None: no limit).
        """
        ...

    def reset_async(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> None:
        """Dispatch resets for env_ids without waiting for them.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.
        """
        ...

    def recv_reset(self, min_ready: int = 1, timeout: float | None = None) -> AsyncResetResult:
        """Return the dispatched resets that are done, once at least min_ready of them are.

        Args:
            min_ready: How many must be done before it returns.
            timeout: Seconds to wait at most (None: no limit).
        """
        ...

    def render(self) -> list[Any] | None:
        """Render every env.

        Returns:
            One frame (or what the env's render returns) per env; None when no env renders anything.
        """
        ...

    def close(self) -> None:
        """Release the envs (and worker processes); idempotent."""
        ...


# --------------------------------------------------------------------------------------------------
# argument normalisation


def normalize_env_ids(env_ids: EnvIds, num_envs: int) -> np.ndarray | None:
    """None (meaning all envs) or a 1-D int64 array of distinct, valid env ids; ValueError otherwise."""
    if env_ids is None:
        return None
    ids = np.asarray(env_ids)
    if ids.dtype != np.int64:
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"env_ids must be a 1-D sequence of ints, got {env_ids!r}")
        ids = ids.astype(np.int64)
    elif ids.ndim != 1:
        raise ValueError(f"env_ids must be a 1-D sequence of ints, got {env_ids!r}")
    values = ids.tolist()  # plain Python is faster than numpy for the few ids of a call
    if values and (min(values) < 0 or max(values) >= num_envs):
        bad = [i for i in values if not 0 <= i < num_envs]
        raise ValueError(f"unknown env id(s) {bad}: there are {num_envs} envs (0..{num_envs - 1})")
    if len(set(values)) != len(values):
        repeated = sorted({i for i in values if values.count(i) > 1})
        raise ValueError(f"env_ids must be distinct, repeated: {repeated}")
    return ids


def check_reset_options(options: Any) -> None:
    """ValueError unless ``options`` (given to the reset of every env it applies to) is a dict or None."""
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"options must be a dict or None, got {type(options).__name__}")


def normalize_seeds(seeds: Seeds, k: int) -> list[int | None]:
    """One seed per env id: an int s seeds the j-th listed env with s + j (gymnasium's convention)."""
    if seeds is None:
        return [None] * k
    if isinstance(seeds, int | np.integer):
        return [int(seeds) + j for j in range(k)]
    out = [None if s is None else int(s) for s in seeds]
    if len(out) != k:
        raise ValueError(f"got {len(out)} seeds for {k} env ids")
    return out


# --------------------------------------------------------------------------------------------------
# shared backend machinery


def check_timeout(timeout: float | None) -> float | None:
    """A backend's ``timeout`` argument: None or a positive number of seconds (ValueError otherwise)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return float(timeout)


TIMEOUT_HINT = "pass a larger timeout (None waits forever)"
"""How a timeout's EnvWorkerError ends: what to do (the CLI says it with its --timeout option)."""


def timeout_message(timeout: float | None, running: Sequence[int], what: str, where: str = "") -> str:
    """What EnvWorkerError says when a synchronous step or reset ran past ``timeout`` seconds (``where``:
    the workers that ran them, said after the env ids)."""
    ids = ", ".join(str(i) for i in running) or "unknown"
    return (
        f"no reply within the timeout of {timeout:g} s to the {what} of env ids {ids}{where} (still running: the env "
        "hangs, or one call needs longer than that); the vector env has been closed and its workers stopped. "
        f"Fix the env, or {TIMEOUT_HINT}"
    )


@dataclass
class EnvFailure:
    """A failed env call a backend recorded, raised by the synchronous call or recv that reaches it.

    Attributes:
        env_id: The env whose call failed.
        kind: ``"env"`` (the env raised), ``"obs"`` (its observation did not fit the space) or ``"value"``
            (it returned a reward or flag of the wrong type).
        message: What went wrong, for the exception.
        traceback_text: The formatted traceback where the failure happened ("" when there is none).
    """

    env_id: int
    kind: str
    message: str
    traceback_text: str

    def to_exception(self, note: str = "") -> Exception:
        """The exception to raise: ObservationError for ``"obs"``, EnvOutputError for ``"value"``, else
        EnvWorkerError; ``note`` is appended to the message."""
        if self.kind == "obs":
            return ObservationError(f"env {self.env_id}: {self.message}{note}")
        if self.kind == "value":
            return EnvOutputError(self.env_id, self.message + note, self.traceback_text)
        return EnvWorkerError(self.env_id, self.message + note, self.traceback_text)


def spaces_problem(env: Any) -> str | None:
    """What keeps a just-built env from being used (a missing or foreign observation/action space), or None."""
    for name in ("observation_space", "action_space"):
        space = getattr(env, name, None)
        if not isinstance(space, gym.Space):
            what = (
                f"that has no {name}" if space is None
                else f"whose {name} is a {type(space).__name__}, not a gymnasium.spaces.Space"
            )
            return (
                f"the env factory built a {type(env).__name__} {what}; every env must set "
                "observation_space and action_space in its __init__"
            )
    return None


def env_spaces(env: Any, env_id: int) -> tuple[gym.Space, gym.Space]:
    """The observation and action spaces of a just-built env.

    Raises:
        EnvOutputError: the env lacks one, or it is not a gymnasium Space (naming the env id and the type).
    """
    problem = spaces_problem(env)
    if problem is not None:
        raise EnvOutputError(env_id, problem)
    return env.observation_space, env.action_space


_STEP_VALUES = (("reward", np.float64, "a number"), ("terminated", np.bool_, "a bool"), ("truncated", np.bool_, "a bool"))


def step_values_failure(env_id: int, values: tuple[Any, Any, Any], traceback_text: str) -> EnvFailure:
    """The failure of a step whose (reward, terminated, truncated) could not be written into their rows: names
    the first value that is not a scalar of its kind, with its type (kind ``"value"``: EnvOutputError)."""
    for (name, dtype, kind), value in zip(_STEP_VALUES, values):
        try:
            np.empty((), dtype)[()] = value
            if np.ndim(value) != 0:
                raise ValueError("not a scalar")
        except Exception as exc:
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            message = (
                f"step returned a {name} of type {type(value).__name__} ({shown}), which is not {kind} "
                f"({type(exc).__name__}: {exc}); fix the env's step()"
            )
            return EnvFailure(env_id, "value", message, traceback_text)
    message = f"step returned values that cannot be stored: {tuple(type(v).__name__ for v in values)}"
    return EnvFailure(env_id, "value", message, traceback_text)


class BaseVectorEnv:
    """Row storage, argument checks and async bookkeeping shared by the vcollect backends.

    Every backend declares its ``capabilities`` (a class attribute, or set before this ``__init__`` where
    they depend on the instance); the single flags (``steps_all_envs`` ...) are read from them.

    Subclasses provide `_dispatch_step`, `_dispatch_reset`, `_wait(timeout)` (process replies, blocking at
    most `timeout` seconds) and `_discard(ids)`, and fill the row arrays `_obs_rows`, `_rewards`,
    `_terminations`, `_truncations`, `_infos`, setting `_done[ids]` when rows are ready.

    ``timeout`` (seconds, None: wait forever) bounds each synchronous step or reset of an out-of-process
    backend that supports it (SubprocVectorEnv, RayVectorEnv): past it `_timed_out` raises EnvWorkerError
    naming the env ids still running and closes the vector env. It bounds steps and resets sent
    asynchronously too: ``recv``/``recv_reset`` raise the same way once one in flight is older than it.
    Backends that call the envs in this process cannot interrupt a call that never returns and leave it None.
    """

    timeout: float | None = None
    env_spec: EnvSpec | None = None
    """The EnvSpec of the envs when known (made from a registered id): what a dataset records as its env."""

    def __init__(self, num_envs: int, observation_space: gym.Space, action_space: gym.Space) -> None:
        if not isinstance(getattr(self, "capabilities", None), EnvCapabilities):
            raise TypeError(f"{type(self).__name__} declares no capabilities (an EnvCapabilities)")
        if num_envs < 1:
            raise ValueError("a vector env needs at least one env")
        self.num_envs = num_envs
        self.single_observation_space = observation_space
        self.single_action_space = action_space
        self.observation_space = batch_space(observation_space, num_envs)
        self.action_space = batch_space(action_space, num_envs)
        self.obs_layout = FixedLayout(observation_space)
        self.act_layout = FixedLayout(action_space)
        self.closed = False
        # 0 = idle, 1 = step in flight, 2 = reset in flight
        self._flight = np.zeros(num_envs, np.int8)
        self._went_async = False  # whether send/reset_async was ever called (else nothing can be in flight)
        self._done = np.zeros(num_envs, bool)
        self._failures: list[EnvFailure] = []
        self._obs_rows: list[np.ndarray] = []
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminations = np.zeros(num_envs, bool)
        self._truncations = np.zeros(num_envs, bool)
        self._infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._all_ids = np.arange(num_envs)
        self._all_ids.flags.writeable = False
        # when each env's step or reset in flight was dispatched (time.monotonic(); kept with a timeout only)
        self._sent_at = np.zeros(num_envs, np.float64)
        self.restarts = RestartBudget(0)
        """Worker replacements left and made (backends built with ``max_restarts`` set their own after this)."""

    def take_restarts(self) -> list[EnvRestart]:
        """The env ids this backend replaced since the last call (vcollect.envs.restarts).

        Returns:
            The restarts since the last call (always empty for a backend built without ``max_restarts``).
        """
        return self.restarts.take()

    # -- backend hooks -------------------------------------------------------------------------
    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        raise NotImplementedError

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        raise NotImplementedError

    def _wait(self, timeout: float | None) -> None:
        """Process replies that arrive within timeout seconds (None: until at least one arrives)."""

    def _wait_received(self, timeout: float | None) -> None:
        """``_wait`` for ``recv``/``recv_reset``: backends that restart envs replace failed workers here too
        (their env ids' steps and resets in flight are dropped and listed by ``take_restarts``)."""
        self._wait(timeout)

    def _discard(self, ids: np.ndarray) -> None:
        """Forget the results of in-flight env ids (they are no longer in flight)."""
        self._flight[ids] = 0
        self._done[ids] = False

    def _timed_out(self, running: list[int], what: str) -> NoReturn:
        """A synchronous call ran past ``self.timeout``: close this vector env and raise EnvWorkerError
        naming the env ids still running (`running`). Backends override it to stop their hung workers first."""
        if not self.closed:
            self.close()
        raise EnvWorkerError(running[0] if running else None, timeout_message(self.timeout, running, what))

    # -- checks --------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise CollectorStateError("vector env is closed")

    def _ids(self, env_ids: EnvIds) -> np.ndarray:
        ids = normalize_env_ids(env_ids, self.num_envs)
        return self._all_ids if ids is None else ids

    def _idle_ids(self, env_ids: EnvIds) -> np.ndarray:
        """The env ids of a synchronous call, checked: the vector env is open and none is in flight."""
        if self.closed:
            self._check_open()
        ids = self._all_ids if env_ids is None else self._ids(env_ids)
        if np.count_nonzero(self._flight):
            self._check_idle(ids)
        return ids

    def _check_idle(self, ids: np.ndarray) -> None:
        busy = ids[self._flight[ids] != 0]
        if busy.size:
            raise ValueError(f"env id(s) {busy.tolist()} already have a step or reset in flight")

    def _step_reset_leaves(
        self, actions: Any, ids: np.ndarray, reset_seeds: Sequence[int | None], options: dict | None
    ) -> list[np.ndarray]:
        """The action leaves of a step_reset call over ids, with one reset seed per env id and the options
        checked (what every backend's own step_reset checks first)."""
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        if len(reset_seeds) != ids.size:
            raise ValueError(f"got {len(reset_seeds)} reset seeds for {ids.size} env ids")
        if options is not None:
            check_reset_options(options)
        return leaves

    def _raise_failure(self) -> None:
        """Raise the first recorded failure (naming any others, which are cleared with it)."""
        if self._failures:
            first, others = self._failures[0], self._failures[1:]
            self._failures = []
            note = f" (env ids {[f.env_id for f in others]} failed too)" if others else ""
            raise first.to_exception(note)

    # -- public API ----------------------------------------------------------------------------
    @property
    def in_flight(self) -> np.ndarray:
        """Env ids with a step or reset dispatched whose result has not been received yet."""
        return np.flatnonzero(self._flight)

    def send(self, actions: Any, env_ids: EnvIds = None) -> None:
        """Dispatch steps for env_ids (all when None); results come back through recv().

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Raises:
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, or one with a step or reset in flight.
        """
        self._send(self._ids(env_ids), actions)

    def reset_async(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> None:
        """Dispatch resets for env_ids (all when None); results come back through recv_reset().

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Raises:
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        self._reset_async(self._ids(env_ids), seeds, options)

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> AsyncStepResult:
        """Steps that are done (env ids ascending), as soon as min_ready of those in flight are.

        When timeout passes with some but fewer than min_ready done, those are returned. A backend that
        restarts envs drops the steps of the env ids it replaced (``take_restarts`` lists them); when none of
        the steps in flight is left, no env ids are returned.

        Args:
            min_ready: How many must be done before it returns.
            timeout: Seconds to wait at most (None: no limit).

        Returns:
            (observations, rewards, terminations, truncations, infos, env ids).

        Raises:
            TimeoutError: None is done within ``timeout``; it names the env ids in flight (nothing is lost:
                a later recv returns them).
            ValueError: ``min_ready < 1``, or no step in flight.
            EnvWorkerError: An env failed, or (out-of-process backends) a step ran past the backend's timeout.
        """
        ids = self._receive(1, min_ready, timeout)
        obs, rewards, terms, truncs, infos = self._gather_step(ids)
        return obs, rewards, terms, truncs, infos, ids

    def recv_reset(self, min_ready: int = 1, timeout: float | None = None) -> AsyncResetResult:
        """Resets that are done (env ids ascending), as soon as min_ready of those in flight are.

        Args:
            min_ready: How many must be done before it returns.
            timeout: Seconds to wait at most (None: no limit).

        Returns:
            (observations, infos, env ids).

        Raises:
            TimeoutError: None is done within ``timeout``.
            ValueError: ``min_ready < 1``, or no reset in flight.
        """
        ids = self._receive(2, min_ready, timeout)
        obs, infos = self._gather_reset(ids)
        return obs, infos, ids

    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None) and wait for them.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), in ``env_ids`` order.
        """
        ids = self._ids(env_ids)
        self._send(ids, actions)
        self._collect(ids)
        return self._gather_step(None if env_ids is None else ids)

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None) and wait for them.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), in ``env_ids`` order.
        """
        ids = self._ids(env_ids)
        self._reset_async(ids, seeds, options)
        self._collect(ids)
        return self._gather_reset(ids)

    def step_reset(
        self,
        actions: Any,
        env_ids: EnvIds = None,
        *,
        reset_seeds: Sequence[int | None],
        may_reset: np.ndarray | None = None,
        options: dict | None = None,
    ) -> StepResetResult:
        """Step env_ids (all when None), then reset at once each env that terminated or truncated.

        ``reset_seeds[j]`` seeds the reset of the j-th env id if it ends; ``may_reset[j]`` False (a bool
        per env id; None: all True) leaves it ended instead. This saves the collector a second call (for
        worker processes, a second round trip) per step in which an episode ends. Backends that can do
        both in one pass override this; here it is a step followed by a reset of the ended envs.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).
            reset_seeds: The seed of each env id's reset, should it end.
            may_reset: A bool per env id; False leaves an ended env ended (None: all True).
            options: Passed to every reset.

        Returns:
            The step's results, and the env ids reset with their first observations and infos.
        """
        obs, rewards, terms, truncs, infos = self.step(actions, env_ids)
        ids = self._all_ids if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        ended = terms | truncs
        if may_reset is not None:
            ended &= may_reset
        if not ended.any():
            return StepResetResult(obs, rewards, terms, truncs, infos, ids[:0], None, [])
        positions = np.flatnonzero(ended)
        reset_ids = ids[positions]
        seeds = [reset_seeds[p] for p in positions.tolist()]
        reset_obs, reset_infos = self.reset(reset_ids, seeds=seeds, options=options)
        return StepResetResult(obs, rewards, terms, truncs, infos, reset_ids, reset_obs, reset_infos)

    def get_env_attr(self, name: str, env_ids: EnvIds | int = None) -> list[Any]:
        """Read an attribute of some envs, as Tianshou's ``get_env_attr``.

        Looked up through each env's wrappers (vcollect.envs.env_attrs). Out-of-process backends wait at
        most their ``timeout``.

        Args:
            name: The attribute.
            env_ids: The env ids (None: all; an int: that env).

        Returns:
            The attribute of each env, in ``env_ids`` order.

        Raises:
            EnvAttributeError: Some env lacks it (naming the env ids).
            ValueError: Bad env ids, or a step or reset in flight.
        """
        name = check_attr_name(name)
        ids = self._attr_ids(env_ids)
        return values_or_raise("reading", name, ids, self._attr_replies(ids, name, False, None))

    def set_env_attr(self, name: str, value: Any, env_ids: EnvIds | int = None) -> None:
        """Set an attribute in some envs, as Tianshou's ``set_env_attr``: on the outermost wrapper layer that
        has it, else on the base env.

        Args:
            name: The attribute.
            value: Its new value.
            env_ids: The env ids (None: all; an int: that env).

        Raises:
            EnvAttributeError: It cannot be set in some env (naming the env ids).
            ValueError: Bad env ids, or a step or reset in flight.
        """
        name = check_attr_name(name)
        ids = self._attr_ids(env_ids)
        values_or_raise("setting", name, ids, self._attr_replies(ids, name, True, value))

    def _attr_ids(self, env_ids: EnvIds | int) -> list[int]:
        """The env ids of an attribute call, checked: open, valid, and no step or reset in flight (its reply
        would come before the attribute's)."""
        self._check_open()
        if isinstance(env_ids, bool):
            raise ValueError(f"env_ids must be an int or a sequence of ints, got {env_ids!r}")
        if isinstance(env_ids, int | np.integer):
            env_ids = [int(env_ids)]  # one env id, as Tianshou takes it
        ids = self._ids(env_ids)
        if np.count_nonzero(self._flight):
            busy = np.flatnonzero(self._flight).tolist()
            raise ValueError(
                f"env ids {busy} have a step or reset in flight: recv() them before get_env_attr/set_env_attr"
            )
        return ids.tolist()  # type: ignore[no-any-return]

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        """Each env's reply (env_attrs.read_attr / write_attr) in ids order; the backend's part."""
        raise NotImplementedError(f"{type(self).__name__} does not offer get_env_attr/set_env_attr")

    def __enter__(self) -> BaseVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release resources; idempotent."""
        self.closed = True

    # -- internals -----------------------------------------------------------------------------
    def _send(self, ids: np.ndarray, actions: Any) -> None:
        self._check_open()
        self._check_idle(ids)
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        self._went_async = True
        self._flight[ids] = 1
        if self.timeout is not None:
            self._sent_at[ids] = time.monotonic()
        self._dispatch_step(ids, leaves)

    def _reset_async(self, ids: np.ndarray, seeds: Seeds, options: dict | None) -> None:
        self._check_open()
        self._check_idle(ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        self._went_async = True
        self._flight[ids] = 2
        if self.timeout is not None:
            self._sent_at[ids] = time.monotonic()
        self._dispatch_reset(ids, seed_list, options)

    def _collect(self, ids: np.ndarray) -> None:
        """Wait until every env id in ids is done; on a failure, drop the others' results and raise.
        Past ``self.timeout`` seconds, `_timed_out` raises (and closes this vector env)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            while True:
                self._raise_failure()
                if self._done[ids].all():
                    break
                if deadline is None:
                    self._wait(None)
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._timed_out(ids[~self._done[ids]].tolist(), "step or reset")
                self._wait(remaining)
        except BaseException:
            if not self.closed:
                self._discard(ids[self._flight[ids] != 0])
            raise
        self._flight[ids] = 0
        self._done[ids] = False

    def _receive(self, kind: int, min_ready: int, timeout: float | None) -> np.ndarray:
        self._check_open()
        if min_ready < 1:
            raise ValueError(f"min_ready must be >= 1, got {min_ready}")
        deadline = None if timeout is None else time.monotonic() + timeout
        what = "step" if kind == 1 else "reset"
        while True:
            self._raise_failure()
            mine = self._flight == kind
            if not mine.any():
                if self.restarts.pending:  # replaced env ids (take_restarts lists them) had them in flight
                    return self._all_ids[:0]
                raise ValueError(f"no {what} in flight: call {'send' if kind == 1 else 'reset_async'} first")
            ready = mine & self._done
            n_ready = int(ready.sum())
            if n_ready >= min(min_ready, int(mine.sum())):
                break
            now = time.monotonic()
            remaining = None if deadline is None else deadline - now
            if self.timeout is not None:  # no step or reset in flight may take longer than the backend's timeout
                running = (self._flight != 0) & ~self._done
                if running.any():
                    overdue = running & (self._sent_at + self.timeout <= now)
                    if overdue.any():
                        self._timed_out(np.flatnonzero(overdue).tolist(), "step or reset")
                    left = float(self._sent_at[running].min()) + self.timeout - now
                    remaining = left if remaining is None else min(remaining, left)
            if remaining is not None and remaining <= 0:
                if n_ready:
                    break
                raise TimeoutError(
                    f"no {what} finished within {timeout} s; env ids in flight: {self.in_flight.tolist()}"
                )
            self._wait_received(remaining)
        ids = np.flatnonzero(ready)
        self._flight[ids] = 0
        self._done[ids] = False
        return ids

    def _gather_step(self, ids: np.ndarray | None) -> StepResult:
        """Copies of the step rows of ids (env ids 0..N-1 in order when None)."""
        if ids is None:
            obs = self.obs_layout.gather(self._obs_rows, None)
            infos = list(self._infos)
            return obs, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos
        infos_all = self._infos
        return (
            self.obs_layout.gather(self._obs_rows, ids),
            self._rewards[ids],
            self._terminations[ids],
            self._truncations[ids],
            [infos_all[i] for i in ids.tolist()],
        )

    def _gather_reset(self, ids: np.ndarray) -> ResetResult:
        infos_all = self._infos
        return self.obs_layout.gather(self._obs_rows, ids), [infos_all[i] for i in ids.tolist()]
