"""MappedActions: a vector env whose actions are mapped on their way to the envs, so that the collector records
the actions it chose while the envs step with their image.

Tianshou's Collector stores the policy's own action (for a continuous policy in [-1, 1], before scaling) and
steps the envs with the policy's ``map_action`` of it; for random actions it steps the envs with the samples
and stores their ``map_action_inverse``. vcollect's collector records the actions it hands to its vector env,
so the Tianshou adapter hands them to this wrapper, which applies ``map_action`` (the policy's, or
vcollect.tianshou.random_actions' ``RandomActions.to_envs``) in every call that carries actions: the
subset calls (``step``, ``send``, ``step_reset``, ``send_step_reset``) and the all-env calls of gymnasium
and EnvPool vector envs (``step_all``, ``step_into``). The rings then hold Tianshou's actions on every
backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vcollect.envs.pass_through import PassThroughVectorEnv

__all__ = ["MappedActions"]


class MappedActions(PassThroughVectorEnv):
    """A VectorEnv passing the protocol through, with ``map_action`` applied to every action batch it is given.

    Every call that carries actions passes them through :meth:`to_envs` (PassThroughVectorEnv forwards the
    calls, those a backend offers beyond the protocol included, and declares the wrapped env's capabilities).

    Args:
        envs: The wrapped vcollect VectorEnv.
    """

    def __init__(self, envs: Any) -> None:
        super().__init__(envs)
        self.map_action: Callable[[Any], Any] | None = None
        """Applied to each action batch before the envs get it (None: the actions as they come). It must
        return a new batch, never write into the one it is given (the collector records that one)."""

    def to_envs(self, actions: Any) -> Any:
        """``map_action`` of ``actions`` (``actions`` where it is None)."""
        return actions if self.map_action is None else self.map_action(actions)
