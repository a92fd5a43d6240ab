"""Minari-compatible recording callbacks: what is stored per step and per episode.

Subclasses written for Minari's ``StepDataCallback``/``EpisodeMetadataCallback`` work unchanged:
the call signatures and the returned keys are the same.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["STEP_DATA_KEYS", "EpisodeMetadataCallback", "StepDataCallback", "reward_statistics"]

#: The keys every step_data dict has; any other key a StepDataCallback returns is an "extra".
STEP_DATA_KEYS = frozenset({"observation", "action", "reward", "terminated", "truncated", "info"})


class StepDataCallback:
    """Turns one env transition into the step_data dict that gets recorded.

    Called with keyword arguments, as Minari does: once after ``reset`` (``action``, ``rew``,
    ``terminated`` and ``truncated`` are None) and after every ``step``. Override it to edit the
    values or to add keys: every key besides observation/action/reward/terminated/truncated/info
    (nested dicts allowed) is stored under ``extras/`` of the dataset and read back in
    ``EpisodeData.extras`` (Minari silently drops them; vcollect keeps them).
    """

    def __call__(
        self,
        env: gym.Env[Any, Any],
        obs: Any,
        info: dict[str, Any],
        action: Any | None = None,
        rew: Any | None = None,
        terminated: bool | None = None,
        truncated: bool | None = None,
    ) -> dict[str, Any]:
        """Return the step data of the transition ``obs, rew, terminated, truncated, info = env.step(action)``.

        Args:
            env: The recorded env.
            obs: The observation the reset or step returned.
            info: Its info dict.
            action: The action taken (None after a reset).
            rew: The reward (None after a reset).
            terminated: Whether the episode terminated (None after a reset).
            truncated: Whether it was truncated (None after a reset).
        """
        return {
            "observation": obs,
            "action": action,
            "reward": rew,
            "terminated": terminated,
            "truncated": truncated,
            "info": info,
        }


class EpisodeMetadataCallback:
    """Computes per-episode metadata, stored as columns of the dataset's ``episodes/`` table.

    Same contract as Minari's: called once per finished episode with a dict holding (at least) the
    episode's ``rewards`` array; returns a dict of scalars (numbers, bools or strings). The keys of
    the first episode fix the columns; every later episode must return the same keys.
    """

    def __call__(self, episode: dict[str, Any]) -> dict[str, Any]:
        """Return Minari's default reward statistics of the episode.

        Args:
            episode: The finished episode, holding (at least) its ``rewards``.
        """
        return reward_statistics(np.asarray(episode["rewards"], dtype=np.float64))


def reward_statistics(rewards: np.ndarray) -> dict[str, float]:
    """Sum, mean, std, max and min of a float64 reward array, bit for bit as numpy's sum/mean/std/max/min
    give them (Minari's default metadata), without their per-call overhead; all 0.0 for an empty episode."""
    n = rewards.shape[0]
    if n == 0:
        return {"rewards_sum": 0.0, "rewards_mean": 0.0, "rewards_std": 0.0, "rewards_max": 0.0, "rewards_min": 0.0}
    total = float(rewards.sum())
    mean = total / n
    centered = rewards - mean
    return {
        "rewards_sum": total,
        "rewards_mean": mean,
        "rewards_std": math.sqrt(float((centered * centered).sum()) / n),
        "rewards_max": float(rewards.max()),
        "rewards_min": float(rewards.min()),
    }
