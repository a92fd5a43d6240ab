"""A writer whose dataset was deleted, moved or replaced under it fails its next commit with DatasetError
instead of committing into whatever is at the path now."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.errors import DatasetError
from vcollect.store import EpisodeStore, combine_datasets, delete_dataset, load_dataset

OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float32)
ACT = spaces.Discrete(3)


def write(store: EpisodeStore, seed: int, steps: int = 4) -> None:
    obs = np.full((steps + 1, 2), seed, np.float32)
    store.write_episode(obs, np.arange(steps) % 3, np.ones(steps), np.arange(steps) == steps - 1,
                        np.zeros(steps, bool), seed=seed, env_id=0)


def seeds(dataset_id: str, root: Path) -> list[int]:
    return [e.seed for e in load_dataset(dataset_id, root=root)]


def test_replaced_by_a_new_dataset_of_the_same_id(tmp_path: Path) -> None:
    old = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path)
    write(old, 1)
    old.flush()
    with EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path, overwrite=True) as new:
        write(new, 2)
    write(old, 3)
    with pytest.raises(DatasetError, match="'d/x-v0' .* was deleted, moved or replaced since this writer opened it"):
        old.flush()
    assert old.pending_episodes == 1 and old.committed_episodes == 1
    assert seeds("d/x-v0", tmp_path) == [2]  # the new dataset got nothing of the old writer's


def test_deleted_and_made_again_at_the_same_place(tmp_path: Path) -> None:
    """Even when the new directory gets the old one's inode number (tmpfs and ext4 reuse them)."""
    store = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path)
    write(store, 1)
    delete_dataset("d/x-v0", tmp_path)
    with pytest.raises(DatasetError, match="was deleted, moved or replaced"):
        store.flush()
    assert not (tmp_path / "d" / "x-v0").exists()  # nothing made again by the failed commit
    EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path).close()
    with pytest.raises(DatasetError, match="was deleted, moved or replaced"):
        store.close()
    assert seeds("d/x-v0", tmp_path) == []


def test_moved_away_and_another_moved_in(tmp_path: Path) -> None:
    store = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path)
    write(store, 1)
    store.flush()
    os.rename(tmp_path / "d" / "x-v0", tmp_path / "d" / "elsewhere-v0")
    combine_datasets(["d/elsewhere-v0"], "d/x-v0", tmp_path)  # a copy (new created_at) now at the path
    write(store, 2)
    with pytest.raises(DatasetError, match="was deleted, moved or replaced"):
        store.flush()
    assert seeds("d/x-v0", tmp_path) == [1]
    shutil.rmtree(tmp_path / "d" / "x-v0")
    os.rename(tmp_path / "d" / "elsewhere-v0", tmp_path / "d" / "x-v0")  # the writer's own dataset, back
    store.close()
    assert seeds("d/x-v0", tmp_path) == [1, 2]


def test_metadata_updates_and_own_move_are_not_a_replacement(tmp_path: Path) -> None:
    store = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path)
    write(store, 1)
    with EpisodeStore.open("d/x-v0", tmp_path) as other:
        other.update_metadata({"author": "someone"})  # dataset.json rewritten by another writer
    store.flush()
    store.move_to("d/y-v0", tmp_path)
    write(store, 2)
    store.close()
    assert seeds("d/y-v0", tmp_path) == [1, 2]
    assert load_dataset("d/y-v0", tmp_path).metadata["author"] == "someone"
