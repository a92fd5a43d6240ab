"""PassThroughVectorEnv: a vcollect VectorEnv handed on whole, with per-batch hooks for what a wrapper changes.

What changes a vector env's calls on their way between the collector and the envs (recording infos per
episode, writing them beside ring rows, mapping actions) wraps the env in a subclass that overrides only its
hooks, as gymnasium's ``VectorWrapper`` subclasses override what they change: :meth:`PassThroughVectorEnv.to_envs`
(each action batch on its way to the envs), :meth:`PassThroughVectorEnv.on_step` and
:meth:`PassThroughVectorEnv.on_reset` (the infos of each result, with their env ids). The protocol's methods,
spaces and capabilities are forwarded here once, and so are the calls a backend offers beyond the protocol
(``take_restarts``, and ``step_reset``, ``send_step_reset``/``recv_step_reset``, ``recv_any``, ``step_all``,
``step_into`` exactly where the wrapper declares the capability that calls for them, as a backend has them):
the wrapper declares the wrapped env's capabilities, or those a subclass narrows them to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vcollect.envs.base import BaseVectorEnv
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.steps import AllEnvStep, StepBlock, StepResetResult

__all__ = ["PassThroughVectorEnv"]


class PassThroughVectorEnv:
    """A VectorEnv passing the protocol through to ``envs``, each action batch through :meth:`to_envs`, and
    telling :meth:`on_reset` and :meth:`on_step` of each result's infos with their env ids.

    The calls beyond the protocol are bound on the instance where its capabilities declare them:
    ``step_reset`` (``step_reset``), ``send_step_reset`` and ``recv_step_reset`` (``split_step_reset``),
    ``recv_any`` (``recv_any``), ``step_all`` (``steps_all_envs``), ``step_into`` (``steps_in_blocks``). The
    hooks are told of the results of the calls that step or reset chosen envs (``step``, ``recv``, ``reset``,
    ``recv_reset``, ``step_reset`` and ``recv_step_reset``: the step, then its restarts, ``recv_any``);
    ``step_all`` and ``step_into`` (every env at once, infos in gymnasium's vector layout) pass their actions
    through :meth:`to_envs` only.

    Args:
        envs: The wrapped vcollect VectorEnv.
        capabilities: What this wrapper declares (default: what ``envs`` declares).
    """

    def __init__(self, envs: Any, capabilities: EnvCapabilities | None = None) -> None:
        self.envs = envs
        self.capabilities: EnvCapabilities = envs.capabilities if capabilities is None else capabilities
        self.num_envs: int = envs.num_envs
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.observation_space = envs.observation_space
        self.action_space = envs.action_space
        self.env_spec: Any = envs.env_spec if isinstance(envs, BaseVectorEnv | PassThroughVectorEnv) else None
        self.all_ids = np.arange(self.num_envs)
        declared = self.capabilities
        if declared.step_reset:
            self.step_reset: Callable[..., StepResetResult] = self._step_reset
        if declared.split_step_reset:
            self.send_step_reset: Callable[..., None] = self._send_step_reset
            self.recv_step_reset: Callable[[], StepResetResult] = self._recv_step_reset
        if declared.recv_any:
            self.recv_any: Callable[..., Any] = self._recv_any
        if declared.steps_all_envs:
            self.step_all: Callable[[Any], AllEnvStep] = self._step_all
        if declared.steps_in_blocks:
            self.step_into: Callable[[Any, StepBlock], None] = self._step_into

    def to_envs(self, actions: Any) -> Any:
        """The action batch the wrapped env gets for ``actions`` (``actions`` by default). An override must
        return a new batch, never write into the one it is given (the collector records that one)."""
        return actions

    def on_reset(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Called with the env ids and info dicts of each reset's result (nothing by default)."""

    def on_step(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Called with the env ids and info dicts of each step's result (nothing by default)."""

    def _ids(self, env_ids: Any) -> np.ndarray:
        return self.all_ids if env_ids is None else np.asarray(env_ids, dtype=np.intp)

    @property
    def closed(self) -> bool:
        """Whether the wrapped vector env is closed."""
        return bool(self.envs.closed)

    @property
    def in_flight(self) -> np.ndarray:
        """Env ids with a step or reset in flight."""
        return self.envs.in_flight  # type: ignore[no-any-return]

    def reset(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset (the wrapped env's), telling :meth:`on_reset`."""
        obs, infos = self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)
        self.on_reset(self._ids(env_ids), infos)
        return obs, infos

    def step(self, actions: Any, env_ids: Any = None) -> Any:
        """Step (the wrapped env's), telling :meth:`on_step`."""
        result = self.envs.step(self.to_envs(actions), env_ids)
        self.on_step(self._ids(env_ids), result[4])
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps (async half)."""
        self.envs.send(self.to_envs(actions), env_ids)

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished steps, telling :meth:`on_step`."""
        result = self.envs.recv(min_ready=min_ready, timeout=timeout)
        self.on_step(self._ids(result[5]), result[4])
        return result

    def reset_async(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> None:
        """Dispatch resets (async half)."""
        self.envs.reset_async(env_ids, seeds=seeds, options=options)

    def recv_reset(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished resets, telling :meth:`on_reset`."""
        obs, infos, env_ids = self.envs.recv_reset(min_ready=min_ready, timeout=timeout)
        self.on_reset(self._ids(env_ids), infos)
        return obs, infos, env_ids

    def _step_reset(self, actions: Any, env_ids: Any = None, **kwargs: Any) -> StepResetResult:
        """Step and restart the ended envs (the wrapped env's ``step_reset``, where it declares ``step_reset``),
        telling :meth:`on_step` of the step and :meth:`on_reset` of the restarts."""
        result: StepResetResult = self.envs.step_reset(self.to_envs(actions), env_ids, **kwargs)
        self._tell_step_reset(self._ids(env_ids), result)
        return result

    def _send_step_reset(self, actions: Any, **kwargs: Any) -> None:
        """Start a step_reset of every env (the wrapped env's ``send_step_reset``, where it declares
        ``split_step_reset``)."""
        self.envs.send_step_reset(self.to_envs(actions), **kwargs)

    def _recv_step_reset(self) -> StepResetResult:
        """The result of the step_reset ``send_step_reset`` started (the wrapped env's), telling :meth:`on_step`
        of the step and :meth:`on_reset` of the restarts."""
        result: StepResetResult = self.envs.recv_step_reset()
        self._tell_step_reset(self.all_ids, result)
        return result

    def _tell_step_reset(self, env_ids: np.ndarray, result: StepResetResult) -> None:
        self.on_step(env_ids, result.infos)
        if result.reset_ids.size:
            self.on_reset(np.asarray(result.reset_ids, dtype=np.intp), result.reset_infos)

    def take_restarts(self) -> Any:
        """The envs the wrapped backend replaced (where it declares ``restarts_envs``)."""
        return self.envs.take_restarts()

    def _recv_any(self, timeout: float | None = None) -> Any:
        """Steps and resets received in one wait (the wrapped env's ``recv_any``, where it declares
        ``recv_any``), telling :meth:`on_step` and :meth:`on_reset`."""
        steps, resets = self.envs.recv_any(timeout)
        if steps is not None:
            self.on_step(self._ids(steps[5]), steps[4])
        if resets is not None:
            self.on_reset(self._ids(resets[2]), resets[1])
        return steps, resets

    def _step_all(self, actions: Any) -> AllEnvStep:
        """Step every env (the wrapped env's ``step_all``, where it declares ``steps_all_envs``)."""
        step: AllEnvStep = self.envs.step_all(self.to_envs(actions))
        return step

    def _step_into(self, actions: Any, block: StepBlock) -> None:
        """Step every env into the block's next row (the wrapped env's ``step_into``, where it declares
        ``steps_in_blocks``)."""
        self.envs.step_into(self.to_envs(actions), block)

    def get_env_attr(self, name: str, env_ids: Any = None) -> list[Any]:
        """The wrapped vector env's ``get_env_attr``."""
        return self.envs.get_env_attr(name, env_ids)  # type: ignore[no-any-return]

    def set_env_attr(self, name: str, value: Any, env_ids: Any = None) -> None:
        """The wrapped vector env's ``set_env_attr``."""
        self.envs.set_env_attr(name, value, env_ids)

    def render(self) -> Any:
        """The wrapped envs' render results."""
        return self.envs.render()

    def close(self) -> None:
        """Close the wrapped vector env."""
        self.envs.close()
