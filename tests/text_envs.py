"""Deterministic test envs with gymnasium Text spaces (top-level, so they pickle to worker processes)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: Characters of more than one UTF-8 byte (2, 3 and 4), so storage must really encode UTF-8.
WIDE = "aé€𝄞xyz"


def text_obs_space() -> spaces.Dict:
    """Text at the top of a Dict and inside a nested Tuple, next to numeric leaves."""
    return spaces.Dict(
        {
            "word": spaces.Text(8, min_length=1, charset=WIDE),
            "pos": spaces.Box(-10.0, 10.0, (2,), dtype=np.float32),
            "pair": spaces.Tuple((spaces.Text(4, min_length=0, charset="xyz"), spaces.Discrete(5))),
        }
    )


def text_action_space() -> spaces.Tuple:
    return spaces.Tuple((spaces.Text(3, min_length=1, charset="xyz"), spaces.Discrete(2)))


class TextEnv(gym.Env):
    """Dict observations holding Text leaves, Tuple(Text, Discrete) actions; everything a function of the
    reset seed and the actions. ``flat=True``: a bare Text observation and a bare Text action space.

    ``bad`` makes step 2 return an observation outside the space: "long" (longer than max_length),
    "charset" (a character outside it), "type" (an int instead of a str).
    """

    def __init__(self, flat: bool = False, bad: str | None = None) -> None:
        self.flat = flat
        self.bad = bad
        self.observation_space: gym.Space[Any] = spaces.Text(6, charset=WIDE) if flat else text_obs_space()
        self.action_space: gym.Space[Any] = spaces.Text(3, charset="xyz") if flat else text_action_space()
        self._t = 0
        self._length = 5
        self._word = "a"

    def _obs(self, echo: str) -> Any:
        if self.flat:
            return self._word[:6]
        return {
            "word": self._word,
            "pos": np.array([self._t, -self._t], dtype=np.float32),
            "pair": (echo, self._t % 5),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(2, 7))
        n = int(self.np_random.integers(1, 7))
        self._word = "".join(WIDE[i] for i in self.np_random.integers(0, len(WIDE), n))
        return self._obs(""), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        text = str(action if self.flat else action[0])
        self._t += 1
        self._word = (self._word[1:] + text)[:6] or "a"
        obs = self._obs(text)
        if self.bad is not None and self._t == 2:
            value = {"long": "a" * 12, "charset": "aQ", "type": 7}[self.bad]
            if self.flat:
                obs = value
            else:
                obs["word"] = value
        reward = float(len(text)) + (0.0 if self.flat else float(action[1]))
        return obs, reward, self._t >= self._length, False, {}
