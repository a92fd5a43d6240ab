"""The old DataCollector spellings still work, with a DeprecationWarning naming the new ones."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from vcollect import DataCollector, load_dataset
from vcollect.errors import InvalidDatasetIdError
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


def test_save_to_disk_of_a_folder_no_id_names_says_what_to_pass(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "staging")
    play(env, 1)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidDatasetIdError) as caught:
        env.save_to_disk(tmp_path / "save-1a2b" / "saved", {})
    message = str(caught.value)
    assert "'saved' is not" in message and "saved-v0" in message and "create_dataset(dataset_id" in message
    assert not (tmp_path / "save-1a2b").exists()  # nothing written
    with pytest.warns(UserWarning, match="not saved by create_dataset"):
        env.close()
