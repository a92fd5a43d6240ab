"""The old DataCollector spellings still work, with a DeprecationWarning naming the new ones."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from vcollect import DataCollector, load_dataset
from vcollect.errors import DatasetExistsError, DatasetNotFoundError, InvalidDatasetIdError, MetadataKeyError
from vcollect.store.read.reader import StoredDataset


def play(env: DataCollector, episodes: int) -> None:
    env.reset(seed=0)
    env.action_space.seed(0)
    done = 0
    while done < episodes:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            done += 1
            env.reset()


def test_max_buffer_steps_is_flush_steps(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="use flush_steps=N"):
        env = DataCollector(gym.make("CartPole-v1"), max_buffer_steps=50, flush_every=10_000, root=tmp_path)
    assert env.flush_steps == 50
    play(env, 8)  # about 180 steps: committed in several shards along the way, not only at the end
    staging = load_dataset(env.staging_id, root=tmp_path)
    assert staging.total_steps >= 50 and len(StoredDataset(staging).shard_paths) >= 2
    with pytest.warns(UserWarning, match="not saved by create_dataset"):
        env.close()


def test_save_to_disk_writes_the_dataset_at_the_path(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path)
    play(env, 3)
    with pytest.warns(DeprecationWarning, match="use create_dataset"):
        data = env.save_to_disk(tmp_path / "old" / "cartpole-random-v0",
                                {"algorithm_name": "random", "author": "old script", "purpose": "compat"})
    env.close()
    again = load_dataset("old/cartpole-random-v0", root=tmp_path)
    assert again.total_episodes == data.total_episodes == 3
    assert (again.metadata["algorithm_name"], again.metadata["author"], again.metadata["purpose"]) == (
        "random", "old script", "compat")


def test_save_to_disk_writes_at_a_folder_whose_parent_is_no_namespace(tmp_path: Path) -> None:
    parent = tmp_path / "runs.2024"  # not a namespace's name: the folder's parent is the root
    parent.mkdir()
    (parent / "saved-v0").mkdir()  # made beforehand and empty, as Minari's users made the folder they passed
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 2)
    with pytest.warns(DeprecationWarning, match="use create_dataset"):
        data = env.save_to_disk(parent / "saved-v0", {"author": "me"})
    env.close()
    assert (data.id, data.root, data.path) == ("saved-v0", parent, parent / "saved-v0")
    again = load_dataset(data.id, root=data.root)
    assert again.total_episodes == 2 and again.metadata["author"] == "me"


def test_save_to_disk_writes_at_any_folder_and_load_dataset_reads_it_by_path(tmp_path: Path) -> None:
    """Minari 0.4's save_to_disk(path) wrote at any folder: the folder's name need not read as an id."""
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 3)
    folder = tmp_path / "save-1a2b" / "saved"
    with pytest.warns(DeprecationWarning, match="use create_dataset"):
        data = env.save_to_disk(folder, {"author": "me", "purpose": "compat"})
    env.close()
    assert (data.id, data.path, data.total_episodes) == ("saved", folder, 3)
    assert (folder / "dataset.json").is_file() and not any((tmp_path / "staging").rglob("dataset.json"))
    assert (data.spec.dataset_name, data.spec.namespace, data.spec.version) == ("saved", None, None)
    for again in (load_dataset(folder), load_dataset(str(folder)), load_dataset(os.path.relpath(folder))):
        assert (again.id, again.path, again.total_episodes) == ("saved", folder, 3)
        assert again.metadata["author"] == "me" and again.metadata["purpose"] == "compat"
        np.testing.assert_array_equal(again[2].actions, data[2].actions)
    assert StoredDataset(load_dataset(folder)).root == folder.parent  # its parent bounds every rename or deletion


def test_save_to_disk_takes_minari_04_metadata_naming_the_dataset_and_refuses_before_writing(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 2)
    folder = tmp_path / "out" / "saved"
    with pytest.warns(UserWarning, match="'cartpole-test-v0' is not stored: the folder 'saved' names the dataset"):
        data = env.save_to_disk(folder, {"dataset_id": "cartpole-test-v0", "author": "me"})
    assert (data.id, data.total_episodes, data.metadata["author"]) == ("saved", 2, "me")
    play(env, 1)
    refused = tmp_path / "out" / "refused"
    with pytest.warns(DeprecationWarning), pytest.raises(MetadataKeyError, match="total_steps"):
        env.save_to_disk(refused, {"total_steps": 5})
    env.close()
    assert not refused.exists()  # checked before anything was written


def test_a_str_that_reads_as_an_id_is_always_an_id_never_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 2)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(DeprecationWarning):
        env.save_to_disk(tmp_path / "runs.1" / "cart-v0", {})
    env.close()
    ids_root = tmp_path / "ids"
    ids_root.mkdir()
    with pytest.raises(DatasetNotFoundError, match="ids"):  # an id is looked up under the root, not in the cwd
        load_dataset("cart-v0", root=ids_root)
    assert load_dataset("./runs.1/cart-v0").total_episodes == 2  # not an id: the folder
    assert load_dataset(Path("runs.1") / "cart-v0").total_episodes == 2
    with pytest.raises(InvalidDatasetIdError, match="no dataset id nor a dataset folder that exists"):
        load_dataset("runs.1/missing")
    with pytest.raises(ValueError, match="root= applies to dataset ids"):
        load_dataset(tmp_path / "runs.1" / "cart-v0", root=ids_root)


def test_save_to_disk_into_a_folder_holding_a_dataset_refuses(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 1)
    with pytest.warns(DeprecationWarning):
        env.save_to_disk(folder, {})
    play(env, 1)
    with pytest.warns(DeprecationWarning), pytest.raises(DatasetExistsError, match="saved"):
        env.save_to_disk(folder, {})
    assert load_dataset(folder).total_episodes == 1
    with pytest.warns(UserWarning, match="not saved by create_dataset"):
        env.close()
