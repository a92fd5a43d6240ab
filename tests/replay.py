"""Replay check shared by the tests: a stored episode must be what its seed and actions reproduce."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def assert_replays(env: gym.Env, episode: Any, options: dict[str, Any] | None = None) -> None:
    """Reset ``env`` with the episode's seed, step its actions: observations, rewards and flags match exactly."""
    obs, _ = env.reset(seed=episode.seed, options=options)
    np.testing.assert_array_equal(obs, episode.observations[0])
    for t, action in enumerate(np.asarray(episode.actions).tolist()):
        obs, reward, terminated, truncated, _ = env.step(action)
        np.testing.assert_array_equal(obs, episode.observations[t + 1])
        assert reward == episode.rewards[t]
        assert terminated == episode.terminations[t] and truncated == episode.truncations[t]
