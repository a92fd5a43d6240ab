"""StepInfoTap: a vector env passed through to vcollect's collector, each step's info dicts written beside the
ring rows of their transitions (vcollect.tianshou.infos), as Tianshou's Collector stores ``info``.

It wraps backends that step each env on request (the subset loop's: dummy, subprocess, Ray), keeping every
capability they declare (``step_reset`` included): a step's infos are written when the step returns, before
the collector records it, so the ring's newest row of each stepped env is that step's row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.flat_rows import FlatRows
from vcollect.envs import StepResetResult
from vcollect.envs.base import BaseVectorEnv
from vcollect.tianshou.infos import RowInfos

__all__ = ["StepInfoTap", "taps"]


def taps(envs: Any) -> bool:
    """Whether StepInfoTap can wrap ``envs``: a backend whose envs step on request, one subset at a time."""
    capabilities = envs.capabilities
    return capabilities.loop == "subset" and not capabilities.recv_any and capabilities.recv_batch_size == 1


class StepInfoTap:
    """A VectorEnv passing the protocol through and writing each step's infos at its ring rows.

    Args:
        envs: A subset-stepping vcollect VectorEnv (``taps(envs)``).
        ring: The rings the collector records into.
        infos: Where the infos go.
    """

    def __init__(self, envs: Any, ring: VectorRingBuffer, infos: RowInfos) -> None:
        self.envs = envs
        self.capabilities = envs.capabilities
        self.num_envs: int = envs.num_envs
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.observation_space = envs.observation_space
        self.action_space = envs.action_space
        self.env_spec = envs.env_spec if isinstance(envs, BaseVectorEnv) else None
        self._ring = ring
        self._infos = infos
        self._all_ids = np.arange(self.num_envs)

    @property
    def closed(self) -> bool:
        """Whether the wrapped vector env is closed."""
        return bool(self.envs.closed)

    @property
    def in_flight(self) -> np.ndarray:
        """Env ids with a step or reset in flight."""
        return self.envs.in_flight  # type: ignore[no-any-return]

    def _record(self, env_ids: Any, infos: list[dict[str, Any]]) -> None:
        ids = self._all_ids if env_ids is None else np.asarray(env_ids, dtype=np.intp)
        self._infos.write(FlatRows(self._ring).last_rows[ids], infos)

    def reset(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> Any:
        """The wrapped env's reset."""
        return self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)

    def step(self, actions: Any, env_ids: Any = None) -> Any:
        """Step, writing each env's info at its step row."""
        result = self.envs.step(actions, env_ids)
        self._record(env_ids, result[4])
        return result

    def step_reset(self, actions: Any, env_ids: Any = None, **kwargs: Any) -> StepResetResult:
        """Step and restart the ended envs (the wrapped env's ``step_reset``), writing the step's infos."""
        result: StepResetResult = self.envs.step_reset(actions, env_ids, **kwargs)
        self._record(env_ids, result.infos)
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps (async half)."""
        self.envs.send(actions, env_ids)

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished steps, writing each env's info at its step row."""
        result = self.envs.recv(min_ready=min_ready, timeout=timeout)
        self._record(result[5], result[4])
        return result

    def reset_async(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> None:
        """Dispatch resets (async half)."""
        self.envs.reset_async(env_ids, seeds=seeds, options=options)

    def recv_reset(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished resets."""
        return self.envs.recv_reset(min_ready=min_ready, timeout=timeout)

    def take_restarts(self) -> Any:
        """The envs the wrapped backend replaced (where it declares ``restarts_envs``)."""
        return self.envs.take_restarts()

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
