"""What the documentation (rollout and evaluation) and the Collector's docstring say the same seed reproduces, backend by backend."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import vcollect


def collect(
    backend: str, n_episode: int = 24, num_envs: int = 4, **backend_kwargs: Any
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(returns, lengths, observations of every step) of ``n_episode`` episodes on ``num_envs`` CartPoles, seed
    0, acting on the observations."""
    envs = vcollect.make_vector("CartPole-v1", num_envs, backend=backend, **backend_kwargs)
    observations: list[np.ndarray] = []

    def policy(obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
        observations.append(np.array(obs))
        return (obs[:, 2] > 0).astype(np.int64), None  # actions from the observations: they depend on the data

    with vcollect.Collector(policy, envs, seed=0) as collector:
        stats = collector.collect(n_episode=n_episode, reset_before_collect=True)
    return stats.returns, stats.lens, observations


def assert_same(a: tuple[np.ndarray, np.ndarray, list[np.ndarray]], b: tuple[np.ndarray, np.ndarray, list[np.ndarray]]) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert len(a[2]) == len(b[2])
    for x, y in zip(a[2], b[2]):
        np.testing.assert_array_equal(x, y)


def test_dummy_and_subprocess_give_bit_identical_data() -> None:
    assert_same(collect("dummy"), collect("subproc"))


def test_ray_gives_the_dummy_backends_data(ray_local: Any) -> None:
    # 2 envs (2 actors) and 10 episodes: each Ray env is an actor process of its own and each vector step a
    # round trip to them
    dummy = collect("dummy", n_episode=10, num_envs=2)
    assert dummy[1].size == 10 and len(dummy[2]) > 100
    assert_same(dummy, collect("ray", n_episode=10, num_envs=2))


def test_gymnasium_backend_repeats_its_own_data() -> None:
    assert_same(collect("gymnasium"), collect("gymnasium"))


@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="needs the envpool extra")
def test_envpool_repeats_its_own_data_for_the_same_pool_seed() -> None:
    assert_same(collect("envpool", seed=3), collect("envpool", seed=3))
