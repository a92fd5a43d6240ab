"""Minari's "collect it yourself" path on vcollect: StepData, EpisodeBuffer, create_dataset_from_buffers,
Dataset.update_dataset_from_buffer and reference scores, checked against what the real `minari` computes
and reads back."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import vcollect
from tests.envs import DictObsEnv
from vcollect import EpisodeBuffer, StepData, create_dataset_from_buffers, get_normalized_score
from vcollect.errors import DatasetExistsError, DatasetNotFoundError
from vcollect.minari.reference_scores import average_return


def record(env: gym.Env, episodes: int, seed: int = 0, infos: bool = False) -> list[EpisodeBuffer]:
    """Episodes of random actions recorded step by step, as Minari's docs build buffers."""
    env.action_space.seed(seed)
    buffers = []
    for e in range(episodes):
        obs, info = env.reset(seed=seed + e)
        buf = EpisodeBuffer(id=e, seed=seed + e, options=None, observations=obs,  # as Minari's DataCollector
                            infos={"t": 0} if infos else None)
        done, t = False, 0
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, info = env.step(action)
            t += 1
            buf = buf.add_step_data(StepData(observation=obs, action=action, reward=reward, terminated=terminated,
                                             truncated=truncated, info={"t": t} if infos else {}))
            done = terminated or truncated
        buffers.append(buf)
    return buffers


def test_buffers_become_a_dataset_that_minari_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffers = record(gym.make("CartPole-v1"), 5, infos=True)
    assert [len(b) for b in buffers] == [len(b.rewards) for b in buffers] and len(buffers[0].observations) == len(buffers[0]) + 1
    data = create_dataset_from_buffers("buf/cartpole-v0", buffers, env="CartPole-v1", algorithm_name="random",
                                       author="ann", author_email="ann@example.org", code_permalink="https://x",
                                       description="five episodes", requirements=["gymnasium>=1.0"], root=tmp_path)
    assert data.total_episodes == 5 and data.total_steps == sum(len(b) for b in buffers)
    for episode, buf in zip(data, buffers):
        np.testing.assert_array_equal(episode.observations, np.asarray(buf.observations, np.float32))
        np.testing.assert_array_equal(episode.actions, buf.actions)
        np.testing.assert_array_equal(episode.rewards, buf.rewards)
        np.testing.assert_array_equal(episode.infos["t"], np.arange(len(buf) + 1))
        assert episode.seed == buf.seed and bool(episode.terminations[-1] or episode.truncations[-1])
    meta = data.metadata
    assert (meta["algorithm_name"], meta["author"], meta["code_permalink"]) == ("random", "ann", "https://x")
    assert meta["requirements"] == ["gymnasium>=1.0"] and data.env_spec.id == "CartPole-v1"
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    vcollect.export_minari(data, "buf/cartpole-v0")
    theirs = minari.load_dataset("buf/cartpole-v0")
    assert theirs.total_episodes == 5
    for mine, other in zip(data, theirs.iterate_episodes()):
        np.testing.assert_array_equal(other.observations, mine.observations)
        np.testing.assert_array_equal(other.actions, mine.actions)


def test_dict_and_tuple_observations_without_an_env(tmp_path: Path) -> None:
    env = DictObsEnv()
    buffers = record(env, 4, seed=3)
    data = create_dataset_from_buffers("buf/dict-v0", buffers, observation_space=env.observation_space,
                                       action_space=env.action_space, root=tmp_path)
    assert data.env_spec is None
    for episode, buf in zip(data, buffers):
        np.testing.assert_array_equal(episode.observations["count"], buf.observations["count"])
        np.testing.assert_array_equal(episode.observations["nested"][0], np.stack(buf.observations["nested"][0]))
        np.testing.assert_array_equal(episode.actions, buf.actions)


def test_bad_buffers_name_the_episode_and_write_nothing(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    buffers = record(env, 3)
    broken = buffers[1]
    wrong = EpisodeBuffer(id=broken.id, seed=broken.seed, observations=[o[:3] for o in broken.observations],
                          actions=broken.actions, rewards=broken.rewards, terminations=broken.terminations,
                          truncations=broken.truncations)
    with pytest.raises(ValueError, match=r"episode 1 \(id 1\)"):
        create_dataset_from_buffers("buf/bad-v0", [buffers[0], wrong, buffers[2]], env="CartPole-v1", root=tmp_path)
    outside = EpisodeBuffer(id=9, observations=buffers[0].observations, actions=[5] * len(buffers[0]),
                            rewards=buffers[0].rewards, terminations=buffers[0].terminations,
                            truncations=buffers[0].truncations)
    with pytest.raises(ValueError, match="episode 0 .*actions outside their space"):
        create_dataset_from_buffers("buf/bad-v0", [outside], env="CartPole-v1", root=tmp_path)
    with pytest.raises(DatasetNotFoundError):
        vcollect.load_dataset("buf/bad-v0", root=tmp_path)
    with pytest.raises(ValueError, match="observation space and action space must be provided"):
        create_dataset_from_buffers("buf/bad-v0", buffers, root=tmp_path)
    with pytest.raises(ValueError, match="expert_policy or ref_max_score, not both"):
        create_dataset_from_buffers("buf/bad-v0", buffers, env="CartPole-v1", ref_max_score=1.0,
                                    expert_policy=lambda obs: 0, root=tmp_path)
    create_dataset_from_buffers("buf/ok-v0", buffers, env=env, root=tmp_path)
    with pytest.raises(DatasetExistsError):
        create_dataset_from_buffers("buf/ok-v0", buffers, env=env, root=tmp_path)
    assert sorted(vcollect.list_datasets(tmp_path)) == ["buf/ok-v0"]


def test_update_dataset_from_buffer_appends(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    data = create_dataset_from_buffers("buf/grow-v0", record(env, 2), env="CartPole-v1", root=tmp_path)
    more = record(env, 3, seed=50)
    data.update_dataset_from_buffer(more)
    grown = vcollect.load_dataset("buf/grow-v0", root=tmp_path)
    assert grown.total_episodes == 5 and [e.seed for e in grown][2:] == [50, 51, 52]


def test_reference_scores_match_minaris_and_normalise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    minari_utils = pytest.importorskip("minari.utils")
    expert = lambda obs: int(obs[2] > 0)  # noqa: E731 - push toward the pole's lean: a decent CartPole policy
    data = create_dataset_from_buffers("buf/scored-v0", record(gym.make("CartPole-v1"), 3), env="CartPole-v1",
                                       expert_policy=expert, num_episodes_average_score=4, root=tmp_path)
    meta = data.metadata
    env = gym.make("CartPole-v1")
    assert meta["ref_min_score"] == minari_utils.get_average_reference_score(env, minari_utils.RandomPolicy(env), 4)
    assert meta["ref_max_score"] == average_return(gym.make("CartPole-v1"), expert, 4) > meta["ref_min_score"]
    returns = np.array([meta["ref_min_score"], meta["ref_max_score"], 100.0])
    mine = get_normalized_score(data, returns)
    np.testing.assert_allclose(mine[:2], [0.0, 1.0])
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    vcollect.export_minari(data, "buf/scored-v0")
    np.testing.assert_allclose(minari.get_normalized_score(minari.load_dataset("buf/scored-v0"), returns), mine)
    unscored = create_dataset_from_buffers("buf/plain-v0", record(env, 1), env="CartPole-v1", root=tmp_path)
    with pytest.raises(ValueError, match="Reference score not provided"):
        get_normalized_score(unscored, returns)


def test_step_data_appends_leaf_by_leaf() -> None:
    """Both starts work: Minari's (the reset's observation given to EpisodeBuffer) and a reset's step data."""
    minari_style = EpisodeBuffer(observations={"a": 1, "b": (2, 3)}).add_step_data(
        StepData(observation={"a": 4, "b": (5, 6)}, action=1, reward=0.5, terminated=False, truncated=True, info={}))
    assert minari_style.observations == {"a": [1, 4], "b": ([2, 5], [3, 6])} and len(minari_style) == 1
    buf = EpisodeBuffer().add_step_data(StepData(observation={"a": 1, "b": (2, 3)}, action=None, reward=None,
                                                 terminated=None, truncated=None, info={}))
    buf = buf.add_step_data(StepData(observation={"a": 4, "b": (5, 6)}, action=1, reward=0.5, terminated=False,
                                     truncated=True, info={}))
    assert buf.observations == {"a": [1, 4], "b": ([2, 5], [3, 6])}
    assert (buf.actions, buf.rewards, buf.terminations, buf.truncations, len(buf)) == ([1], [0.5], [False], [True], 1)


def test_episode_store_takes_reference_scores_as_metadata(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    scores = vcollect.reference_scores("CartPole-v1", ref_max_score=500.0, num_episodes_average_score=3)
    assert scores["ref_max_score"] == 500.0 and scores["num_episodes_average_score"] == 3
    with vcollect.EpisodeStore.create("buf/store-v0", env.observation_space, env.action_space, root=tmp_path,
                                      metadata=scores):
        pass
    data = vcollect.load_dataset("buf/store-v0", root=tmp_path)
    low = scores["ref_min_score"]
    np.testing.assert_allclose(get_normalized_score(data, [low, 500.0]), [0.0, 1.0])
    assert vcollect.reference_scores("CartPole-v1") == {}, "Minari stores no scores without a max or an expert"
    with pytest.raises(ValueError, match="needs the env"):
        vcollect.reference_scores(None, ref_max_score=1.0)
