"""Dataset.as_torch_dataset: map-style items equal to what the Dataset API reads, in DataLoader workers
(forked and spawned) that each open their own files."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vcollect import Collector, EpisodeStore, load_dataset
from vcollect.envs import make_vector
from vcollect.store.read.reader import StoredDataset


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torchds")
    envs = make_vector("CartPole-v1", 4)
    store = EpisodeStore.create("t/cartpole-v0", envs.single_observation_space, envs.single_action_space,
                                root=root, shard_steps=150)
    with Collector(None, envs, store=store, seed=0) as collector:
        collector.reset()
        collector.collect(n_episode=24, random=True)
    store.close()
    return root


def test_transition_items_are_the_stored_steps_in_order(stored: Path) -> None:
    dataset = load_dataset("t/cartpole-v0", root=stored)
    items = dataset.as_torch_dataset()
    assert len(items) == dataset.total_steps
    episodes = list(dataset.iterate_episodes())
    obs = np.concatenate([e.observations[:-1] for e in episodes])
    next_obs = np.concatenate([e.observations[1:] for e in episodes])
    actions = np.concatenate([e.actions for e in episodes])
    terms = np.concatenate([e.terminations for e in episodes])
    for i in (0, 1, len(items) // 2, len(items) - 1, -1):
        item = items[i]
        np.testing.assert_array_equal(item["observations"], obs[i])
        np.testing.assert_array_equal(item["next_observations"], next_obs[i])
        assert item["actions"] == actions[i] and item["terminations"] == terms[i]
    with pytest.raises(IndexError):
        items[len(items)]


def test_a_view_gives_only_its_episodes(stored: Path) -> None:
    dataset = load_dataset("t/cartpole-v0", root=stored)
    view = dataset.filter_episodes(lambda e: e.id % 3 == 0)
    items = view.as_torch_dataset("episodes")
    assert len(items) == len(view) and [items[i]["id"] for i in range(len(items))] == list(view.episode_indices)
    steps = view.as_torch_dataset()
    assert len(steps) == view.total_steps < dataset.total_steps


class PidItems(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Wraps the torch dataset: each item also says which process read it and which process opened the files
    it read through."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.inner[i]
        item["pid"] = os.getpid()
        item["files_pid"] = self.inner.dataset._index.files._pid
        return item


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dataloader_workers_read_with_their_own_files(start: str, stored: Path) -> None:
    dataset = load_dataset("t/cartpole-v0", root=stored)
    items = dataset.as_torch_dataset()
    dataset.sample_steps(8, cache_bytes=0)  # the parent now holds open files a forked worker inherits
    assert StoredDataset(dataset).open_files > 0
    loader = DataLoader(PidItems(items), batch_size=64, num_workers=2, shuffle=False,
                        multiprocessing_context=multiprocessing.get_context(start), timeout=120)
    batches = list(loader)
    pids = {int(p) for b in batches for p in b["pid"]}
    assert os.getpid() not in pids and len(pids) == 2
    files_pids = {int(p) for b in batches for p in b["files_pid"]}
    assert files_pids == pids, "a worker read through file handles its parent opened"
    got = torch.cat([b["observations"] for b in batches]).numpy()
    want = dataset.steps_at(np.arange(dataset.total_steps), cache_bytes=0)["observations"]
    np.testing.assert_array_equal(got, want)
