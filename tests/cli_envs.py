"""Envs and policy factories that `vcollect collect` subprocesses import in the CLI tests.

Importing this module registers ``InfoCounter-v0``; the tests name it ``tests.cli_envs:InfoCounter-v0``
so the command (and its worker processes) import this module themselves. The envs are registered with
entry point strings, so their specs are stored with a dataset; ``UnstorableCounter-v0`` is registered with
the class itself (a callable), whose spec gymnasium cannot write as JSON.
"""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class InfoCounterEnv(gym.Env):
    """Observation = steps since reset; episodes last ``episode_length`` steps; informative info dicts.

    Reset and step infos carry ``t``, ``nested/double`` (2 t) and ``action`` (the action taken, -1 at
    reset): the same keys at reset and every step, as recorded infos must have.
    """

    def __init__(self, episode_length: int = 4) -> None:
        self.observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.episode_length = episode_length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {"t": 0, "nested": {"double": 0}, "action": -1}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        info = {"t": self.t, "nested": {"double": 2 * self.t}, "action": int(action)}
        return np.array([self.t], np.float32), float(action), self.t >= self.episode_length, False, info


gym.register("InfoCounter-v0", entry_point="tests.cli_envs:InfoCounterEnv")
gym.register("UnstorableCounter-v0", entry_point=InfoCounterEnv)


class ConstantPolicy:
    """Always the same action (``action_space.n - 1``), so stored actions show which policy ran."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        assert isinstance(action_space, spaces.Discrete)
        self.action = int(action_space.start + action_space.n - 1)

    def __call__(self, obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
        return np.full(len(obs), self.action, dtype=np.int64), None


def constant_policy(observation_space: gym.Space, action_space: gym.Space) -> ConstantPolicy:
    """The factory `--policy tests.cli_envs:constant_policy` calls."""
    return ConstantPolicy(observation_space, action_space)


def random_policy(observation_space: gym.Space, action_space: gym.Space) -> Any:
    """The factory `--policy tests.cli_envs:random_policy` calls: RandomPolicy, which reads no observations."""
    from vcollect.policies import RandomPolicy

    return RandomPolicy(action_space, seed=0)


def broken_policy(observation_space: gym.Space, action_space: gym.Space) -> ConstantPolicy:
    """A factory that fails, for the error-path test."""
    raise RuntimeError("this factory is broken on purpose")


class ExplodingEnv(InfoCounterEnv):
    """An InfoCounterEnv whose third step raises, for the run-time failure test."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t == 2:
            raise ValueError("ExplodingEnv exploded at step 3")
        return super().step(action)


gym.register("Exploding-v0", entry_point="tests.cli_envs:ExplodingEnv")


class HangingEnv(InfoCounterEnv):
    """An InfoCounterEnv whose step number ``hang_after`` (counted over all its episodes) never returns: it
    waits on an event nobody sets. For the ``--timeout`` tests (in worker processes, or in a command's own
    process that the test runs as a subprocess)."""

    def __init__(self, episode_length: int = 4, hang_after: int = 10) -> None:
        super().__init__(episode_length)
        self.hang_after = hang_after
        self.total_steps = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.total_steps += 1
        if self.total_steps == self.hang_after:
            threading.Event().wait()
        return super().step(action)


gym.register("Hanging-v0", entry_point="tests.cli_envs:HangingEnv")
