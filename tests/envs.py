"""Small deterministic test environments shared by the test suite.

Everything here is a top-level class or function so that factories (the classes themselves, or
functools.partial of them) pickle to worker processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class DictObsEnv(gym.Env):
    """Dict observations (Box, Discrete and a nested Tuple), Discrete(3) actions, seeded episode lengths.

    Everything (episode length, observations, rewards, whether the end is a termination or a
    truncation) is a function of the reset seed and the actions, so two copies agree bit for bit.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self, min_length: int = 3, max_length: int = 12, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-100.0, 100.0, shape=(2,), dtype=np.float32),
                "count": spaces.Discrete(1000),
                "nested": spaces.Tuple(
                    (spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float64), spaces.Discrete(4, start=1))
                ),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.min_length = min_length
        self.max_length = max_length
        self.render_mode = render_mode
        self._t = 0
        self._length = max_length
        self._position = np.zeros(2, np.float32)
        self._noise = np.zeros(3)
        self._truncate = False

    def _obs(self) -> dict[str, Any]:
        return {
            "position": self._position.copy(),
            "count": self._t,
            "nested": (self._noise.copy(), 1 + self._t % 4),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        self._truncate = bool(self.np_random.random() < 0.3)
        self._position = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._noise = self.np_random.random(3)
        return self._obs(), {"length": self._length}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"invalid action {action!r}")
        self._t += 1
        self._position = self._position + np.float32(int(action) - 1) * np.float32(0.5)
        self._noise = self.np_random.random(3)
        reward = float(self._position.sum()) + 0.1 * int(action)
        done = self._t >= self._length
        return self._obs(), reward, done and not self._truncate, done and self._truncate, {"t": self._t}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((4, 4, 3), self._t % 256, np.uint8)


class CountingEnv(gym.Env):
    """Observation = number of steps taken since reset; ends after exactly `episode_length` steps.

    Reward is 1 per step, the step info is {"t": steps since reset}; reset option "start" offsets the
    counter (observation = start + steps). With `truncate=True` the last step
    truncates instead of terminating.
    Use it where tests count steps and episodes exactly.
    """

    def __init__(self, episode_length: int = 5, truncate: bool = False) -> None:
        self.observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.episode_length = episode_length
        self.truncate = truncate
        self.t = 0
        self.start = 0.0
        self.last_seed: int | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.start = float((options or {}).get("start", 0.0))
        self.last_seed = seed
        return np.array([self.start], np.float32), {"seed": seed}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        done = self.t >= self.episode_length
        info = {"t": self.t}
        obs = np.array([self.start + self.t], np.float32)
        return obs, 1.0, done and not self.truncate, done and self.truncate, info


class SlowEnv(gym.Wrapper):
    """CartPole whose steps sleep a seeded, heavy-tailed time (fast, or slow with probability slow_prob).

    The sleep times come from their own generator seeded by the reset seed, so a run is reproducible.
    `reset_time` makes every reset sleep that long (to test that slow resets do not block others); a
    reset with options={"reset_time": t} sleeps t instead.
    """

    def __init__(
        self,
        fast_time: float = 0.0002,
        slow_time: float = 0.005,
        slow_prob: float = 0.1,
        reset_time: float = 0.0,
    ) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.fast_time = fast_time
        self.slow_time = slow_time
        self.slow_prob = slow_prob
        self.reset_time = reset_time
        self._sleep_rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self._sleep_rng = np.random.default_rng([seed, 7919])
        options = dict(options or {})
        reset_time = options.pop("reset_time", self.reset_time)
        if reset_time:
            time.sleep(reset_time)
        return self.env.reset(seed=seed, options=options or None)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        slow = self._sleep_rng.random() < self.slow_prob
        time.sleep(self.slow_time if slow else self.fast_time)
        return self.env.step(action)


class FailingEnv(CountingEnv):
    """A CountingEnv that raises ValueError("FailingEnv exploded ...") at step `fail_step` (counted
    from 1 since reset), or in reset when `fail_on_reset` is true, or in its `fail_on_reset_number`-th
    reset (counted from 1)."""

    def __init__(
        self,
        fail_step: int | None = 3,
        fail_on_reset: bool = False,
        episode_length: int = 100,
        fail_on_reset_number: int | None = None,
    ) -> None:
        super().__init__(episode_length)
        self.fail_step = fail_step
        self.fail_on_reset = fail_on_reset
        self.fail_on_reset_number = fail_on_reset_number
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.resets += 1
        if self.fail_on_reset or self.resets == self.fail_on_reset_number:
            raise ValueError("FailingEnv exploded in reset")
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.fail_step is not None and self.t + 1 == self.fail_step:
            raise ValueError(f"FailingEnv exploded at step {self.fail_step}")
        return super().step(action)


class DyingEnv(CountingEnv):
    """A CountingEnv whose process exits abruptly (os._exit) at step `die_step` since reset.

    Only use it in a worker process: in the test process it would end the test run.
    """

    def __init__(self, die_step: int = 3, exit_code: int = 3, episode_length: int = 100) -> None:
        super().__init__(episode_length)
        self.die_step = die_step
        self.exit_code = exit_code

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.die_step:
            os._exit(self.exit_code)
        return super().step(action)


class ExitOnceEnv(CountingEnv):
    """A CountingEnv; the first one built anywhere (it wins the O_EXCL creation of `flag`, writing its pid
    there) ends its process with os._exit at its `at`-th step since construction, mid-episode (a Ray worker
    or env worker dying once, replaced; only in a worker process)."""

    def __init__(self, flag: str, at: int, episode_length: int = 5) -> None:
        super().__init__(episode_length)
        self.total_steps, self.at = 0, -1
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        self.at = at

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.total_steps += 1
        if self.total_steps == self.at:
            os._exit(3)
        return super().step(action)


class BadObsEnv(CountingEnv):
    """A CountingEnv (obs space Box(0, 10, (1,))) that returns an observation outside its space at step
    `bad_step`, or on reset when `bad_on_reset` is true: the value -5 (right shape), or with
    `bad_shape=True` an array of shape (3,) that does not even fit the space's shape."""

    def __init__(
        self,
        bad_step: int | None = 2,
        bad_on_reset: bool = False,
        bad_shape: bool = False,
        episode_length: int = 8,
    ) -> None:
        super().__init__(episode_length)
        self.observation_space = spaces.Box(0.0, 10.0, shape=(1,), dtype=np.float32)
        self.bad_step = bad_step
        self.bad_on_reset = bad_on_reset
        self.bad_shape = bad_shape

    def _bad(self) -> np.ndarray:
        return np.zeros(3, np.float32) if self.bad_shape else np.array([-5.0], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return (self._bad() if self.bad_on_reset else obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.bad_step is not None and self.t == self.bad_step:
            obs = self._bad()
        return obs, reward, terminated, truncated, info


def make_cartpole() -> gym.Env:
    """CartPole-v1 through gymnasium.make (a picklable zero-argument factory)."""
    return gym.make("CartPole-v1")


def make_pendulum() -> gym.Env:
    """Pendulum-v1 through gymnasium.make (a picklable zero-argument factory)."""
    return gym.make("Pendulum-v1")


class NarrowDiscreteEnv(gym.Env):
    """Discrete spaces narrower than int64: observation {"cell": Discrete(7, int32), "lit": Discrete(2, int8)}
    (the step count modulo 7, and its parity), actions Discrete(3, int16); episodes of 4 steps."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"cell": spaces.Discrete(7, dtype=np.int32), "lit": spaces.Discrete(2, dtype=np.int8)}
        )
        self.action_space = spaces.Discrete(3, dtype=np.int16)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        return {"cell": np.int32(self.t % 7), "lit": np.int8(self.t % 2)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(action), action
        self.t += 1
        return self._obs(), float(action), self.t >= 4, False, {}
