"""Episodes handed over to a sink: the collector gives a TakesEpisodes sink fresh arrays it never touches
again, the store keeps them uncopied, and write_episodes still copies what its caller may reuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.buffers.ring import ring_columns
from vcollect.envs import make_vector
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.sink import TakesEpisodes

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(4)


def _batch(rng: np.random.Generator, lengths: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    steps = sum(lengths)
    obs = rng.uniform(-1, 1, size=(steps + len(lengths), 3)).astype(np.float32)
    acts = rng.integers(0, 4, size=steps)
    rewards = rng.normal(size=steps)
    terms = np.zeros(steps, bool)
    terms[np.cumsum(lengths) - 1] = True
    return obs, acts, rewards, terms, np.zeros(steps, bool)


def test_write_episodes_copies_and_take_episodes_keeps_the_arrays(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = [3, 2]
    obs, acts, rewards, terms, truncs = _batch(rng, lengths)
    kept = [a.copy() for a in (obs, acts, rewards, terms, truncs)]
    with EpisodeStore.create("ns/copied-v0", BOX, DISCRETE, root=tmp_path) as store:
        assert isinstance(store, TakesEpisodes)
        store.write_episodes(obs, acts, rewards, terms, truncs, lengths, seeds=[1, 2], env_ids=[0, 1])
        for a in (obs, acts, rewards):  # the caller reuses its arrays before the commit
            a[...] = 0
    with EpisodeStore.create("ns/taken-v0", BOX, DISCRETE, root=tmp_path) as store:
        taken = [a.copy() for a in kept]
        store.take_episodes(*taken, lengths, seeds=[1, 2], env_ids=[0, 1])
        pending = store.pending_episodes
    assert pending == 2
    for name in ("ns/copied-v0", "ns/taken-v0"):
        episodes = list(load_dataset(name, root=tmp_path))
        np.testing.assert_array_equal(np.concatenate([e.observations for e in episodes]), kept[0])
        np.testing.assert_array_equal(np.concatenate([e.actions for e in episodes]), kept[1])
        np.testing.assert_array_equal(np.concatenate([e.rewards for e in episodes]), kept[2])
        assert [e.seed for e in episodes] == [1, 2]


class RecordingStore(EpisodeStore):
    """An EpisodeStore that remembers the arrays the collector hands it (and by which call)."""

    handed: list[tuple[str, list[np.ndarray]]]

    def take_episodes(self, observations: Any, actions: Any, rewards: Any, terminations: Any, truncations: Any,
                      lengths: Any, **kwargs: Any) -> None:
        self.handed.append(("take", [observations, actions, rewards, terminations, truncations]))
        super().take_episodes(observations, actions, rewards, terminations, truncations, lengths, **kwargs)

    def write_episodes(self, observations: Any, actions: Any, rewards: Any, terminations: Any, truncations: Any,
                       lengths: Any, **kwargs: Any) -> None:
        self.handed.append(("write", [observations, actions, rewards, terminations, truncations]))
        super().write_episodes(observations, actions, rewards, terminations, truncations, lengths, **kwargs)


def test_the_collector_hands_over_fresh_arrays_that_stay_as_stored(tmp_path: Path) -> None:
    envs = make_vector("CartPole-v1", 4)
    store = RecordingStore.create("ns/handed-v0", envs.single_observation_space, envs.single_action_space,
                                  root=tmp_path)
    store.handed = []
    # a small ring: it wraps many times while the handed-over arrays wait in the store's pending shard
    ring = vcollect.VectorRingBuffer(4, 64, envs.single_observation_space, envs.single_action_space)
    with vcollect.Collector(None, envs, buffer=ring, store=store, seed=0) as collector:
        collector.collect(n_step=3_000, reset_before_collect=True, random=True)
        assert store.handed and {how for how, _ in store.handed} == {"take"}
        columns = ring_columns(ring)
        held = [getattr(columns, name) for name in columns.__slots__]
        storage = [a for v in held for a in (v if isinstance(v, list) else [v]) if isinstance(a, np.ndarray)]
        assert any(a.shape == (4 * 64, 4) for a in storage)  # the rings' observations are among them
        for _, arrays in store.handed:
            for array in arrays:
                assert not any(np.shares_memory(array, s) for s in storage)
        snapshot = [[a.copy() for a in arrays] for _, arrays in store.handed]
        collector.collect(n_step=3_000, random=True)  # the rings wrap again; nothing handed over may change
        for (_, arrays), before in zip(store.handed, snapshot):
            for array, old in zip(arrays, before):
                np.testing.assert_array_equal(array, old)
    store.close()
    ds = load_dataset("ns/handed-v0", root=tmp_path)
    first = store.handed[0][1]
    lengths = [len(e.rewards) for e in ds]
    n = int(np.searchsorted(np.cumsum(lengths), len(first[2]))) + 1
    stored_obs = np.concatenate([e.observations for e in list(ds)[:n]])
    np.testing.assert_array_equal(stored_obs, first[0])
