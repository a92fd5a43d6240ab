"""Envs that fail, for the env-restart and env-error tests (worker processes and Ray actors import them).

Importing this module registers ``Flaky-v0`` (a FlakyEnv); the CLI tests name it
``tests.restart_envs:Flaky-v0`` so the command's worker processes import this module themselves.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.envs import CountingEnv


def _first_claim(marker: str) -> bool:
    """Whether this call is the first to claim ``marker`` (a file made exclusively: once across processes)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


class FlakyEnv(CountingEnv):
    """A CountingEnv (episodes of ``episode_length`` steps) that fails once, across all processes: at step
    ``fail_step`` of an episode, the first env to claim the ``marker`` file raises (``mode="raise"``), kills
    its own process with SIGKILL (``mode="kill"``) or fails in its next reset (``mode="reset"``)."""

    def __init__(self, marker: str, fail_step: int = 3, mode: str = "raise", episode_length: int = 5) -> None:
        super().__init__(episode_length)
        self.marker = marker
        self.fail_step = fail_step
        self.mode = mode
        self._fail_reset = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if self._fail_reset:
            self._fail_reset = False
            raise RuntimeError("FlakyEnv failed in reset")
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.fail_step and _first_claim(self.marker):
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(30)  # the signal arrives first
            if self.mode == "reset":
                self._fail_reset = True
                self.t = self.episode_length - 1  # this step ends the episode; its reset fails
            else:
                raise RuntimeError(f"FlakyEnv failed at step {self.fail_step}")
        return super().step(action)


gym.register("Flaky-v0", entry_point=FlakyEnv)


class AlwaysRaisingEnv(CountingEnv):
    """A CountingEnv whose step ``fail_step`` of every episode raises."""

    def __init__(self, fail_step: int = 2) -> None:
        super().__init__(episode_length=5)
        self.fail_step = fail_step

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.fail_step:
            raise RuntimeError("AlwaysRaisingEnv fails every episode")
        return super().step(action)


class AlwaysKillingEnv(CountingEnv):
    """A CountingEnv that kills its own process (SIGKILL) at step ``fail_step`` of every episode."""

    def __init__(self, fail_step: int = 2) -> None:
        super().__init__(episode_length=5)
        self.fail_step = fail_step

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.fail_step:
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(30)  # the signal arrives first
        return super().step(action)


class ListRewardEnv(CountingEnv):
    """A CountingEnv whose second step returns a list as its reward (``[1.0] * 4``)."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t == 2:
            return obs, [1.0] * 4, terminated, truncated, info
        return obs, reward, terminated, truncated, info


class NoSpaceEnv(gym.Env):
    """An env whose author forgot observation_space."""

    def __init__(self) -> None:
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return np.zeros(1, np.float32), 0.0, False, False, {}


class SleepingEnv(CountingEnv):
    """A CountingEnv whose step ``hang_step`` (since reset) waits forever."""

    def __init__(self, hang_step: int = 3) -> None:
        super().__init__(episode_length=100)
        self.hang_step = hang_step

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.hang_step:
            threading.Event().wait()
        return super().step(action)


def marker_in(folder: Path) -> str:
    """A marker path (not yet made) in folder."""
    return str(folder / "failed-once")
