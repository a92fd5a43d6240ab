"""A frame dataset of 1 GB (raw) — far over the 64 MiB sample cache — is sampled and iterated without being
loaded whole: no cache is built, memory stays bounded, and every row read is the row written; the same with
frame stacks stored once per frame (``frame_stack=4``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset
from vcollect.store.write.frame_stack import FrameStack, rebuild_episode

pytestmark = pytest.mark.slow

STACK = (4, 84, 84)
EPISODE_STEPS = 1_000
EPISODES = 36  # 36 x 1,001 frame stacks of 28,224 bytes: 1.02 GB raw


def frames(episode: int, steps: int) -> np.ndarray:
    """Frame stacks whose content says where they come from: a bright stripe moving down the court, and the
    episode and step numbers written into the first pixels."""
    t = np.arange(steps + 1)
    obs = np.zeros((steps + 1, *STACK), np.uint8)
    obs[t, :, t % 84, :] = 200
    obs[:, :, 0, 0] = episode
    obs[:, :, 0, 1] = (t % 256)[:, None]
    obs[:, :, 0, 2] = (t // 256)[:, None]
    return obs


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scale")
    space = spaces.Box(0, 255, STACK, np.uint8)
    with EpisodeStore.create("scale/frames-v0", space, spaces.Discrete(6), root=root, shard_steps=8_000) as store:
        for e in range(EPISODES):
            done = np.zeros(EPISODE_STEPS, bool)
            done[-1] = True
            store.write_episode(frames(e, EPISODE_STEPS), np.full(EPISODE_STEPS, e % 6), np.ones(EPISODE_STEPS), done,
                                np.zeros(EPISODE_STEPS, bool), seed=e, env_id=0)
    return root


def test_sampling_reads_the_right_rows_without_loading_the_dataset(big: Path) -> None:
    data = load_dataset("scale/frames-v0", root=big)
    raw = data.total_steps * int(np.prod(STACK))
    assert raw > 1e9 and data._index.cache_size() > 10 * 64 * 2**20
    on_disk = sum(p.stat().st_size for p in (big / "scale" / "frames-v0" / "shards").glob("*.h5"))
    assert on_disk * 10 < raw, "frames are not compressed 10x"
    before = rss_bytes()
    rng = np.random.default_rng(0)
    for _ in range(20):
        positions = rng.integers(0, data.total_steps, 256)
        batch = data.steps_at(positions)
        episode, step = positions // EPISODE_STEPS, positions % EPISODE_STEPS
        obs, nxt = batch["observations"], batch["next_observations"]
        np.testing.assert_array_equal(obs[:, 0, 0, 0], episode)
        np.testing.assert_array_equal(obs[:, 0, 0, 1].astype(int) + 256 * obs[:, 0, 0, 2].astype(int), step)
        np.testing.assert_array_equal(nxt[:, 0, 0, 1].astype(int) + 256 * nxt[:, 0, 0, 2].astype(int), step + 1)
        np.testing.assert_array_equal(batch["actions"], episode % 6)
    data.sample_steps(256)
    assert StoredDataset(data).sample_cache_nbytes == 0, "the sample cache copied a dataset 10x its limit"
    assert rss_bytes() - before < 200 * 2**20, "sampling grew the process by more than 200 MiB"


def test_iterating_decodes_each_episode_exactly_in_bounded_memory(big: Path) -> None:
    data = load_dataset("scale/frames-v0", root=big)
    before = rss_bytes()
    for e, episode in enumerate(data.iterate_episodes()):
        if e % 9 == 0:
            np.testing.assert_array_equal(episode.observations, frames(e, EPISODE_STEPS))
        else:
            assert episode.observations[-1, 0, 0, 0] == e and episode.observations.shape == (EPISODE_STEPS + 1, *STACK)
        del episode
    assert e == EPISODES - 1
    assert rss_bytes() - before < 300 * 2**20, "iterating kept episodes in memory"


def stacked(episode: int, steps: int) -> np.ndarray:
    """The frame stacks gymnasium's FrameStackObservation(4) would give for ``frames``' newest frames."""
    return rebuild_episode(np.ascontiguousarray(frames(episode, steps)[:, -1]), FrameStack(STACK[0]))


def test_frame_stacks_stored_once_sample_and_iterate_exactly(tmp_path: Path) -> None:
    space = spaces.Box(0, 255, STACK, np.uint8)
    with EpisodeStore.create("scale/stacked-v0", space, spaces.Discrete(6), root=tmp_path, shard_steps=8_000,
                             frame_stack=STACK[0]) as store:
        for e in range(EPISODES):
            done = np.zeros(EPISODE_STEPS, bool)
            done[-1] = True
            store.write_episode(stacked(e, EPISODE_STEPS), np.full(EPISODE_STEPS, e % 6), np.ones(EPISODE_STEPS),
                                done, np.zeros(EPISODE_STEPS, bool), seed=e, env_id=0)
    data = load_dataset("scale/stacked-v0", root=tmp_path)
    assert data.total_steps * int(np.prod(STACK)) > 1e9 and data._index.cache_size() > 64 * 2**20
    before = rss_bytes()
    rng = np.random.default_rng(1)

    def step_of(frame: np.ndarray) -> np.ndarray:
        return frame[:, 0, 1].astype(int) + 256 * frame[:, 0, 2].astype(int)

    for _ in range(10):
        positions = rng.integers(0, data.total_steps, 256)
        batch = data.steps_at(positions)
        episode, step = positions // EPISODE_STEPS, positions % EPISODE_STEPS
        obs, nxt = batch["observations"], batch["next_observations"]
        for j in range(STACK[0]):  # frame j of a stack is step - (3 - j), the reset frame repeated before it
            np.testing.assert_array_equal(step_of(obs[:, j]), np.maximum(step - (STACK[0] - 1 - j), 0))
            np.testing.assert_array_equal(step_of(nxt[:, j]), np.maximum(step + 1 - (STACK[0] - 1 - j), 0))
            np.testing.assert_array_equal(obs[:, j, 0, 0], episode)
    assert StoredDataset(data).sample_cache_nbytes == 0
    assert rss_bytes() - before < 200 * 2**20, "sampling grew the process by more than 200 MiB"
    for e, episode_data in enumerate(data.iterate_episodes()):
        if e % 12 == 5:
            np.testing.assert_array_equal(episode_data.observations, stacked(e, EPISODE_STEPS))
    assert e == EPISODES - 1
