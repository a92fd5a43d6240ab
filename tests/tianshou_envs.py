"""The walk Tianshou 2.0.1's collector and buffer tests step (its test/base/env.py MoveToRightEnv, the parts
those tests use): the observation is a position on a line, action 1 moves right, 0 left (not below 0); reaching
``size`` terminates with reward 1. Every step's info is ``{"key": 1, "env": <the env>}``, and the reset's.
Module level so that subprocess workers can import it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class MoveToRightEnv(gym.Env[np.ndarray, int]):
    """Walk right from ``options["state"]`` (0 by default) to ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.index = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.index = (options or {}).get("state", 0)
        return np.array([self.index], dtype=np.float32), {"key": 1, "env": self}

    def step(self, action: Any) -> Any:
        self.index = self.index + 1 if int(action) == 1 else max(self.index - 1, 0)
        done = self.index == self.size
        return np.array([self.index], dtype=np.float32), int(done), done, False, {"key": 1, "env": self}


def move_right(size: int) -> MoveToRightEnv:
    """A MoveToRightEnv of ``size`` (a picklable factory with functools.partial)."""
    return MoveToRightEnv(size)
