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
from vcollect.envs.steps import AllEnvStep, StepBlock, StepResetResult

__all__ = ["MappedActions"]


class MappedActions(PassThroughVectorEnv):
    """A VectorEnv passing the protocol through, with ``map_action`` applied to every action batch it is given.

    The calls a backend offers beyond the protocol (``step_all``, ``step_into``, ``step_reset``,
    ``send_step_reset``/``recv_step_reset``, ``take_restarts``, ``recv_any``) are forwarded as well; the
    wrapper declares the wrapped env's capabilities, so a collector calls only those the env has.

    Args:
        envs: The wrapped vcollect VectorEnv.
    """

    def __init__(self, envs: Any) -> None:
        super().__init__(envs)
        self.map_action: Callable[[Any], Any] | None = None
        """Applied to each action batch before the envs get it (None: the actions as they come). It must
        return a new batch, never write into the one it is given (the collector records that one)."""

    def _mapped(self, actions: Any) -> Any:
        return actions if self.map_action is None else self.map_action(actions)

    def step(self, actions: Any, env_ids: Any = None) -> Any:
        """Step (the wrapped env's) with the mapped actions."""
        return super().step(self._mapped(actions), env_ids)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps with the mapped actions (async half)."""
        super().send(self._mapped(actions), env_ids)

    def step_all(self, actions: Any) -> AllEnvStep:
        """Step every env with the mapped actions (the wrapped env's ``step_all``)."""
        step: AllEnvStep = self.envs.step_all(self._mapped(actions))
        return step

    def step_into(self, actions: Any, block: StepBlock) -> None:
        """Step every env with the mapped actions into the block's next row (the wrapped env's ``step_into``)."""
        self.envs.step_into(self._mapped(actions), block)

    def step_reset(self, actions: Any, env_ids: Any = None, **kwargs: Any) -> StepResetResult:
        """Step with the mapped actions and restart the ended envs (the wrapped env's ``step_reset``)."""
        result: StepResetResult = self.envs.step_reset(self._mapped(actions), env_ids, **kwargs)
        return result

    def send_step_reset(self, actions: Any, **kwargs: Any) -> None:
        """Start a step_reset of every env with the mapped actions (the wrapped env's ``send_step_reset``)."""
        self.envs.send_step_reset(self._mapped(actions), **kwargs)

    def recv_step_reset(self) -> StepResetResult:
        """The result of the step_reset ``send_step_reset`` started (the wrapped env's)."""
        result: StepResetResult = self.envs.recv_step_reset()
        return result

    def take_restarts(self) -> Any:
        """The envs the wrapped backend replaced (where it declares ``restarts_envs``)."""
        return self.envs.take_restarts()

    def recv_any(self, timeout: float | None = None) -> Any:
        """Steps and resets received in one wait (the wrapped env's ``recv_any``)."""
        return self.envs.recv_any(timeout)
