"""DataCollector: Minari's recording behaviour, callbacks, staging commits, SIGKILL, replay, Minari export."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.envs import CountingEnv, DictObsEnv
from tests.replay import assert_replays
from vcollect.errors import CollectorStateError, DatasetExistsError, InfoStructureError, SpaceMismatchError
from vcollect.minari import export_minari
from vcollect.minari.callbacks import EpisodeMetadataCallback, StepDataCallback
from vcollect.minari.recorder import STAGING_NAMESPACE, DataCollector
from vcollect.store import EpisodeStore, list_datasets, load_dataset

REPO = Path(__file__).resolve().parents[1]


def run_random(env: DataCollector, episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """Reset + random steps for ``episodes`` whole episodes; returns what the env returned, per episode."""
    env.action_space.seed(seed)
    seen = []
    for _ in range(episodes):
        obs, _ = env.reset()
        ep: dict[str, Any] = {"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []}
        while not (ep["term"] and (ep["term"][-1] or ep["trunc"][-1])):
            action = env.action_space.sample()
            obs, r, te, tr, _ = env.step(action)
            ep["obs"].append(obs)
            ep["act"].append(action)
            ep["rew"].append(r)
            ep["term"].append(te)
            ep["trunc"].append(tr)
        seen.append(ep)
    return seen


def test_records_cartpole_with_autoseeds_and_creates_a_dataset(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path, seed=1)
    seen = run_random(env, 7)
    assert env.staging_id is not None and env.staging_id.startswith(f"{STAGING_NAMESPACE}/CartPole-v1-")
    ds = env.create_dataset("cart/recorded-v0", author="Ada", algorithm_name="random", description="d",
                            code_permalink="https://example.org", author_email="a@example.org")
    assert ds.total_episodes == 7 and ds.total_steps == sum(len(e["act"]) for e in seen)
    for got, want in zip(ds, seen):
        np.testing.assert_array_equal(got.observations, np.array(want["obs"]))
        np.testing.assert_array_equal(got.actions, np.array(want["act"]))
        np.testing.assert_array_equal(got.rewards, np.array(want["rew"]))
        np.testing.assert_array_equal(got.terminations, np.array(want["term"]))
        np.testing.assert_array_equal(got.truncations, np.array(want["trunc"]))
        assert got.metadata == EpisodeMetadataCallback()({"rewards": got.rewards})
    seeds = [e.seed for e in ds]
    assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds) and len(set(seeds)) == 7
    assert ds.env_spec is not None and ds.env_spec.id == "CartPole-v1"
    assert {k: ds.metadata[k] for k in ("author", "algorithm_name", "description", "code_permalink", "author_email")} == {
        "author": "Ada", "algorithm_name": "random", "description": "d", "code_permalink": "https://example.org",
        "author_email": "a@example.org",
    }
    assert [k for k in list_datasets(tmp_path) if k.startswith(STAGING_NAMESPACE)] == []  # renamed, not copied
    # The same generator seed gives the same autoseeds.
    again = DataCollector(gym.make("CartPole-v1"), root=tmp_path / "again", seed=1)
    run_random(again, 7)
    assert [e.seed for e in again.create_dataset("cart/recorded-v0")] == seeds
    env.close()
    again.close()


def test_explicit_seed_and_minari_autoseed_false(tmp_path: Path) -> None:
    inner = CountingEnv(episode_length=2)
    env = DataCollector(inner, root=tmp_path)
    env.reset(seed=42)
    assert inner.last_seed == 42
    env.step(0)
    env.step(0)
    env.reset(options={"minari_autoseed": False})
    assert inner.last_seed is None  # not seeded
    env.step(1)
    env.step(1)
    env.reset()
    assert isinstance(inner.last_seed, int)  # autoseeded
    env.step(0)
    env.step(0)
    ds = env.create_dataset("count/seeds-v0")
    assert [e.seed for e in ds] == [42, None, inner.last_seed]
    assert [e.options for e in ds] == [None, {"minari_autoseed": False}, None]
    env.close()


def test_unfinished_episode_is_truncated_on_reset_and_on_create(tmp_path: Path) -> None:
    env = DataCollector(CountingEnv(episode_length=10), root=tmp_path)
    env.reset(seed=0)
    for _ in range(3):
        env.step(1)
    env.reset(seed=1)  # 3 steps, unfinished: recorded, truncated at its last step
    env.reset(seed=2)  # 0 steps: nothing recorded
    for _ in range(2):
        env.step(0)
    ds = env.create_dataset("count/trunc-v0")  # the running episode is truncated too
    assert [len(e) for e in ds] == [3, 2] and [e.seed for e in ds] == [0, 2]
    for ep in ds:
        np.testing.assert_array_equal(ep.terminations, np.zeros(len(ep), bool))
        np.testing.assert_array_equal(ep.truncations, np.arange(len(ep)) == len(ep) - 1)
        np.testing.assert_array_equal(ep.observations[:, 0], np.arange(len(ep) + 1))
    with pytest.raises(CollectorStateError, match="reset"):
        env.step(0)  # after create_dataset, reset first (as in Minari)
    env.close()


def test_stepping_on_after_an_episode_ends_starts_an_unseeded_episode(tmp_path: Path) -> None:
    """Minari's rule: without a reset, the next episode starts from the last observation, seed unknown."""
    env = DataCollector(CountingEnv(episode_length=2), root=tmp_path)
    env.reset(seed=5)
    env.step(0)
    env.step(0)  # episode ends (t=2)
    env.step(1)  # t=3, a new episode starting at obs 2
    ds = env.create_dataset("count/cont-v0")
    assert [e.seed for e in ds] == [5, None]
    np.testing.assert_array_equal(ds[1].observations[:, 0], [2, 3])
    assert len(ds[1]) == 1 and bool(ds[1].terminations[-1])  # CountingEnv stays done past its length
    env.close()


class VcollectExtraCallback(StepDataCallback):
    """Adds nested extra keys (every call, including the one after reset)."""

    def __call__(self, env: gym.Env, obs: Any, info: dict, action: Any = None, rew: Any = None,
                 terminated: Any = None, truncated: Any = None) -> dict[str, Any]:
        data = super().__call__(env, obs, info, action, rew, terminated, truncated)
        data["pole"] = {"angle": float(obs[2]), "twice": 2 * np.asarray(obs)}
        return data


def test_step_data_callback_subclasses_store_extras(tmp_path: Path) -> None:
    import minari

    class MinariStyle(minari.StepDataCallback):  # written for Minari: keyword arguments only
        def __call__(self, env: gym.Env, **kwargs: Any) -> dict[str, Any]:
            data = super().__call__(env, **kwargs)
            data["step_reward_x10"] = 10.0 * (kwargs.get("rew") or 0.0)
            data["observation"] = kwargs["obs"]  # editing known keys works too
            return data

    for callback, check in (
        (VcollectExtraCallback, lambda ep: (
            np.testing.assert_array_equal(ep.extras["pole"]["angle"], ep.observations[:, 2].astype(np.float64)),
            np.testing.assert_array_equal(ep.extras["pole"]["twice"], 2 * ep.observations),
        )),
        (MinariStyle, lambda ep: np.testing.assert_array_equal(
            ep.extras["step_reward_x10"], np.concatenate([[0.0], 10.0 * ep.rewards]))),
    ):
        env = DataCollector(gym.make("CartPole-v1"), step_data_callback=callback, root=tmp_path)
        seen = run_random(env, 3)
        ds = env.create_dataset(f"cart/{callback.__name__.lower()}-v0")
        for ep, want in zip(ds, seen):
            np.testing.assert_array_equal(ep.observations, np.array(want["obs"]))
            np.testing.assert_array_equal(ep.actions, np.array(want["act"]))
            check(ep)
        env.close()


class InfoEnv(CountingEnv):
    """CountingEnv with nested infos; from step ``new_key_at`` on, the step info gains a key."""

    def __init__(self, new_key_at: int | None = None) -> None:
        super().__init__(episode_length=4)
        self.new_key_at = new_key_at

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"t": 0, "pos": {"x": 0.0, "v": np.zeros(2, np.float32)}}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, r, te, tr, _ = super().step(action)
        info: dict[str, Any] = {"t": self.t, "pos": {"x": 0.5 * self.t, "v": np.full(2, self.t, np.float32)}}
        if self.new_key_at is not None and self.t >= self.new_key_at:
            info["pos"]["surprise"] = 1
        return obs, r, te, tr, info


def test_record_infos_and_structure_errors_name_the_key(tmp_path: Path) -> None:
    env = DataCollector(InfoEnv(), record_infos=True, root=tmp_path)
    run_random(env, 2)
    ds = env.create_dataset("info/ok-v0")
    for ep in ds:
        np.testing.assert_array_equal(ep.infos["t"], np.arange(5))
        np.testing.assert_array_equal(ep.infos["pos"]["x"], 0.5 * np.arange(5))
        np.testing.assert_array_equal(ep.infos["pos"]["v"], np.repeat(np.arange(5, dtype=np.float32)[:, None], 2, 1))
    env.close()

    bad = DataCollector(InfoEnv(new_key_at=3), record_infos=True, root=tmp_path)
    bad.reset(seed=0)
    bad.step(0)
    bad.step(0)
    with pytest.raises(InfoStructureError, match="pos/surprise"):
        bad.step(0)
    bad.close()

    # Without record_infos nothing is checked or stored.
    quiet = DataCollector(InfoEnv(new_key_at=3), root=tmp_path)
    run_random(quiet, 1)
    assert quiet.create_dataset("info/quiet-v0")[0].infos == {}
    quiet.close()


def test_custom_episode_metadata_callback(tmp_path: Path) -> None:
    class Lengths(EpisodeMetadataCallback):
        def __call__(self, episode: dict[str, Any]) -> dict[str, Any]:
            return {"length": len(episode["rewards"]), "first_obs": float(episode["observations"][0, 0]),
                    "id_seen": episode["id"]}

    env = DataCollector(CountingEnv(episode_length=3), episode_metadata_callback=Lengths, root=tmp_path)
    run_random(env, 3)
    ds = env.create_dataset("count/meta-v0")
    assert [e.metadata for e in ds] == [{"length": 3, "first_obs": 0.0, "id_seen": i} for i in range(3)]
    env.close()


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(1, 300), elements=st.floats(-1e6, 1e6)))
def test_default_callback_statistics_equal_numpys(rewards: np.ndarray) -> None:
    assert EpisodeMetadataCallback()({"rewards": rewards}) == {  # what Minari's default callback computes
        "rewards_sum": float(np.sum(rewards)),
        "rewards_mean": float(np.mean(rewards)),
        "rewards_std": float(np.std(rewards)),
        "rewards_max": float(np.max(rewards)),
        "rewards_min": float(np.min(rewards)),
    }


def test_dict_observations(tmp_path: Path) -> None:
    env = DataCollector(DictObsEnv(), root=tmp_path)
    seen = run_random(env, 4)
    ds = env.create_dataset("dict/rec-v0")
    for ep, want in zip(ds, seen):
        np.testing.assert_array_equal(ep.observations["position"], np.array([o["position"] for o in want["obs"]]))
        np.testing.assert_array_equal(ep.observations["count"], np.array([o["count"] for o in want["obs"]]))
        np.testing.assert_array_equal(ep.observations["nested"][0], np.array([o["nested"][0] for o in want["obs"]]))
        np.testing.assert_array_equal(ep.observations["nested"][1], np.array([o["nested"][1] for o in want["obs"]]))
        np.testing.assert_array_equal(ep.actions, np.array(want["act"]))
    env.close()


def test_out_of_space_values_warn_like_minari_and_are_kept(tmp_path: Path) -> None:
    env = DataCollector(CountingEnv(episode_length=2), root=tmp_path,
                        observation_space=spaces.Box(0.0, 1.0, (1,), np.float32))
    env.reset(seed=0)
    env.step(0)
    with pytest.warns(UserWarning, match="Observation is not in observation space"):
        env.step(0)  # obs 2 > high 1
    ds = env.create_dataset("count/oos-v0")
    np.testing.assert_array_equal(ds[0].observations[:, 0], [0, 1, 2])
    env.close()


def test_create_dataset_again_add_to_dataset_and_errors(tmp_path: Path) -> None:
    env = DataCollector(CountingEnv(episode_length=3), root=tmp_path, seed=0)
    run_random(env, 2)
    first = env.create_dataset("count/main-v0")
    run_random(env, 1)  # recording goes on into a new staging dataset
    env.reset(seed=9)
    env.step(0)  # running, unfinished
    with pytest.raises(DatasetExistsError):
        env.create_dataset("count/main-v0")
    env.step(0)  # the failed call changed nothing: the episode is still running
    assert env.recorded_episodes == 1
    second_id = env.staging_id
    added = env.add_to_dataset(first)
    assert added is first and first.total_episodes == 4  # Minari semantics: updated in place
    assert [e.seed for e in first][3] == 9 and len(first[3]) == 2 and bool(first[3].truncations[-1])
    assert load_dataset("count/main-v0", tmp_path).total_episodes == 4
    assert second_id not in list_datasets(tmp_path)
    other = EpisodeStore.create("other/space-v0", spaces.Discrete(3), spaces.Discrete(2), root=tmp_path)
    other.close()
    run_random(env, 1)
    with pytest.raises(SpaceMismatchError, match="observation space"):
        env.add_to_dataset(load_dataset("other/space-v0", tmp_path))
    run_random(env, 1)  # recording goes on after the refused call; nothing was lost
    over = env.create_dataset("count/main-v0", overwrite=True)
    assert over.total_episodes == 2
    env.close()
    with pytest.raises(CollectorStateError, match="closed"):
        env.reset()


def test_close_keeps_unsaved_episodes_and_drops_empty_staging(tmp_path: Path) -> None:
    env = DataCollector(CountingEnv(episode_length=2), root=tmp_path)
    run_random(env, 3)
    env.reset()
    env.step(0)  # unfinished: dropped on close, as in Minari
    staging = env.staging_id
    with pytest.warns(UserWarning, match="kept in dataset"):
        env.close()
    assert staging is not None and load_dataset(staging, tmp_path).total_episodes == 3
    empty = DataCollector(CountingEnv(episode_length=2), root=tmp_path / "e")
    empty.reset()
    empty.step(0)
    empty.close()
    assert list_datasets(tmp_path / "e") == {}


def test_a_data_collector_dropped_without_close_keeps_its_episodes_and_leaves_no_empty_staging(
    tmp_path: Path,
) -> None:
    """Garbage-collected without close(): as close() does, the finished episodes stay in the staging dataset
    (said by a warning naming it) and a staging dataset holding none is deleted, so `list` shows no litter."""
    import gc
    import weakref

    kept = DataCollector(CountingEnv(episode_length=2), root=tmp_path / "kept")
    run_random(kept, 3)
    kept.reset()
    kept.step(0)  # unfinished: dropped, as close() drops it
    staging, ref = kept.staging_id, weakref.ref(kept)
    with pytest.warns(UserWarning, match="garbage-collected without close.. with 3 recorded episodes .*kept in dataset"):
        del kept
        gc.collect()
    assert ref() is None and staging is not None
    assert list(list_datasets(tmp_path / "kept")) == [staging]
    assert load_dataset(staging, tmp_path / "kept").total_episodes == 3
    empty = DataCollector(CountingEnv(episode_length=2), root=tmp_path / "empty")
    empty.reset()
    empty.step(0)
    assert empty.staging_id in list_datasets(tmp_path / "empty")
    del empty
    gc.collect()
    assert list_datasets(tmp_path / "empty") == {}


def test_ref_scores_and_eval_env_like_minari(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path)
    run_random(env, 1)
    with pytest.raises(ValueError, match="not both"):
        env.create_dataset("cart/score-v0", expert_policy=lambda obs: 0, ref_max_score=1.0)
    ds = env.create_dataset("cart/score-v0", eval_env="CartPole-v0", expert_policy=lambda obs: int(obs[2] > 0),
                            num_episodes_average_score=3)
    meta = ds.metadata
    assert meta["num_episodes_average_score"] == 3
    assert meta["ref_max_score"] > meta["ref_min_score"] > 0
    assert ds.eval_env_spec is not None and ds.eval_env_spec.id == "CartPole-v0"
    env.close()


def test_replay_of_recorded_episodes_from_their_seeds(tmp_path: Path) -> None:
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path, seed=3)
    run_random(env, 6)
    ds = env.create_dataset("cart/replay-v0")
    fresh = ds.recover_environment()
    for ep in ds:
        assert_replays(fresh, ep, options=ep.options)
    env.close()


def test_real_minari_loads_a_recorded_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import minari
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = DataCollector(gym.make("CartPole-v1"), step_data_callback=VcollectExtraCallback, root=tmp_path / "vc")
    run_random(env, 4)
    ds = env.create_dataset("cart/rec-v0", author="Ada")
    env.close()
    export_minari(ds, "cart/rec-v0")
    theirs = minari.load_dataset("cart/rec-v0")
    metas = list(theirs.storage.get_episode_metadata(range(4)))
    for ours, got, meta in zip(ds, theirs, metas):
        np.testing.assert_array_equal(ours.observations, got.observations)
        np.testing.assert_array_equal(ours.actions, got.actions)
        np.testing.assert_array_equal(ours.rewards, got.rewards)
        assert meta["seed"] == ours.seed and meta["rewards_sum"] == ours.metadata["rewards_sum"]
    assert theirs.storage.metadata["author"] == {"Ada"}


KILLED_RECORDER = textwrap.dedent(
    """
    import sys
    import gymnasium as gym
    from vcollect.minari.recorder import DataCollector
    env = DataCollector(gym.make("CartPole-v1"), root=sys.argv[1], flush_every=5, seed=0)
    env.action_space.seed(0)
    env.reset()
    print("staging", env.staging_id, flush=True)
    last = 0
    while True:
        _, _, te, tr, _ = env.step(env.action_space.sample())
        if te or tr:
            env.reset()
            if env.committed_episodes != last:
                last = env.committed_episodes
                print("committed", last, flush=True)
    """
)


def test_sigkill_keeps_every_flushed_episode(tmp_path: Path) -> None:
    env_vars = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RECORDER, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_vars)
    committed = 0
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[:1] == ["staging"], proc.stderr.read() if proc.stderr else ""
        staging_id = first[1]
        while committed < 20:
            line = proc.stdout.readline().split()
            assert line and line[0] == "committed", proc.stderr.read() if proc.stderr else ""
            committed = int(line[1])
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ds = load_dataset(staging_id, tmp_path)
    assert ds.total_episodes >= committed and ds.total_episodes % 5 == 0
    fresh = gym.make("CartPole-v1")
    for ep in ds:  # every kept episode is whole and correct: replay it
        assert_replays(fresh, ep)
