"""Real workloads beyond CartPole: MuJoCo HalfCheetah-v5 and Atari Pong with 84x84 frame stacks.

Each test collects with a TorchPolicy into a real EpisodeStore and checks what a user of such a dataset
relies on: what was stored is what was reported, actions lie in the space, stored episodes replay
bit-exact from their seeds and actions (HalfCheetah), and the stored 4-frame stacks are the env's own
(each stack is the previous one shifted by a frame, within an episode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from vcollect import Collector, EpisodeStore, load_dataset
from vcollect.envs import SubprocVectorEnv, make_vector
from vcollect.policies import TorchPolicy

pytestmark = pytest.mark.slow

CHEETAH_STEPS = 60  # episodes end by truncation at this length, so a short run stores whole episodes


class GaussianMLP(torch.nn.Module):
    """obs -> (mean, log_std) of a diagonal Gaussian, what TorchPolicy samples from for Box actions."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, act_dim))
        self.log_std = torch.nn.Parameter(torch.full((act_dim,), -0.5))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.body(obs)
        return mean, self.log_std.expand_as(mean)


class SmallCNN(torch.nn.Module):
    """(k, 4, 84, 84) uint8 frames -> action logits; the Nature-DQN layout, narrower."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(4, 8, 8, stride=4), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 4, stride=2), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(16 * 9 * 9, n_actions),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net(frames / 255.0)


def make_pong() -> gym.Env:
    """ALE Pong as Atari agents see it: 84x84 grayscale, frame skip 4, the last 4 frames stacked."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, max_episode_steps=400)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_halfcheetah_gaussian_policy_into_a_store(backend: str, tmp_path: Path) -> None:
    envs = make_vector("HalfCheetah-v5", 4, backend, env_kwargs={"max_episode_steps": CHEETAH_STEPS})
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    torch.manual_seed(0)
    policy = TorchPolicy(GaussianMLP(obs_space.shape[0], act_space.shape[0]), act_space, deterministic=False)
    store = EpisodeStore.create("mujoco/halfcheetah-v0", obs_space, act_space, root=tmp_path)
    with Collector(policy, envs, store=store, seed=5) as collector:
        collector.reset()
        stats = collector.collect(n_episode=8)
    store.close()
    assert stats.n_collected_episodes == 8
    data = load_dataset("mujoco/halfcheetah-v0", root=tmp_path)
    episodes = list(data.iterate_episodes())
    assert len(episodes) == 8 and data.total_steps == 8 * CHEETAH_STEPS
    env = gym.make("HalfCheetah-v5", max_episode_steps=CHEETAH_STEPS)
    for episode in episodes:
        assert episode.observations.shape == (CHEETAH_STEPS + 1, 17) and episode.actions.shape == (CHEETAH_STEPS, 6)
        assert np.all(episode.actions >= act_space.low) and np.all(episode.actions <= act_space.high)
        assert episode.truncations[-1] and not episode.terminations.any()
        assert np.unique(episode.actions[:, 0]).size > CHEETAH_STEPS // 2, "the Gaussian policy was not sampled"
    for episode in episodes[:2]:  # MuJoCo physics is deterministic: seed + actions give the same floats
        replay_box_actions(env, episode)
    np.testing.assert_allclose(sorted(e.rewards.sum() for e in episodes), sorted(stats.returns), rtol=1e-6)


def replay_box_actions(env: gym.Env, episode: Any) -> None:
    """Reset with the episode's seed, step its stored float32 action rows (the env's reward is computed
    from the action array's own dtype, so the rows are passed as stored): every float matches exactly."""
    obs, _ = env.reset(seed=episode.seed)
    np.testing.assert_array_equal(obs, episode.observations[0])
    for t, action in enumerate(episode.actions):
        obs, reward, terminated, truncated, _ = env.step(action)
        np.testing.assert_array_equal(obs, episode.observations[t + 1])
        assert (reward, terminated, truncated) == (episode.rewards[t], episode.terminations[t], episode.truncations[t])


def check_frame_stacks(observations: np.ndarray) -> None:
    """Within an episode each 4-frame stack is the previous one shifted by one new frame."""
    assert observations.dtype == np.uint8 and observations.shape[1:] == (4, 84, 84)
    np.testing.assert_array_equal(observations[1:, :3], observations[:-1, 1:])


def collect_pong(envs: Any, root: Path, dataset_id: str, n_step: int) -> tuple[Any, EpisodeStore]:
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    torch.manual_seed(0)
    policy = TorchPolicy(SmallCNN(int(act_space.n)), act_space, deterministic=False)
    store = EpisodeStore.create(dataset_id, obs_space, act_space, root=root)  # frames: zstd by default
    with Collector(policy, envs, store=store, seed=3, unfinished="truncate") as collector:
        collector.reset()
        stats = collector.collect(n_step=n_step)
    store.close()
    return stats, store


def test_pong_frame_stacks_subproc_compressed_by_default(tmp_path: Path) -> None:
    envs = SubprocVectorEnv([make_pong] * 2)
    stats, _ = collect_pong(envs, tmp_path, "atari/pong-v0", n_step=300)
    assert stats.n_collected_steps == 300
    data = load_dataset("atari/pong-v0", root=tmp_path)
    assert data.total_steps == 300, "the unfinished episodes were truncated into the store, every step kept"
    frames = 0
    for episode in data.iterate_episodes():
        check_frame_stacks(np.asarray(episode.observations))
        assert np.all((episode.actions >= 0) & (episode.actions < 6))
        frames += episode.observations.size
    on_disk = sum(p.stat().st_size for p in (tmp_path / "atari" / "pong-v0").rglob("*.h5"))
    assert on_disk * 10 < frames, f"the default compression left {on_disk} bytes for {frames} bytes of frames"


def test_pong_envpool_into_a_store(tmp_path: Path) -> None:
    pytest.importorskip("envpool", reason="EnvPool is installed by the dev extra on Linux x86-64")
    envs = make_vector("Pong-v5", 2, "envpool", env_kwargs={"max_episode_steps": 400})
    stats, _ = collect_pong(envs, tmp_path, "atari/pong-envpool-v0", n_step=200)
    assert stats.n_collected_steps == 200
    data = load_dataset("atari/pong-envpool-v0", root=tmp_path)
    assert data.total_steps >= 200 - 2, "at most the last, unreported step per env is held back"
    for episode in data.iterate_episodes():
        check_frame_stacks(np.asarray(episode.observations))
