"""A tiny env that renders (a bright square on a dark 32x32 frame), for the rendering and live-monitor tests:
deterministic from its reset seed, cheap to step and to draw, registered by an entry point string so a
dataset's stored env spec makes it again."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

WALK_ID = "VcollectTestWalk-v0"


class WalkEnv(gym.Env[np.ndarray, int]):
    """A point walking on a 32x32 grid: action 0..3 moves it; reward = the action; ends after ``length``
    steps (terminated). Its reset seed places it."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, length: int = 12, render_mode: str | None = None) -> None:
        self.length = length
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 31, (2,), np.int64)
        self.action_space = gym.spaces.Discrete(4)
        self._pos = np.zeros(2, dtype=np.int64)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._pos = self.np_random.integers(4, 28, size=2).astype(np.int64)
        self._t = 0
        return self._pos.copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        moves = ((0, 1), (1, 0), (0, -1), (-1, 0))
        self._pos = np.clip(self._pos + moves[int(action)], 0, 31)
        self._t += 1
        return self._pos.copy(), float(action), self._t >= self.length, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.full((32, 32, 3), 20, dtype=np.uint8)
        y, x = self._pos
        frame[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2] = (250, 200, 40)
        frame[0, : self._t % 32] = 255  # a clock along the top row, so frames of one place differ by step
        return frame


gym.register(WALK_ID, entry_point="tests.render_envs:WalkEnv")
