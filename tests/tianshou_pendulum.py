"""What the tests of vcollect.tianshou's stored actions share: a Pendulum that records every action it is
given, a small SAC policy (action scaling into Pendulum's [-2, 2]) and each env's stored actions.
Imported only by test modules that have already skipped where tianshou or torch is missing."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorProbabilistic

import vcollect.tianshou as vt

SIZE = 100  # transitions per env in the buffers here: episodes of 200 steps never wrap or end


class Recorded(gym.Wrapper):  # type: ignore[type-arg]
    """Pendulum keeping every action it is given."""

    def __init__(self) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.given: list[np.ndarray] = []

    def step(self, action: Any) -> Any:
        self.given.append(np.array(action, copy=True))
        return self.env.step(action)


def sac(action_scaling: bool = True) -> SACPolicy:
    """A SAC policy for Pendulum with a tiny actor, its weights seeded."""
    torch.manual_seed(0)
    space = gym.make("Pendulum-v1").action_space
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=(3,), hidden_sizes=[8]), action_shape=space.shape, unbounded=True
    )
    return SACPolicy(actor=actor, action_space=space, action_scaling=action_scaling)


def stored_per_env(buf: vt.VectorReplayBuffer) -> list[np.ndarray]:
    """Each env's stored actions, oldest first (sub-buffers of SIZE transitions)."""
    indices = buf.sample_indices(0)
    act = buf[indices].act
    return [act[indices // SIZE == env] for env in range(buf.buffer_num)]
