"""Rendering stored episodes: frames from stored images equal the stored frames, frames from a replay equal
those of the env stepped by hand, a replay that diverges is refused, videos decode to their frame counts,
and ``vcollect render`` exits 2 on bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vcollect
from tests.render_envs import WALK_ID
from vcollect.cli import main
from vcollect.errors import (
    EncoderUnavailableError,
    EnvSpecNotStoredError,
    EnvUnavailableError,
    EpisodeIndexError,
    EpisodeNotSeededError,
    NoImageObservationsError,
    ReplayDivergenceError,
)
from vcollect.store import EpisodeStore, load_dataset

imageio = pytest.importorskip("imageio.v3")
pytest.importorskip("imageio_ffmpeg")


def collect(root: Path, dataset_id: str, make_env: Any, *, num_envs: int = 2, n_step: int | None = None,
            n_episode: int | None = None, frame_stack: int | None = None, seed: int = 0) -> vcollect.Dataset:
    """A dataset of random-policy episodes from ``make_env`` (an id or a factory); episodes still running at
    the end are stored truncated."""
    envs = vcollect.make_vector(make_env, num_envs, backend="dummy")
    store = EpisodeStore.create(dataset_id, envs.single_observation_space, envs.single_action_space, root=root,
                                frame_stack=frame_stack)
    with vcollect.Collector(None, envs, store=store, seed=seed, unfinished="truncate") as collector:
        collector.collect(n_step=n_step, n_episode=n_episode, random=True, reset_before_collect=True)
    store.close()
    return load_dataset(dataset_id, root=root)


def copy_dataset(source: vcollect.Dataset, root: Path, dataset_id: str, *, env_spec: Any = "same",
                 seeds: Any = "same", change: Any = None, metadata: dict[str, Any] | None = None) -> vcollect.Dataset:
    """``source``'s episodes written to a new dataset, optionally with another env spec, seeds or one
    episode's arrays changed by ``change(episode_index, observations, actions)``."""
    store = EpisodeStore.create(dataset_id, source.observation_space, source.action_space, root=root,
                                env_spec=source.env_spec if env_spec == "same" else env_spec, metadata=metadata)
    for i, ep in enumerate(source):
        obs, acts = np.array(ep.observations), np.array(ep.actions)
        if change is not None:
            change(i, obs, acts)
        store.write_episode(obs, acts, ep.rewards, ep.terminations, ep.truncations,
                            seed=ep.seed if seeds == "same" else None, env_id=ep.env_id)
    store.close()
    return load_dataset(dataset_id, root=root)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("render")


@pytest.fixture(scope="module")
def walk(root: Path) -> vcollect.Dataset:
    """Six whole 12-step episodes of the test env that renders (seeded, env spec stored)."""
    return collect(root, "test/walk-v0", WALK_ID, n_episode=6)


@pytest.fixture(scope="module")
def pong(root: Path) -> vcollect.Dataset:
    """A small real ALE Pong dataset: 2 envs, 160 steps, (210, 160, 3) frames as observations."""
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    return collect(root, "test/pong-v0", "ALE/Pong-v5", n_step=160)


@pytest.fixture(scope="module")
def pong_stacked(root: Path) -> vcollect.Dataset:
    """Pong preprocessed as DQN trains on it (84x84 gray, 4-frame stacks), stored with ``frame_stack=4``."""
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)

    def make() -> gym.Env[Any, Any]:
        env = gym.make("ALE/Pong-v5", frameskip=1)
        return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)

    return collect(root, "test/pong-stacked-v0", make, n_step=160, frame_stack=4)


# ---------------------------------------------------------------------------------------------- frames


def test_frames_from_stored_atari_observations_are_the_stored_frames(pong: vcollect.Dataset) -> None:
    assert pong.total_episodes == 2
    for i in range(pong.total_episodes):
        frames = pong.render_episode(i)
        stored = pong[i].observations
        assert frames.shape == (len(pong[i]) + 1, 210, 160, 3) and frames.dtype == np.uint8
        assert np.array_equal(frames, stored)
        assert np.array_equal(pong.render_episode(i, source="frames"), frames)


def test_frames_from_stored_frame_stacks_are_the_newest_frame_of_each_stack(pong_stacked: vcollect.Dataset) -> None:
    episode = pong_stacked[1]
    assert episode.observations.shape[1:] == (4, 84, 84)
    frames = pong_stacked.render_episode(1)
    assert frames.shape == (len(episode) + 1, 84, 84, 3)
    newest = episode.observations[:, -1]
    assert all(np.array_equal(frames[..., c], newest) for c in range(3))
    assert not np.array_equal(frames[0], frames[-1])


def test_size_scales_and_annotate_adds_a_label_strip_below(pong: vcollect.Dataset) -> None:
    plain = pong.render_episode(0)
    half = pong.render_episode(0, size=(80, 105))
    assert half.shape == (plain.shape[0], 105, 80, 3)
    # whole 2x2 blocks averaged
    want = (plain[3, :2, :2].astype(np.float32).mean(axis=(0, 1)) + 0.5).astype(np.uint8)
    assert np.array_equal(half[3, 0, 0], want)
    labelled = pong.render_episode(0, annotate=True)
    assert labelled.shape[0] == plain.shape[0] and labelled.shape[2:] == plain.shape[2:]
    assert labelled.shape[1] > plain.shape[1]
    assert np.array_equal(labelled[:, : plain.shape[1]], plain)  # the frame is whole, the label below it
    strip = labelled[:, plain.shape[1] :]
    assert (strip == 255).any(axis=(1, 2, 3)).all()  # text on every frame
    assert not np.array_equal(strip[1], strip[2])  # the step (and return) change from frame to frame


def test_non_image_observations_are_refused_as_frames_and_replayed_by_default(walk: vcollect.Dataset) -> None:
    with pytest.raises(NoImageObservationsError, match="not images.*source='replay'"):
        walk.render_episode(0, source="frames")
    assert walk.render_episode(0).shape == (13, 32, 32, 3)  # auto: replayed
    with pytest.raises(EpisodeIndexError, match="6 episodes"):
        walk.render_episode(6)
    with pytest.raises(ValueError, match="source must be"):
        walk.render_episode(0, source="pixels")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- replay


def by_hand(env: gym.Env[Any, Any], seed: int, actions: np.ndarray) -> np.ndarray:
    """The frames of stepping ``env`` by hand from reset(seed) through ``actions``."""
    env.reset(seed=seed)
    frames = [env.render()]
    for action in actions:
        env.step(action)
        frames.append(env.render())
    env.close()
    return np.stack(frames)


def test_replay_of_the_test_env_equals_stepping_it_by_hand(walk: vcollect.Dataset) -> None:
    for i in (0, 5):
        episode = walk[i]
        want = by_hand(gym.make(WALK_ID, render_mode="rgb_array"), episode.seed, episode.actions)
        assert np.array_equal(walk.render_episode(i, source="replay"), want)


def test_replay_of_a_cartpole_episode_equals_stepping_it_by_hand(root: Path) -> None:
    pytest.importorskip("pygame", reason="CartPole renders through pygame (gymnasium[classic-control])")
    dataset = collect(root, "test/cartpole-v0", "CartPole-v1", n_episode=2)
    episode = dataset[1]
    want = by_hand(gym.make("CartPole-v1", render_mode="rgb_array"), episode.seed, episode.actions)
    frames = dataset.render_episode(1)
    assert frames.shape == (len(episode) + 1, 400, 600, 3)
    assert np.array_equal(frames, want)


@pytest.mark.slow
def test_replay_of_a_halfcheetah_episode_equals_stepping_it_by_hand(root: Path) -> None:
    pytest.importorskip("mujoco")
    dataset = collect(root, "test/cheetah-v0", "HalfCheetah-v5", num_envs=1, n_step=8)
    episode = dataset[0]
    assert len(episode) == 8 and episode.seed is not None
    want = by_hand(gym.make("HalfCheetah-v5", render_mode="rgb_array", width=48, height=40), episode.seed,
                   episode.actions)
    env = dataset.render_env(width=48, height=40)
    try:
        frames = dataset.render_episode(0, env=env)
    finally:
        env.close()
    assert frames.shape == (9, 40, 48, 3)
    assert np.array_equal(frames, want) and not np.array_equal(frames[0], frames[-1])


def test_a_tampered_action_or_observation_is_reported_as_a_divergence(walk: vcollect.Dataset, root: Path) -> None:
    def flip_action(i: int, obs: np.ndarray, acts: np.ndarray) -> None:
        if i == 2:
            acts[3] = (acts[3] + 1) % 4

    def move_obs(i: int, obs: np.ndarray, acts: np.ndarray) -> None:
        if i == 4:
            obs[7] += 1

    tampered = copy_dataset(walk, root, "test/walk-action-v0", change=flip_action)
    assert np.array_equal(tampered.render_episode(1), walk.render_episode(1))  # the others replay
    with pytest.raises(ReplayDivergenceError, match="episode 2 diverged .* step 4: the observation after step 3") as info:
        tampered.render_episode(2)
    assert (info.value.episode, info.value.step) == (2, 4)
    moved = copy_dataset(walk, root, "test/walk-obs-v0", change=move_obs)
    with pytest.raises(ReplayDivergenceError) as info:
        moved.render_episode(4)
    assert (info.value.episode, info.value.step) == (4, 7)


def test_episodes_that_cannot_be_replayed_raise_what_is_missing(walk: vcollect.Dataset, root: Path) -> None:
    unseeded = copy_dataset(walk, root, "test/walk-unseeded-v0", seeds=None)
    with pytest.raises(EpisodeNotSeededError, match="episode 0 .* without its reset seed"):
        unseeded.render_episode(0)
    no_spec = copy_dataset(walk, root, "test/walk-nospec-v0", env_spec=None)
    with pytest.raises(EnvSpecNotStoredError, match="no env_spec"):
        no_spec.render_episode(0)
    spec = gym.envs.registration.EnvSpec("NoSuchThing-v0", entry_point="no_such_package.envs:Thing")
    missing = copy_dataset(walk, root, "test/walk-missing-v0", env_spec=spec,
                           metadata={"requirements": ["no-such-package>=1.0"]})
    with pytest.warns(UserWarning, match="no-such-package is not installed"), \
            pytest.raises(EnvUnavailableError, match="'NoSuchThing-v0' cannot be made.*no-such-package>=1.0"):
        missing.render_episode(0)


# ---------------------------------------------------------------------------------------------- video


@pytest.mark.parametrize("suffix", [".mp4", ".webm", ".gif"])
def test_videos_decode_to_the_frames_written(walk: vcollect.Dataset, tmp_path: Path, suffix: str) -> None:
    from vcollect.render.episodes import render_video

    out = tmp_path / f"walk{suffix}"
    video = render_video(walk, [0, 3, 5], out, fps=10)
    assert video.frames == 3 * 13 and video.episodes == (0, 3, 5)
    decoded = imageio.imread(out)
    assert decoded.shape[0] == 39 and decoded.shape[1:3] == (video.height, video.width)
    grid = render_video(walk, [0, 3, 5, 1, 2], tmp_path / f"grid{suffix}", fps=10, layout="grid")
    decoded = imageio.imread(tmp_path / f"grid{suffix}")
    assert grid.frames == decoded.shape[0] == 13  # side by side: the longest episode's frames
    assert decoded.shape[2] > 2 * video.width  # three tiles across


def test_a_gif_is_scaled_down_for_a_readme(pong: vcollect.Dataset, tmp_path: Path) -> None:
    from vcollect.render.episodes import GIF_WIDTH, render_video

    video = render_video(pong, [0], tmp_path / "pong.gif", fps=10, annotate=False)
    assert video.width <= GIF_WIDTH and video.frames == len(pong[0]) + 1
    assert (tmp_path / "pong.gif").stat().st_size < 1_000_000


def test_without_the_encoder_writing_names_the_render_extra(walk: vcollect.Dataset, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from vcollect.render.episodes import render_video

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    with pytest.raises(EncoderUnavailableError, match=r"vcollect\[render\]"):
        render_video(walk, [0], tmp_path / "x.mp4")
    assert not (tmp_path / "x.mp4").exists()


# ---------------------------------------------------------------------------------------------- the command


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def assert_exit_2(result: tuple[int, str, str], *fragments: str) -> None:
    status, _, err = result
    assert status == 2, result
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vcollect render: error:"), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_render_command_writes_the_chosen_episodes(walk: vcollect.Dataset, root: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "best.mp4"
    status, text, _ = run(capsys, "render", "test/walk-v0", "--root", str(root), "--best", "2", "--out", str(out),
                          "--size", "64x64", "--fps", "12")
    assert status == 0, text
    best = np.argsort(walk.episode_returns, kind="stable")[::-1][:2].tolist()
    assert f"2 episodes ({best[0]}, {best[1]}), 26 frames of 64x" in text
    assert imageio.imread(out).shape[0] == 26


def test_render_command_bad_input_exits_2(walk: vcollect.Dataset, root: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    base = ("--root", str(root))
    out = ("--out", str(tmp_path / "x.mp4"))
    assert_exit_2(run(capsys, "render", "test/nothing-v0", *base, *out), "no dataset 'test/nothing-v0'")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, *out, "--episodes", "1,6"), "no episode 6")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, *out, "--episodes", "1,x"), "--episodes")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, *out, "--size", "64"), "--size")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, "--out", str(tmp_path / "no" / "x.mp4")),
                  "there is no folder")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, "--out", str(tmp_path / "x.avi")), ".mp4")
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, *out, "--source", "frames"),
                  "not images", "--source replay")
    assert_exit_2(run(capsys, "render", "test/walk-unseeded-v0", *base, *out), "without its reset seed")
    assert_exit_2(run(capsys, "render", "test/walk-nospec-v0", *base, *out), "no env_spec")
    with pytest.warns(UserWarning):
        assert_exit_2(run(capsys, "render", "test/walk-missing-v0", *base, *out), "cannot be made",
                      "no-such-package>=1.0")
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    assert_exit_2(run(capsys, "render", "test/walk-v0", *base, *out), "vcollect[render]")
    assert not (tmp_path / "x.mp4").exists()


def test_render_command_reports_a_divergence_as_a_failure(root: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "render", "test/walk-action-v0", "--root", str(root), "--episodes", "1,2",
                         "--out", str(tmp_path / "t.mp4"))
    assert status == 1 and "episode 2 diverged from its replay at step 4" in err
    assert not (tmp_path / "t.mp4").exists()
