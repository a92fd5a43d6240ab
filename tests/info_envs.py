"""TargetEnv: an env whose infos say which action it wants next, for the tests of infos reaching policies.

It lives apart from those tests so that subprocess workers, which import the module defining their env,
import only gymnasium and numpy, not the torch and Tianshou the tests themselves import.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

NUM_TARGETS = 5


class TargetEnv(gym.Env):
    """Wants action ``info["target"]`` of its latest info (drawn from the reset seed); episodes of 2-6 steps.

    ``info["fresh"]`` is 1 in a reset's info, 0 in a step's; ``info["t"]`` counts the episode's steps."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(NUM_TARGETS)
        self._t = 0
        self._length = 0
        self._target = 0

    def _info(self, fresh: int) -> dict[str, Any]:
        self._target = int(self.np_random.integers(NUM_TARGETS))
        return {"target": self._target, "fresh": fresh, "t": self._t}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(2, 7))
        return np.zeros(1, np.float32), self._info(1)

    def step(self, action: Any) -> Any:
        reward = 1.0 if int(action) == self._target else 0.0
        self._t += 1
        return np.full(1, self._t, np.float32), reward, self._t >= self._length, False, self._info(0)
