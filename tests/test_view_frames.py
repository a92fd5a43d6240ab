"""The page's frames of an episode from stored image observations (without a renderer on the dataset): each
frame is the stored observation (a stack's newest frame), grey frames made RGB, and the video of them
decodes to one frame per observation."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from gymnasium import spaces

from vcollect.store import EpisodeStore, load_dataset
from vcollect.view.frames import episode_frames, image_observations
from vcollect.view.video import encode_video, video_frames

STEPS = 6


def write(root: Path, dataset_id: str, space: spaces.Box, observations: np.ndarray, **options: object) -> None:
    with EpisodeStore.create(dataset_id, space, spaces.Discrete(2), root=root, **options) as store:  # type: ignore[arg-type]
        store.write_episode(observations, np.zeros(STEPS, np.int64), np.ones(STEPS), np.arange(STEPS) == STEPS - 1,
                            np.zeros(STEPS, bool), seed=1, env_id=0)


def test_frame_stack_dataset_shows_each_newest_frame(tmp_path: Path) -> None:
    frames = np.random.default_rng(0).integers(0, 256, (STEPS + 1, 16, 16), dtype=np.uint8)
    padded = np.concatenate([np.repeat(frames[:1], 3, axis=0), frames])
    stacks = np.stack([padded[i : i + 4] for i in range(STEPS + 1)])
    write(tmp_path, "fs/stack-v0", spaces.Box(0, 255, (4, 16, 16), np.uint8), stacks, frame_stack=4)
    got = episode_frames(load_dataset("fs/stack-v0", root=tmp_path), 0)
    assert got.frames is not None and got.frames.shape == (STEPS + 1, 16, 16, 3)
    assert all(np.array_equal(got.frames[..., c], frames) for c in range(3))


def test_grey_frames_are_made_rgb_and_encoded_one_per_observation(tmp_path: Path) -> None:
    observations = np.random.default_rng(1).integers(0, 256, (STEPS + 1, 21, 33, 1), dtype=np.uint8)
    write(tmp_path, "grey/frames-v0", spaces.Box(0, 255, (21, 33, 1), np.uint8), observations)
    got = episode_frames(load_dataset("grey/frames-v0", root=tmp_path), 0)
    assert got.frames is not None and np.array_equal(got.frames, np.repeat(observations, 3, axis=3))
    prepared = video_frames(got.frames)  # scaled by a whole factor to >= 160 px, padded to even sides
    assert prepared.shape == (STEPS + 1, 21 * 8, 33 * 8, 3)
    assert np.array_equal(prepared[:, ::8, ::8], got.frames)
    decoded = iio.imread(encode_video(got.frames, container="mp4", fps=12), extension=".mp4")
    assert decoded.shape == (STEPS + 1, 21 * 8, 33 * 8, 3)


@pytest.mark.parametrize(("space", "image"), [
    (spaces.Box(0, 255, (84, 84), np.uint8), True),
    (spaces.Box(0, 255, (84, 84, 3), np.uint8), True),
    (spaces.Box(0, 255, (4, 84, 84), np.uint8), True),
    (spaces.Box(0, 255, (4, 84, 84, 3), np.uint8), True),
    (spaces.Box(0, 255, (64, 64, 4), np.uint8), False),
    (spaces.Box(0.0, 1.0, (84, 84, 3), np.float32), False),
    (spaces.Box(0, 255, (4,), np.uint8), False),
    (spaces.Discrete(3), False),
])
def test_which_observations_are_images(space: spaces.Space, image: bool) -> None:  # type: ignore[type-arg]
    assert image_observations(space) is image


def test_observations_that_are_not_images_say_why(tmp_path: Path) -> None:
    write(tmp_path, "vec/state-v0", spaces.Box(-1.0, 1.0, (3,), np.float32), np.zeros((STEPS + 1, 3), np.float32))
    got = episode_frames(load_dataset("vec/state-v0", root=tmp_path), 0)
    assert got.frames is None and got.reason is not None and "not images" in got.reason
