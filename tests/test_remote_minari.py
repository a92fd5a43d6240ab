"""Minari's remote layout both ways, with the real minari 0.5 client against the GCS emulator: what vcollect
uploads ``minari download`` fetches and loads; what minari's client uploads vcollect downloads and reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari.namespace import get_namespace_metadata
from minari.storage.remotes import get_cloud_storage
from remote_servers import gcs_server_fixture, remote_url  # noqa: F401 - fixtures
from small_datasets import make_dataset

import vcollect
from vcollect.remote import list_remote_datasets
from vcollect.store import load_dataset


@pytest.fixture
def minari_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gcs_server: Any) -> str:
    url = remote_url("gs", None, gcs_server, tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("MINARI_REMOTE", "gcp://" + url.removeprefix("gs://"))
    return url


def test_upload_in_minari_layout_is_what_minari_downloads(minari_env: str, tmp_path: Path) -> None:
    make_dataset(tmp_path / "v", "lab/cart-v0", [5, 9, 7], episodes_per_shard=1)
    vcollect.create_namespace("other", root=tmp_path / "v", description="unused")
    vcollect.upload_dataset("lab/cart-v0", "gcp://" + minari_env.removeprefix("gs://"), root=tmp_path / "v",
                            format="minari")
    assert list_remote_datasets(minari_env)["lab/cart-v0"]["format"] == "minari"
    minari.download_dataset("lab/cart-v0")
    theirs = minari.load_dataset("lab/cart-v0")
    ours = load_dataset("lab/cart-v0", tmp_path / "v")
    assert theirs.total_episodes == ours.total_episodes == 3
    for a, b in zip(theirs.iterate_episodes(), ours.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_download_of_a_minari_upload_imports_it(minari_env: str, tmp_path: Path) -> None:
    env = minari.DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=1)
    episodes = 0
    while episodes < 4:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            episodes += 1
            env.reset()
    env.create_dataset("lab/minari-made-v0", algorithm_name="random", author="ann")
    env.close()
    storage = get_cloud_storage()  # the real client's upload (anonymous: the emulator takes no credentials)
    storage.upload_namespace("lab")
    storage.upload_dataset("lab/minari-made-v0")
    listed = list_remote_datasets(minari_env)
    assert listed["lab/minari-made-v0"]["total_episodes"] == 4

    vcollect.download_dataset("lab/minari-made-v0", minari_env, root=tmp_path / "v")
    ours = load_dataset("lab/minari-made-v0", tmp_path / "v")
    theirs = minari.load_dataset("lab/minari-made-v0")
    assert ours.total_episodes == theirs.total_episodes == 4
    for a, b in zip(theirs.iterate_episodes(), ours.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
    assert vcollect.get_namespace_metadata("lab", tmp_path / "v") == get_namespace_metadata("lab")
