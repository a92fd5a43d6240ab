"""One stored episode replayed step by step: the env reset with the episode's seed and options, its actions
stepped, and what the env returns compared with what was stored as it goes.

``vcollect verify --replay`` reports a divergence as a line; rendering by replay
(``Dataset.render_episode(source="replay")``) draws a frame after each step and stops at the first
divergence. Both walk the episode through :func:`replay_steps`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.errors import ReplayDivergenceError
from vcollect.spaces import flatten_batch, unflatten_batch
from vcollect.store.read.dataset_index import EpisodeData

__all__ = ["replay_steps"]


def replay_steps(env: Any, episode: EpisodeData, observation_space: gym.Space[Any],
                 action_space: gym.Space[Any]) -> Iterator[int]:
    """Replay ``episode`` in ``env``, yielding after the reset (0) and after each step t (t + 1), so the
    caller can look at the env (render it) in each state the episode passed through.

    Observations, rewards and terminations must match exactly; a stored truncation may also mark an episode
    cut short by the collector (``unfinished='truncate'``), so only the env's own truncations must be stored.

    Args:
        env: A gymnasium env made from the dataset's env spec.
        episode: The stored episode (with its seed).
        observation_space: The dataset's observation space.
        action_space: The dataset's action space.

    Yields:
        The number of steps replayed so far.

    Raises:
        ReplayDivergenceError: What the env returned differs from what is stored (naming the step).
    """
    obs, _ = env.reset(seed=episode.seed, options=episode.options)
    obs_leaves = [np.asarray(leaf) for leaf in flatten_batch(observation_space, episode.observations)]
    if not _same(observation_space, obs, obs_leaves, 0):
        raise ReplayDivergenceError(episode.id, 0, "the reset observation differs")
    yield 0
    actions = flatten_batch(action_space, episode.actions)
    for t in range(len(episode)):
        action = unflatten_batch(action_space, [leaf[t] for leaf in actions])
        obs, reward, terminated, truncated, _ = env.step(action)
        if not _same(observation_space, obs, obs_leaves, t + 1):
            raise ReplayDivergenceError(episode.id, t + 1, f"the observation after step {t} differs")
        if float(reward) != float(episode.rewards[t]):
            raise ReplayDivergenceError(
                episode.id, t + 1, f"the reward of step {t} differs ({reward!r} replayed, {episode.rewards[t]!r} stored)"
            )
        if bool(terminated) != bool(episode.terminations[t]):
            raise ReplayDivergenceError(episode.id, t + 1, f"the termination of step {t} differs")
        if truncated and not episode.truncations[t]:
            raise ReplayDivergenceError(episode.id, t + 1, f"the env truncated at step {t}, the stored episode did not")
        yield t + 1


def _same(space: gym.Space[Any], value: Any, stored: list[np.ndarray], t: int) -> bool:
    """Whether ``value`` (one observation) equals row t of the stored observation leaves, leaf by leaf."""
    got = flatten_batch(space, value)
    return all(np.array_equal(np.asarray(g), w[t]) for g, w in zip(got, stored))
