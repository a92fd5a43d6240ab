"""The frames of one stored episode, as a (T+1, H, W, 3) uint8 array: from its stored image observations,
or from a replay of the episode through the dataset's env with ``render_mode="rgb_array"``.

Stored images: the first observation leaf that is an image (a uint8 Box of HxW, HxWx1 or HxWx3), or a stack
of them on axis 0 (the newest frame shown; a ``frame_stack`` dataset's stored single frames are read as
they lie, no stack rebuilt). Replays are checked against the stored observations as they go
(episode_replay.replay_steps): a divergence raises, it is never rendered. Labels (episode id, step,
return so far) go in a strip below each frame (vcollect/frame_text.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from vcollect.errors import EnvUnavailableError, EpisodeNotSeededError, NoImageObservationsError
from vcollect.frame_text import GLYPH_WIDTH, label_strip
from vcollect.spaces import Leaf, leaves
from vcollect.store.layout.shard_format import column_path
from vcollect.store.read.dataset_index import DatasetIndex
from vcollect.store.read.episode_replay import replay_steps
from vcollect.store.write.frame_stack import FrameStack

__all__ = ["FrameSource", "ImageLayout", "episode_frames", "image_layout", "label_frames", "resize_frames"]

FrameSource = Literal["auto", "frames", "replay"]

#: The most frames on axis 0 an observation may hold to be read as a stack of images (newest last).
MAX_STACK = 16
#: The least height and width an observation must have to be read as an image.
MIN_SIDE = 8


@dataclass(frozen=True)
class ImageLayout:
    """Where the frames lie in the stored observations.

    Attributes:
        leaf: The observation leaf that holds them.
        stacked: Each stored row holds a stack on axis 0 (the newest frame last); False for single frames
            (a ``frame_stack`` dataset's rows are single frames).
    """

    leaf: Leaf
    stacked: bool


def _is_image(shape: tuple[int, ...]) -> bool:
    if len(shape) == 2:
        return min(shape) >= MIN_SIDE
    return len(shape) == 3 and shape[2] in (1, 3) and min(shape[:2]) >= MIN_SIDE


def image_layout(space: gym.Space[Any], frame_stack: FrameStack | None) -> ImageLayout | None:
    """The stored observations' frames, or None when no observation leaf is an image.

    Args:
        space: The dataset's observation space.
        frame_stack: The dataset's frame stack layout (None: observations stored whole).

    Returns:
        The leaf holding frames and whether its stored rows are stacks.
    """
    for leaf in leaves(space):
        if leaf.dtype != np.uint8:
            continue
        if frame_stack is not None and _is_image(leaf.shape[1:]):
            return ImageLayout(leaf, stacked=False)
        if _is_image(leaf.shape):
            return ImageLayout(leaf, stacked=False)
        if len(leaf.shape) >= 3 and 2 <= leaf.shape[0] <= MAX_STACK and _is_image(leaf.shape[1:]):
            return ImageLayout(leaf, stacked=True)
    return None


def _as_rgb(frames: np.ndarray) -> np.ndarray:
    """(T, H, W), (T, H, W, 1) or (T, H, W, 3) uint8 frames as (T, H, W, 3)."""
    if frames.ndim == 3:
        frames = frames[..., None]
    if frames.shape[-1] == 1:
        frames = np.repeat(frames, 3, axis=-1)
    return np.ascontiguousarray(frames)


def resize_frames(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(T, H, W, 3) frames scaled to ``size`` = (width, height): averaged over whole blocks where the old
    sides are multiples of the new, nearest pixel otherwise.

    Args:
        frames: The frames.
        size: The new (width, height).

    Returns:
        The scaled frames (the same array when the size is unchanged).
    """
    width, height = int(size[0]), int(size[1])
    if width < 1 or height < 1:
        raise ValueError(f"size must be positive (width, height), got {size}")
    t, h, w, c = frames.shape
    if (w, h) == (width, height):
        return frames
    if h % height == 0 and w % width == 0:
        fy, fx = h // height, w // width
        blocks = frames.reshape(t, height, fy, width, fx, c)
        return (blocks.mean(axis=(2, 4), dtype=np.float32) + 0.5).astype(np.uint8)
    rows = (np.arange(height) * h) // height
    cols = (np.arange(width) * w) // width
    return np.ascontiguousarray(frames[:, rows][:, :, cols])


def label_frames(frames: np.ndarray, episode_id: int, rewards: np.ndarray) -> np.ndarray:
    """``frames`` (T+1 of them: the reset and each step's) with a strip below each giving the episode id, the
    step and the return so far.

    Args:
        frames: (T+1, H, W, 3) uint8.
        episode_id: The episode's id.
        rewards: Its T rewards.

    Returns:
        (T+1, H + strip, W, 3) uint8.
    """
    t1, _, width, _ = frames.shape
    scale = max(1, width // 240)
    so_far = np.concatenate([[0.0], np.cumsum(np.asarray(rewards, dtype=np.float64))])
    strips = [label_strip(_label_lines(episode_id, k, float(so_far[k]), width // (GLYPH_WIDTH * scale)), width, scale)
              for k in range(t1)]
    tallest = max(s.shape[0] for s in strips)
    out = np.empty((t1, frames.shape[1] + tallest, width, 3), dtype=np.uint8)
    out[:, : frames.shape[1]] = frames
    out[:, frames.shape[1] :] = 24
    for k, strip in enumerate(strips):
        out[k, frames.shape[1] : frames.shape[1] + strip.shape[0]] = strip
    return out


def _label_lines(episode_id: int, step: int, so_far: float, chars: int) -> list[str]:
    """The label's parts packed into lines of at most ``chars`` characters (always 2 lines, so every frame of
    an episode has a strip of the same height)."""
    parts = [f"ep {episode_id}", f"t {step}", f"R {so_far:.1f}"]
    first = f"{parts[0]} {parts[1]}"
    if len(first) <= chars:
        return [first, parts[2]]
    return [parts[0], f"{parts[1]} {parts[2]}"]


def episode_frames(
    index: DatasetIndex,
    episode_id: int,
    *,
    source: FrameSource,
    make_env: Callable[[], Any],
    env: Any = None,
) -> np.ndarray:
    """The frames of one episode, (T+1, H, W, 3) uint8: the reset's, then one after each step.

    Args:
        index: The loaded dataset.
        episode_id: The episode's global id.
        source: "frames" (stored image observations), "replay" (render the env while replaying the
            episode) or "auto" (frames when the observations are images, else replay).
        make_env: Makes the dataset's env with ``render_mode="rgb_array"`` (closed here after the replay).
        env: Such an env already made, to replay in (left open); None makes one with ``make_env``.

    Returns:
        The frames.

    Raises:
        NoImageObservationsError: ``source="frames"`` and the observations are not images.
        EpisodeNotSeededError: A replay of an episode stored without its reset seed.
        ReplayDivergenceError: The replay differs from what is stored.
    """
    layout = image_layout(index.observation_space, index.frame_stack)
    if source == "frames" or (source == "auto" and layout is not None):
        if layout is None:
            raise NoImageObservationsError(
                f"dataset {index.dataset_id!r}: its observations ({index.observation_space}) are not images "
                "(a uint8 Box of HxW, HxWx1 or HxWx3, or a stack of them); render by replay instead "
                "(source='replay')"
            )
        stored = index.episode_column(episode_id, column_path("observations", layout.leaf.name), obs_rows=True)
        return _as_rgb(stored[:, -1] if layout.stacked else stored)
    return _replayed_frames(index, episode_id, make_env, env)


def _replayed_frames(index: DatasetIndex, episode_id: int, make_env: Callable[[], Any], env: Any) -> np.ndarray:
    shard, row = index.locate(episode_id)
    if not shard.seed_valid[row]:
        raise EpisodeNotSeededError(
            f"episode {episode_id} of dataset {index.dataset_id!r} was stored without its reset seed, so it "
            "cannot be replayed (collect with seed_every_reset=True, the default, to replay any episode)"
        )
    episode = index.episode(episode_id)
    own = env is None
    if own:
        env = make_env()
    try:
        frames: np.ndarray | None = None
        for t in replay_steps(env, episode, index.observation_space, index.action_space):
            if frames is None:
                try:
                    frame = env.render()
                except (gym.error.Error, ImportError) as exc:  # a renderer's package missing (pygame, OpenGL)
                    raise EnvUnavailableError(
                        f"dataset {index.dataset_id!r}: its env cannot render here ({type(exc).__name__}: {exc})"
                    ) from exc
                frame = _check_render(frame, env)
                frames = np.empty((len(episode) + 1, *frame.shape), dtype=np.uint8)
            else:
                frame = env.render()
            frames[t] = frame
        assert frames is not None
        return _as_rgb(frames)
    finally:
        if own:
            env.close()


def _check_render(frame: Any, env: Any) -> np.ndarray:
    """The first rendered frame, refused unless it is an (H, W, 3) uint8 image (an env made without
    ``render_mode="rgb_array"`` renders None)."""
    array = None if frame is None else np.asarray(frame)
    if array is None or array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        what = "nothing" if array is None else f"an array of shape {array.shape} and dtype {array.dtype}"
        raise ValueError(f"{env} rendered {what}, not an (H, W, 3) uint8 image: make it with render_mode='rgb_array'")
    return array
