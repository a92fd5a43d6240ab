"""Dataset.as_torch_dataset: map-style items equal to what the Dataset API reads, in DataLoader workers
(forked and spawned) that each open their own files; a DataLoader batch read at once and collated to what
the per-item reads give."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch.utils.data import DataLoader, default_collate

from vcollect import Collector, Dataset, EpisodeStore, load_dataset
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


@pytest.mark.parametrize("start", ["fork"])  # spawned workers: the batched test below (same pickled dataset type)
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


# ---------------------------------------------------------------------------------------------- batched reads

DICT_SPACE = spaces.Dict({
    "pos": spaces.Box(-10, 10, shape=(3,), dtype=np.float32),
    "nested": spaces.Dict({"k": spaces.Discrete(5), "img": spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8)}),
    "pair": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, shape=(2,), dtype=np.float64))),
})


@pytest.fixture(scope="module")
def dict_stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dict observations (a nested Dict and a Tuple inside), Box actions, three shards."""
    root = tmp_path_factory.mktemp("torchds-dict")
    DICT_SPACE.seed(1)
    action_space = spaces.Box(-1, 1, shape=(2,), dtype=np.float32)
    rng = np.random.default_rng(1)
    with EpisodeStore.create("t/dict-v0", DICT_SPACE, action_space, root=root, shard_steps=40) as store:
        for n in (7, 30, 1, 22, 15, 9):
            obs = [DICT_SPACE.sample() for _ in range(n + 1)]
            batch = {
                "pos": np.stack([o["pos"] for o in obs]),
                "nested": {"k": np.array([o["nested"]["k"] for o in obs]),
                           "img": np.stack([o["nested"]["img"] for o in obs])},
                "pair": (np.array([o["pair"][0] for o in obs]), np.stack([o["pair"][1] for o in obs])),
            }
            store.write_episode(batch, rng.uniform(-1, 1, (n, 2)).astype(np.float32), rng.normal(size=n),
                                np.arange(n) == n - 1, np.zeros(n, bool), seed=None, env_id=0)
    return root


@pytest.fixture(scope="module")
def stacked_stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Frames stacked 4 deep, stored one frame a row, over several shards."""
    root = tmp_path_factory.mktemp("torchds-stack")
    rng = np.random.default_rng(2)
    space = spaces.Box(0, 255, (4, 6, 5), np.uint8)
    with EpisodeStore.create("t/stack-v0", space, spaces.Discrete(3), root=root, frame_stack=4,
                             shard_steps=12) as store:
        for i, n in enumerate((5, 1, 12, 7, 9)):
            frames = rng.integers(0, 256, size=(n + 1, 6, 5), dtype=np.uint8)
            stacks = np.stack([frames[np.clip(np.arange(t - 3, t + 1), 0, None)] for t in range(n + 1)])
            store.write_episode(stacks, rng.integers(0, 3, size=n), np.ones(n), np.arange(n) == n - 1,
                                np.zeros(n, bool), seed=i, env_id=0)
    return root


DATASETS = {"cartpole": ("t/cartpole-v0", "stored"), "dict": ("t/dict-v0", "dict_stored"),
            "frame_stack": ("t/stack-v0", "stacked_stored")}


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Equal trees: same container types and keys, tensors/arrays of the same dtype, shape and values."""
    assert type(got) is type(want) or (isinstance(got, Mapping) and isinstance(want, dict)), (where, got, want)
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            assert_same(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}/{i}")
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), where
    else:
        assert np.asarray(got).dtype == np.asarray(want).dtype, where
        np.testing.assert_array_equal(got, want, err_msg=where)


@pytest.mark.parametrize("name", list(DATASETS))
def test_batched_items_equal_per_item_items(name: str, request: pytest.FixtureRequest) -> None:
    dataset_id, fixture = DATASETS[name]
    dataset = load_dataset(dataset_id, root=request.getfixturevalue(fixture))
    items = dataset.as_torch_dataset()
    rng = np.random.default_rng(3)
    indices = [*rng.integers(0, len(items), size=40).tolist(), 0, len(items) - 1, -1, -len(items)]
    rows = items.__getitems__(indices)
    singles = [items[i] for i in indices]
    assert len(rows) == len(indices)
    for i, (row, single) in enumerate(zip(rows, singles)):
        assert_same(row, single, f"row {i}")
    assert_same(default_collate(rows), default_collate(singles))
    # rows that are not one whole batch in order still collate as the per-item dicts do
    assert_same(default_collate(rows[::-1]), default_collate(singles[::-1]))
    assert_same(default_collate(list(rows)), default_collate(singles))
    assert_same(default_collate(rows[:3] + list(items.__getitems__([5, 6]))),
                default_collate(singles[:3] + [items[5], items[6]]))
    with pytest.raises(IndexError):
        items.__getitems__([0, len(items)])


def test_episode_items_batched_equal_per_item(stored: Path) -> None:
    items = load_dataset("t/cartpole-v0", root=stored).as_torch_dataset("episodes")
    indices = [3, 0, -1, 7]
    for got, want in zip(items.__getitems__(indices), [items[i] for i in indices]):
        assert_same(got, want)


@pytest.mark.parametrize("name", list(DATASETS))
def test_a_dataloader_reads_each_batch_in_one_read(name: str, request: pytest.FixtureRequest,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    dataset_id, fixture = DATASETS[name]
    dataset = load_dataset(dataset_id, root=request.getfixturevalue(fixture))
    items = dataset.as_torch_dataset()
    order = np.random.default_rng(4).permutation(len(items)).tolist()
    calls: list[int] = []
    real = Dataset.steps_at

    def counted(self: Dataset, positions: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(len(positions))
        return real(self, positions, **kwargs)

    monkeypatch.setattr(Dataset, "steps_at", counted)
    batches = list(DataLoader(items, batch_size=16, sampler=order))
    assert calls == [len(order[i : i + 16]) for i in range(0, len(order), 16)], "not one read per batch"
    monkeypatch.undo()
    want = default_collate([items[i] for i in order])
    got = {key: _cat([b[key] for b in batches]) for key in want}
    assert_same(got, want)


def _cat(parts: list[Any]) -> Any:
    """Batches of one key (nested dicts/lists of tensors) joined along the batch axis."""
    if isinstance(parts[0], dict):
        return {key: _cat([p[key] for p in parts]) for key in parts[0]}
    if isinstance(parts[0], list):
        return [_cat([p[i] for p in parts]) for i in range(len(parts[0]))]
    return torch.cat(parts)


def collate_with_pids(rows: list[Any]) -> dict[str, Any]:
    """Default collate, plus the process that read the batch and the process that opened its files."""
    batch = default_collate(rows)
    info = torch.utils.data.get_worker_info()
    assert info is not None
    batch["pid"] = os.getpid()
    batch["files_pid"] = info.dataset.dataset._index.files._pid  # type: ignore[attr-defined]
    return batch


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dataloader_workers_read_batches_with_their_own_files(start: str, dict_stored: Path) -> None:
    dataset = load_dataset("t/dict-v0", root=dict_stored)
    items = dataset.as_torch_dataset()
    dataset.sample_steps(8, cache_bytes=0)  # the parent now holds open files a forked worker inherits
    assert StoredDataset(dataset).open_files > 0
    loader = DataLoader(items, batch_size=16, num_workers=2, shuffle=False, collate_fn=collate_with_pids,
                        multiprocessing_context=multiprocessing.get_context(start), timeout=120)
    batches = list(loader)
    pids = {b["pid"] for b in batches}
    assert os.getpid() not in pids and len(pids) == 2
    assert {b["files_pid"] for b in batches} == pids, "a worker read through file handles its parent opened"
    got = {key: _cat([b[key] for b in batches]) for key in ("observations", "actions", "next_observations")}
    want = default_collate([items[i] for i in range(len(items))])
    assert_same(got, {key: want[key] for key in got})
