"""What the page shows of one episode: its frames (for the video) and its rewards (for the curve).

Frames: the dataset's own renderer where it has one, else the stored image observations.

``Dataset.render_episode`` (frames from stored images or from a replay through the env spec) is used when
the dataset offers it. Without it, frames come from stored image observations only: a uint8 Box
observation of HxW, HxWx1 or HxWx3, or a stack of such frames on axis 0 (the newest frame shown). Every
observation of the episode is a frame: an episode of T steps gives T+1 frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.errors import VCollectError
from vcollect.store.read.reader import Dataset

__all__ = ["MIN_SIDE", "EpisodeFrames", "episode_frames", "episode_rewards", "image_observations"]

#: The least height and width an observation must have to be taken as an image.
MIN_SIDE = 8


@dataclass(frozen=True)
class EpisodeFrames:
    """An episode's frames, or why it has none.

    Attributes:
        frames: (N, H, W, 3) uint8 frames; None when there are none.
        reason: Why there are none (None when ``frames`` is set).
    """

    frames: np.ndarray | None
    reason: str | None = None


def image_observations(space: gym.Space[Any]) -> bool:
    """Whether observations of ``space`` are images (or stacks of them) the page can show as frames."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8:
        return False
    shape = space.shape
    if len(shape) == 2:
        return min(shape) >= MIN_SIDE
    if len(shape) == 3:
        return min(shape[1:] if shape[2] not in (1, 3) else shape[:2]) >= MIN_SIDE
    return len(shape) == 4 and shape[3] in (1, 3) and min(shape[1:3]) >= MIN_SIDE


def _as_rgb(observations: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) uint8 frames from stored image observations (a stack's newest frame)."""
    obs = np.asarray(observations)
    if obs.ndim == 5 or (obs.ndim == 4 and obs.shape[3] not in (1, 3)):  # a stack: (N, k, H, W[, C])
        obs = obs[:, -1]
    if obs.ndim == 3:
        obs = obs[..., None]
    if obs.shape[3] == 1:
        obs = np.repeat(obs, 3, axis=3)
    return np.ascontiguousarray(obs, dtype=np.uint8)


def episode_frames(dataset: Dataset, episode_id: int) -> EpisodeFrames:
    """The frames of the episode with global id ``episode_id``.

    Args:
        dataset: A loaded dataset (not a view: the id is its position too).
        episode_id: The episode's global id.

    Returns:
        Its frames, or the reason it has none (no image observations and no renderer, or what the renderer
        refused: an unseeded episode, no env spec, ...).
    """
    render = getattr(dataset, "render_episode", None)
    if callable(render):
        try:
            return EpisodeFrames(np.asarray(render(int(episode_id), source="auto")))
        except VCollectError as exc:
            return EpisodeFrames(None, str(exc))
    if not image_observations(dataset.observation_space):
        return EpisodeFrames(None, f"the observations of {dataset.id!r} are not images ({dataset.observation_space}), "
                                   "and this vcollect renders episodes from stored image observations only")
    episode = next(iter(dataset.iterate_episodes([int(episode_id)])))
    return EpisodeFrames(_as_rgb(episode.observations))


def episode_rewards(dataset: Dataset, episode_id: int) -> np.ndarray:
    """The rewards of the episode with global id ``episode_id``, one per step (float64)."""
    episode = next(iter(dataset.iterate_episodes([int(episode_id)])))
    return np.asarray(episode.rewards, dtype=np.float64)
