"""The page's video of an episode is ``Dataset.render_episode``'s frames encoded by ``vcollect.render``'s writer:
each frame is the stored observation (a stack's newest frame), grey frames made RGB, small frames scaled up by a
whole factor, one video frame per observation; an episode without frames is a 404 whose text is the renderer's
reason, and a missing encoder a 501 naming the extra."""

from __future__ import annotations

import sys
from http import HTTPStatus
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from gymnasium import spaces

from vcollect.errors import EnvSpecNotStoredError, NoImageObservationsError
from vcollect.render.video import encode_video, upscale_frames
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.episode_frames import image_layout
from vcollect.view.routes import MIN_VIDEO_SIDE, ViewApp

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
    got = load_dataset("fs/stack-v0", root=tmp_path).render_episode(0)
    assert got.shape == (STEPS + 1, 16, 16, 3)
    assert all(np.array_equal(got[..., c], frames) for c in range(3))
    video = ViewApp(tmp_path).respond("/d/fs/stack-v0/episode/0.webm?fps=10")
    assert video.status == HTTPStatus.OK and video.content_type == "video/webm"
    assert iio.imread(video.body, extension=".webm").shape == (STEPS + 1, 160, 160, 3)  # 16 px scaled by 10


def test_grey_frames_are_made_rgb_and_encoded_one_per_observation(tmp_path: Path) -> None:
    observations = np.random.default_rng(1).integers(0, 256, (STEPS + 1, 21, 33, 1), dtype=np.uint8)
    write(tmp_path, "grey/frames-v0", spaces.Box(0, 255, (21, 33, 1), np.uint8), observations)
    got = load_dataset("grey/frames-v0", root=tmp_path).render_episode(0)
    assert np.array_equal(got, np.repeat(observations, 3, axis=3))
    prepared = upscale_frames(got, MIN_VIDEO_SIDE)  # scaled by a whole factor to >= 160 px
    assert prepared.shape == (STEPS + 1, 21 * 8, 33 * 8, 3)
    assert np.array_equal(prepared[:, ::8, ::8], got) and np.array_equal(prepared[:, 7::8, 7::8], got)
    assert upscale_frames(prepared, MIN_VIDEO_SIDE) is prepared  # big enough: unchanged
    decoded = iio.imread(encode_video(got, ".mp4", fps=12, min_side=MIN_VIDEO_SIDE), extension=".mp4")
    assert decoded.shape == (STEPS + 1, 21 * 8, 33 * 8, 3)  # even sides already: no padding
    served = ViewApp(tmp_path).respond("/d/grey/frames-v0/episode/0.mp4?fps=12")
    assert served.status == HTTPStatus.OK and served.content_type == "video/mp4"
    assert iio.imread(served.body, extension=".mp4").shape == (STEPS + 1, 21 * 8, 33 * 8, 3)


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
    assert (image_layout(space, None) is not None) is image


def test_observations_that_are_not_images_say_why(tmp_path: Path) -> None:
    write(tmp_path, "vec/state-v0", spaces.Box(-1.0, 1.0, (3,), np.float32), np.zeros((STEPS + 1, 3), np.float32))
    dataset = load_dataset("vec/state-v0", root=tmp_path)
    with pytest.raises(NoImageObservationsError, match="not images"):
        dataset.render_episode(0, source="frames")
    # not images, so the renderer replays; with no env spec stored there is nothing to replay in
    with pytest.raises(EnvSpecNotStoredError) as refused:
        dataset.render_episode(0)
    assert "no env_spec stored" in str(refused.value)
    got = ViewApp(tmp_path).respond("/d/vec/state-v0/episode/0.webm")
    assert got.status == HTTPStatus.NOT_FOUND
    assert got.body.decode() == f"no video of episode 0: {refused.value}\n"


def test_without_the_encoder_the_video_names_the_render_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    observations = np.zeros((STEPS + 1, 16, 16, 3), np.uint8)
    write(tmp_path, "rgb/frames-v0", spaces.Box(0, 255, (16, 16, 3), np.uint8), observations)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    got = ViewApp(tmp_path).respond("/d/rgb/frames-v0/episode/0.webm")
    assert got.status == HTTPStatus.NOT_IMPLEMENTED and b"vcollect[render]" in got.body
