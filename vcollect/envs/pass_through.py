"""PassThroughVectorEnv: a vcollect VectorEnv handed on whole, with hooks told of each reset's and step's infos.

What watches a vector env's infos on their way to the collector (recording them per episode, or writing them
beside ring rows) wraps the env in a subclass that overrides :meth:`PassThroughVectorEnv.on_reset` and
:meth:`PassThroughVectorEnv.on_step`, as gymnasium's ``VectorWrapper`` subclasses override what they change:
the protocol's methods, spaces and capabilities are forwarded here once. ``step_reset`` and
``take_restarts`` are not: a vector env has them exactly where it declares them, so a subclass that declares
``step_reset`` or ``restarts_envs`` adds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vcollect.envs.base import BaseVectorEnv
from vcollect.envs.capabilities import EnvCapabilities

__all__ = ["PassThroughVectorEnv"]


class PassThroughVectorEnv:
    """A VectorEnv passing the protocol through to ``envs``, telling :meth:`on_reset` and :meth:`on_step` of
    each result's infos with their env ids.

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
        result = self.envs.step(actions, env_ids)
        self.on_step(self._ids(env_ids), result[4])
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps (async half)."""
        self.envs.send(actions, env_ids)

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
