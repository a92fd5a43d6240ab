"""A writer whose dataset was deleted, moved or replaced under it fails its next commit with DatasetError
instead of committing into whatever is at the path now."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.store.layout.dataset_dir as dataset_dir
import vcollect.store.write.shard as shard_module
import vcollect.store.write.shard_commits as shard_commits
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


def overwrite_with(tmp_path: Path, seed: int) -> None:
    """Replace d/x-v0 with a new dataset holding one episode of ``seed``, as another process would."""
    with EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path, overwrite=True) as new:
        write(new, seed)


@pytest.mark.parametrize("background", [False, True])
def test_overwrite_between_the_check_and_the_shard_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         background: bool) -> None:
    """The writer checked that the dataset is its own; an overwrite lands before its shard is written."""
    old = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path, background_commits=background)
    write(old, 1)
    real_write = shard_commits.write_shard
    overwritten: list[bool] = []

    def write_after_an_overwrite(*args: Any, **kwargs: Any) -> str:
        if not overwritten:
            overwritten.append(True)
            overwrite_with(tmp_path, 2)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(shard_commits, "write_shard", write_after_an_overwrite)
    with pytest.raises(DatasetError, match="'d/x-v0' .* was deleted, moved or replaced since this writer opened it"):
        old.flush()
    assert overwritten and old.committed_episodes == 0
    data = load_dataset("d/x-v0", root=tmp_path)  # no stray shard, no manifest line without its shard
    assert [e.seed for e in data] == [2] and not data.verify()
    with pytest.raises(DatasetError, match="was deleted, moved or replaced"):
        old.close()
    assert seeds("d/x-v0", tmp_path) == [2]


@pytest.mark.parametrize("background", [False, True])
def test_overwrite_between_the_shard_write_and_its_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          background: bool) -> None:
    """The shard's temporary file is written; the dataset is swapped before the rename (the old one kept
    aside, not yet deleted): the shard and its manifest line go into the old dataset, never the new one."""
    old = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path, background_commits=background)
    write(old, 1)
    aside: list[Path] = []
    monkeypatch.setattr(dataset_dir, "drop_dir", lambda path, root: aside.append(path))
    real_write_file = shard_module._write_new_file

    def overwrite_after_writing(*args: Any, **kwargs: Any) -> None:
        real_write_file(*args, **kwargs)
        if not aside:
            overwrite_with(tmp_path, 2)

    monkeypatch.setattr(shard_module, "_write_new_file", overwrite_after_writing)
    with pytest.raises(DatasetError, match="'d/x-v0' .* was replaced since this writer opened it: shard .* "
                                           r"\(1 episodes\) was committed to the old dataset and went with it"):
        old.flush()
    data = load_dataset("d/x-v0", root=tmp_path)
    assert [e.seed for e in data] == [2] and not data.verify()
    assert len(aside) == 1 and (aside[0] / "dataset.json").exists()
    shards = [p.name for p in (aside[0] / "shards").iterdir()]
    assert len(shards) == 1 and old.writer_name in shards[0] and shards[0].endswith(".h5")
    lines = (aside[0] / "manifest" / f"{old.writer_name}.jsonl").read_text().splitlines()
    assert [json.loads(line)["shard"] for line in lines] == shards
    with pytest.raises(DatasetError, match="was deleted, moved or replaced"):
        old.close()
    assert seeds("d/x-v0", tmp_path) == [2]


def held_descriptors(path: Path) -> list[int]:
    """This process's open descriptors of the directory ``path``."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                found.append(int(name))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_the_held_directory_is_closed_and_not_inherited(tmp_path: Path) -> None:
    store = EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path, background_commits=True)
    held = held_descriptors(store.path)
    assert len(held) == 1 and not os.get_inheritable(held[0])
    write(store, 1)
    store.close()
    assert held_descriptors(store.path) == []
    opened = EpisodeStore.open("d/x-v0", tmp_path)
    assert len(held_descriptors(opened.path)) == 1
    opened.move_to("d/y-v0", tmp_path)
    assert held_descriptors(tmp_path / "d" / "x-v0") == [] and len(held_descriptors(opened.path)) == 1
    opened.close()
    assert held_descriptors(opened.path) == []


@pytest.mark.parametrize("target", ["id", "folder"])
def test_a_move_with_background_commits_takes_its_pending_commits_along(tmp_path: Path, target: str) -> None:
    """A move hands the pending episodes over as a shard; with background commits that shard is committed
    before the dataset moves, into the moved dataset, never failed as "deleted, moved or replaced"."""
    store = EpisodeStore.create("d/staged-v0", OBS, ACT, root=tmp_path, shard_steps=8, background_commits=True)
    with store:
        for seed in range(7):  # 4 steps each: shards of 2 episodes handed to the commit thread, one pending
            write(store, seed)
        destination = tmp_path / "saved" if target == "folder" else None
        moved = store.move_to(destination) if destination is not None else store.move_to("d/final-v0", tmp_path)
        write(store, 7)  # the store keeps writing at the new place
    assert store.committed_episodes == 8 and not (tmp_path / "d" / "staged-v0").exists()
    assert moved == (destination if destination is not None else tmp_path / "d" / "final-v0")
    loaded = load_dataset(moved) if destination is not None else load_dataset("d/final-v0", root=tmp_path)
    assert [e.seed for e in loaded] == list(range(8))
