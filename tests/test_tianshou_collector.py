"""Tianshou 2.0.1's collector test (test/base/test_collector.py, ``test_collector``: its single-env and its
SubprocVectorEnv and DummyVectorEnv parts) on vcollect.tianshou's Collector and buffers, with upstream's literal
expected values: observations, next observations, rewards and the infos stored per transition (``buffer.info``:
the env's ``key`` and ``env`` entries, and ``env_id``). The SubprocVectorEnv is Tianshou's own; the Collector steps its
env factories in vcollect's worker processes.

Its DummyVectorEnv part, whose first ``collect(n_episode=7)`` upstream accepts in two outcomes (they depend on
the order the envs finish in), runs on a Tianshou DummyVectorEnv: the Collector shares episodes among the envs
as Tianshou's does (``episode_order="finished_first"``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tianshou")

from tianshou.env import DummyVectorEnv, SubprocVectorEnv  # noqa: E402

from tests.tianshou_envs import MoveToRightEnv, move_right  # noqa: E402
from vcollect.tianshou import Collector, ReplayBuffer, VectorReplayBuffer  # noqa: E402


class MaxActionPolicy:
    """Always action 1 (upstream's MaxActionPolicy on a Discrete(2) space)."""

    def __call__(self, obs: Any, state: Any = None) -> tuple[np.ndarray, Any]:
        return np.ones(len(obs), dtype=np.int64), state


def test_collector_single_env_stores_infos() -> None:
    c_single_env = Collector(MaxActionPolicy(), MoveToRightEnv(2), ReplayBuffer(size=100))
    c_single_env.reset()
    c_single_env.collect(n_step=3)
    assert len(c_single_env.buffer) == 3
    assert np.allclose(c_single_env.buffer.obs[:4, 0], [0, 1, 0, 0])
    obs_next = c_single_env.buffer[:].obs_next[..., 0]
    assert isinstance(obs_next, np.ndarray)
    assert np.allclose(obs_next, [1, 2, 1])
    keys = np.zeros(100)
    keys[:3] = 1
    assert np.allclose(c_single_env.buffer.info["key"], keys)
    for e in c_single_env.buffer.info["env"][:3]:
        assert isinstance(e, MoveToRightEnv)
    assert np.allclose(c_single_env.buffer.info["env_id"], 0)
    rews = np.zeros(100)
    rews[:3] = [0, 1, 0]
    assert np.allclose(c_single_env.buffer.rew, rews)
    c_single_env.collect(n_episode=3)
    assert len(c_single_env.buffer) == 8
    assert np.allclose(c_single_env.buffer.obs[:10, 0], [0, 1, 0, 1, 0, 1, 0, 1, 0, 0])
    obs_next = c_single_env.buffer[:].obs_next[..., 0]
    assert isinstance(obs_next, np.ndarray)
    assert np.allclose(obs_next, [1, 2, 1, 2, 1, 2, 1, 2])
    assert np.allclose(c_single_env.buffer.info["key"][:8], 1)
    for e in c_single_env.buffer.info["env"][:8]:
        assert isinstance(e, MoveToRightEnv)
    assert np.allclose(c_single_env.buffer.info["env_id"][:8], 0)
    assert np.allclose(c_single_env.buffer.rew[:8], [0, 1, 0, 1, 0, 1, 0, 1])
    # a sampled batch carries its transitions' infos
    batch, indices = c_single_env.buffer.sample(5)
    assert np.array_equal(batch.info.key, np.ones(5))
    assert np.array_equal(batch.info.env_id, np.zeros(5))
    c_single_env.collect(n_step=3, random=True)
    assert len(c_single_env.buffer) == 11


def test_collector_on_tianshous_subproc_vector_env() -> None:
    venv = SubprocVectorEnv([functools.partial(move_right, size) for size in [2, 3, 4, 5]])
    c = Collector(MaxActionPolicy(), venv, VectorReplayBuffer(total_size=100, buffer_num=4))
    try:
        c.reset()
        c.collect(n_step=8)
        obs = np.zeros(100)
        valid_indices = [0, 1, 25, 26, 50, 51, 75, 76]
        obs[valid_indices] = [0, 1, 0, 1, 0, 1, 0, 1]
        assert np.allclose(c.buffer.obs[:, 0], obs)
        obs_next = c.buffer[:].obs_next[..., 0]
        assert isinstance(obs_next, np.ndarray)
        assert np.allclose(obs_next, [1, 2, 1, 2, 1, 2, 1, 2])
        keys = np.zeros(100)
        keys[valid_indices] = [1, 1, 1, 1, 1, 1, 1, 1]
        assert np.allclose(c.buffer.info["key"], keys)
        for e in c.buffer.info["env"][valid_indices]:
            assert isinstance(e, MoveToRightEnv)
        env_ids = np.zeros(100)
        env_ids[valid_indices] = [0, 0, 1, 1, 2, 2, 3, 3]
        assert np.allclose(c.buffer.info["env_id"], env_ids)
        rews = np.zeros(100)
        rews[valid_indices] = [0, 1, 0, 0, 0, 0, 0, 0]
        assert np.allclose(c.buffer.rew, rews)

        c.collect(n_episode=4)
        assert len(c.buffer) == 16
        valid_indices = [2, 3, 27, 52, 53, 77, 78, 79]
        obs[valid_indices] = [0, 1, 2, 2, 3, 2, 3, 4]
        assert np.allclose(c.buffer.obs[:, 0], obs)
        obs_next = c.buffer[:].obs_next[..., 0]
        assert isinstance(obs_next, np.ndarray)
        assert np.allclose(obs_next, [1, 2, 1, 2, 1, 2, 3, 1, 2, 3, 4, 1, 2, 3, 4, 5])
        keys[valid_indices] = [1, 1, 1, 1, 1, 1, 1, 1]
        assert np.allclose(c.buffer.info["key"], keys)
        for e in c.buffer.info["env"][valid_indices]:
            assert isinstance(e, MoveToRightEnv)
        env_ids[valid_indices] = [0, 0, 1, 2, 2, 3, 3, 3]
        assert np.allclose(c.buffer.info["env_id"], env_ids)
        rews[valid_indices] = [0, 1, 1, 0, 1, 0, 0, 1]
        assert np.allclose(c.buffer.rew, rews)
        stats = c.collect(n_episode=4, random=True)
        assert stats.n_collected_episodes == 4
    finally:
        c.close()


def test_collector_on_tianshous_dummy_vector_env() -> None:
    """Upstream's DummyVectorEnv part: episodes shared among the envs as Tianshou's Collector shares them."""
    venv = DummyVectorEnv([functools.partial(move_right, size) for size in [2, 3, 4, 5]])
    c = Collector(MaxActionPolicy(), venv, VectorReplayBuffer(total_size=100, buffer_num=4))
    # the observations upstream's SubprocVectorEnv part left in its reference array, which this part builds on
    obs = np.zeros(100)
    obs[[0, 1, 2, 3, 25, 26, 27, 50, 51, 52, 53, 75, 76, 77, 78, 79]] = [0, 1, 0, 1, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4]
    keys = np.zeros(100)
    keys[[0, 1, 2, 3, 25, 26, 27, 50, 51, 52, 53, 75, 76, 77, 78, 79]] = 1
    env_ids = np.zeros(100)
    env_ids[[0, 1, 2, 3, 25, 26, 27, 50, 51, 52, 53, 75, 76, 77, 78, 79]] = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3,
                                                                             3, 3]
    rews = np.zeros(100)
    rews[[0, 1, 2, 3, 25, 26, 27, 50, 51, 52, 53, 75, 76, 77, 78, 79]] = [0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
                                                                          0, 1]
    c.reset()
    c.collect(n_episode=7)
    obs1 = obs.copy()
    obs1[[4, 5, 28, 29, 30]] = [0, 1, 0, 1, 2]
    obs2 = obs.copy()
    obs2[[28, 29, 30, 54, 55, 56, 57]] = [0, 1, 2, 0, 1, 2, 3]
    c2obs = c.buffer.obs[:, 0]
    assert np.all(c2obs == obs1) or np.all(c2obs == obs2)
    c.reset_env()
    c.reset_buffer()
    assert c.collect(n_episode=8).n_collected_episodes == 8
    valid_indices = [4, 5, 28, 29, 30, 54, 55, 56, 57]
    obs[valid_indices] = [0, 1, 0, 1, 2, 0, 1, 2, 3]
    assert np.all(c.buffer.obs[:, 0] == obs)
    keys[valid_indices] = [1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert np.allclose(c.buffer.info["key"], keys)
    for e in c.buffer.info["env"][valid_indices]:
        assert isinstance(e, MoveToRightEnv)
    env_ids[valid_indices] = [0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert np.allclose(c.buffer.info["env_id"], env_ids)
    rews[valid_indices] = [0, 1, 0, 0, 1, 0, 0, 0, 1]
    assert np.allclose(c.buffer.rew, rews)
    assert c.collect(n_episode=4, random=True).n_collected_episodes == 4
