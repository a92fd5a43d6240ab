"""combine_datasets keeps the env spec by Minari's rule: equal specs but for max_episode_steps combine to
the largest (None if any is None); different envs, or a spec beside none, are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from vcollect.errors import EnvSpecMismatchError
from vcollect.store import EpisodeStore, combine_datasets, load_dataset

CARTPOLE = gym.make("CartPole-v1")


def make(root: Path, dataset_id: str, spec: gym.envs.registration.EnvSpec | None) -> None:
    with EpisodeStore.create(dataset_id, CARTPOLE.observation_space, CARTPOLE.action_space, root=root,
                             env_spec=None if spec is None else spec.to_json()) as store:
        store.write_episode(np.zeros((3, 4), np.float32), np.zeros(2, np.int64), np.ones(2),
                            np.array([False, True]), np.zeros(2, bool), seed=0, env_id=0)


def spec(max_episode_steps: int | None, env_id: str = "CartPole-v1") -> gym.envs.registration.EnvSpec:
    return dataclasses.replace(gym.spec(env_id), max_episode_steps=max_episode_steps)


def test_max_episode_steps_becomes_the_largest_or_none(tmp_path: Path) -> None:
    make(tmp_path, "a/s200-v0", spec(200))
    make(tmp_path, "a/s500-v0", spec(500))
    make(tmp_path, "a/snone-v0", spec(None))
    both = combine_datasets(["a/s200-v0", "a/s500-v0"], "c/both-v0", tmp_path)
    assert both.env_spec.max_episode_steps == 500 and both.env_spec.id == "CartPole-v1"
    env = both.recover_environment()
    assert env.spec is not None and env.spec.max_episode_steps == 500
    with_none = combine_datasets(["a/s200-v0", "a/snone-v0"], "c/none-v0", tmp_path)
    assert with_none.env_spec is not None and with_none.env_spec.max_episode_steps is None


def test_different_envs_and_missing_specs_are_refused(tmp_path: Path) -> None:
    make(tmp_path, "a/cart-v0", spec(500))
    make(tmp_path, "a/other-v0", spec(500, "CartPole-v0"))
    make(tmp_path, "a/nospec-v0", None)
    with pytest.raises(EnvSpecMismatchError, match="env specs differ"):
        combine_datasets(["a/cart-v0", "a/other-v0"], "c/x-v0", tmp_path)
    with pytest.raises(EnvSpecMismatchError, match="without one.*a/nospec-v0"):
        combine_datasets(["a/cart-v0", "a/nospec-v0"], "c/y-v0", tmp_path)
    assert combine_datasets(["a/nospec-v0", "a/nospec-v0"], "c/z-v0", tmp_path).env_spec is None
    assert not (tmp_path / "c" / "x-v0").exists() and not (tmp_path / "c" / "y-v0").exists()
    assert load_dataset("c/z-v0", root=tmp_path).total_episodes == 2
