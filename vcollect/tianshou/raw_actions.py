"""RawActions: a TianshouPolicy whose actions the collector records as the policy gave them.

Tianshou's Collector stores the policy's action (after its exploration noise) and steps the envs with its
``map_action`` of it; vcollect's collector applies ``map_action`` itself when the policy has one and records
what the envs got. This wrapper has no ``map_action`` (vcollect.tianshou.mapped_actions maps the actions for
the envs instead), so the rings hold Tianshou's actions. The actions are Tianshou's raw ones (for a continuous
policy, before scaling into the env's bounds), so the collector does not check them against the env's
action space, as Tianshou's does not.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.policies.tianshou_policy import TianshouPolicy

__all__ = ["RawActions"]


class RawActions:
    """Calls a TianshouPolicy, leaving ``map_action`` to the envs' side.

    Args:
        policy: The wrapped policy.
        action_space: The envs' action space (one env's).
    """

    actions_in_space = True
    """Not checked against the env's space (vcollect.policies.base): they are the policy's raw actions."""
    noise_in_space = True

    def __init__(self, policy: TianshouPolicy, action_space: gym.Space[Any]) -> None:
        self.policy = policy
        self.action_space = action_space
        self.wants_infos = policy.wants_infos

    def __call__(self, obs: Any, state: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        """The policy's actions and state (TianshouPolicy's call)."""
        return self.policy(obs, state, **kwargs)

    def add_exploration_noise(self, actions: Any, obs: Any) -> Any:
        """The policy's exploration noise (TianshouPolicy's)."""
        return self.policy.add_exploration_noise(actions, obs)

    def reset_state(self, state: Any, env_ids: np.ndarray) -> Any:
        """Zero the state rows of env ids that restart (TianshouPolicy's)."""
        return self.policy.reset_state(state, env_ids)
