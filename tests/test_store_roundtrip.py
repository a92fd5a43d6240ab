"""EpisodeStore -> HDF5 shards -> load_dataset round trips, ids, roots, errors and callbacks."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
from gymnasium import spaces

from tests.replay import assert_replays
from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    InfoStructureError,
    InvalidDatasetIdError,
    SpaceMismatchError,
)
from vcollect.minari.callbacks import EpisodeMetadataCallback, StepDataCallback
from vcollect.spaces import flatten_batch, leaves, unflatten_batch
from vcollect.store import (
    EpisodeStore,
    delete_dataset,
    list_datasets,
    load_dataset,
    parse_dataset_id,
    resolve_root,
)

BOX = spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32)
DISCRETE = spaces.Discrete(3, start=-1)
DICT = spaces.Dict(
    {
        "pos": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float64),
        "inner": spaces.Dict({"k": spaces.Discrete(4), "img": spaces.Box(0, 255, shape=(2, 2), dtype=np.uint8)}),
    }
)
TUPLE = spaces.Tuple(
    (spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32), spaces.MultiBinary(3), spaces.MultiDiscrete([3, 400]))
)


def sample_batch(space: gym.Space, rows: int, rng: np.random.Generator):
    """A nested batch of ``rows`` values of ``space`` (valid values, batched gymnasium form)."""
    space.seed(int(rng.integers(2**31)))
    per_value = [flatten_batch(space, space.sample()) for _ in range(rows)]
    arrays = [
        np.stack([np.asarray(v[i], dtype=leaf.dtype) for v in per_value]) if rows else np.zeros((0, *leaf.shape), leaf.dtype)
        for i, leaf in enumerate(leaves(space))
    ]
    return unflatten_batch(space, arrays)


def assert_nested_equal(a, b) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            assert_nested_equal(a[k], b[k])
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_nested_equal(x, y)
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def make_episode(obs_space, act_space, steps: int, rng: np.random.Generator) -> dict:
    return {
        "observations": sample_batch(obs_space, steps + 1, rng),
        "actions": sample_batch(act_space, steps, rng),
        "rewards": rng.standard_normal(steps),
        "terminations": np.arange(steps) == steps - 1,
        "truncations": np.zeros(steps, dtype=bool),
    }


@pytest.mark.parametrize(
    ("obs_space", "act_space"),
    [(BOX, DISCRETE), (DICT, BOX), (TUPLE, TUPLE), (DISCRETE, DICT)],
    ids=["box-discrete", "dict-box", "tuple-tuple", "discrete-dict"],
)
def test_round_trip_spaces_infos_extras(tmp_path: Path, obs_space, act_space) -> None:
    rng = np.random.default_rng(0)
    written = []
    with EpisodeStore.create("ns/rt-v0", obs_space, act_space, root=tmp_path, shard_steps=7) as store:
        for i, steps in enumerate([1, 5, 3, 9, 2]):
            ep = make_episode(obs_space, act_space, steps, rng)
            ep["infos"] = {
                "a": rng.integers(0, 10, size=steps + 1),
                "b": {"c": rng.standard_normal((steps, 2)), "flag": rng.random(steps) < 0.5},
            }
            ep["extras"] = {"name": np.array([f"s{j}é" for j in range(steps + 1)]), "v": np.arange(steps, dtype=np.int16)}
            ep["metadata"] = {"rewards_sum": float(ep["rewards"].sum()), "tag": f"ep{i}", "pair": np.array([i, -i])}
            ep["options"] = {"level": i} if i % 2 else None
            ep["seed"] = None if i == 2 else 100 + i
            store.write_episode(**ep, env_id=i % 3)
            written.append(copy.deepcopy(ep))
            # Inputs are copied on write (callers pass ring-buffer views): scribbling on them changes nothing.
            for leaf in flatten_batch(obs_space, ep["observations"]):
                leaf[...] = 0
    assert len(store.shards_written) >= 2
    ds = load_dataset("ns/rt-v0", root=tmp_path)
    assert ds.observation_space == obs_space and ds.action_space == act_space
    assert ds.total_episodes == 5 and len(ds) == 5
    assert ds.total_steps == 20
    np.testing.assert_array_equal(ds.episode_indices, np.arange(5))
    for i, (got, ep) in enumerate(zip(ds, written)):
        assert got.id == i and len(got) == len(ep["rewards"])
        assert_nested_equal(got.observations, ep["observations"])
        assert_nested_equal(got.actions, ep["actions"])
        for space, value in ((obs_space, got.observations), (act_space, got.actions)):
            assert [a.dtype for a in flatten_batch(space, value)] == [leaf.dtype for leaf in leaves(space)]
        np.testing.assert_array_equal(got.rewards, ep["rewards"])
        assert got.rewards.dtype == np.float64
        np.testing.assert_array_equal(got.terminations, ep["terminations"])
        np.testing.assert_array_equal(got.truncations, ep["truncations"])
        assert_nested_equal(got.infos, ep["infos"])
        assert_nested_equal(got.extras, ep["extras"])
        assert got.seed == ep["seed"] and got.env_id == i % 3
        assert got.options == ep["options"]
        assert got.metadata["tag"] == f"ep{i}" and got.metadata["rewards_sum"] == ep["metadata"]["rewards_sum"]
        np.testing.assert_array_equal(got.metadata["pair"], [i, -i])
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds[0].seed = 3  # type: ignore[misc]


def test_discrete_actions_stored_small_rewards_float32_when_exact(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    with EpisodeStore.create("cp/small-v0", env.observation_space, env.action_space, root=tmp_path) as store:
        store.write_episode(
            np.zeros((4, 4), np.float32), np.array([0, 1, 1]), np.ones(3), np.zeros(3, bool), np.zeros(3, bool),
            seed=1, env_id=0,
        )
        store.flush()
        store.write_episode(
            np.zeros((3, 4), np.float32), np.array([1, 0]), np.array([0.1, 1e300]), np.zeros(2, bool),
            np.ones(2, bool), seed=2, env_id=0,
        )
    first, second = store.shards_written
    with h5py.File(first) as f:
        assert f["actions"].dtype == np.int8
        assert f["rewards"].dtype == np.float32
        assert f["observations"].chunks is None  # contiguous: no chunk index, memory-mappable
    with h5py.File(second) as f:
        assert f["rewards"].dtype == np.float64  # 0.1 is not exact in float32
    ds = load_dataset("cp/small-v0", root=tmp_path)
    assert ds[0].actions.dtype == np.int64 and ds[0].actions.tolist() == [0, 1, 1]
    assert ds[1].rewards.tolist() == [0.1, 1e300]
    batch = ds.sample_steps(16)
    assert batch["actions"].dtype == np.int64 and batch["rewards"].dtype == np.float64


def test_out_of_range_discrete_values_are_kept_losslessly(tmp_path: Path) -> None:
    with EpisodeStore.create("cp/wide-v0", BOX, spaces.Discrete(2), root=tmp_path) as store:
        store.write_episode(
            np.zeros((3, 3), np.float32), np.array([1000, -5]), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool),
            seed=0, env_id=0,
        )
    assert load_dataset("cp/wide-v0", root=tmp_path)[0].actions.tolist() == [1000, -5]


def test_compressed_shards_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    eps = [make_episode(DICT, DISCRETE, n, rng) for n in (3, 4)]
    with EpisodeStore.create("z/gz-v0", DICT, DISCRETE, root=tmp_path, compression="gzip") as store:
        for i, ep in enumerate(eps):
            store.write_episode(**ep, seed=i, env_id=0)
    with h5py.File(store.shards_written[0]) as f:
        assert f["observations/pos"].compression == "gzip"
    ds = load_dataset("z/gz-v0", root=tmp_path)
    for got, ep in zip(ds, eps):
        assert_nested_equal(got.observations, ep["observations"])
    assert ds.sample_steps(8)["observations"]["inner"]["img"].shape == (8, 2, 2)


def test_dataset_ids_and_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_dataset_id("cartpole/random-v0") == ("cartpole", "random", 0)
    assert parse_dataset_id("a/b/c-d_e-v12") == ("a/b", "c-d_e", 12)
    assert parse_dataset_id("plain-v3") == (None, "plain", 3)
    for bad in ["noversion", "ns/name-v", "/x-v0", "a//b-v0", "../x-v0", "ns/../x-v0", "a b-v0", "ns/x-vA", "", "x-v0/"]:
        with pytest.raises(InvalidDatasetIdError, match="namespace/name-vN"):
            parse_dataset_id(bad)
        with pytest.raises(InvalidDatasetIdError):
            EpisodeStore.create(bad, BOX, DISCRETE, root=tmp_path)
        with pytest.raises(InvalidDatasetIdError):
            load_dataset(bad, root=tmp_path)
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path / "env-root"))
    assert resolve_root() == tmp_path / "env-root"
    assert resolve_root(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("VCOLLECT_DATASETS_PATH")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_root() == tmp_path / "home" / ".vcollect" / "datasets"
    # The environment variable is really used by create/load.
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path / "env-root"))
    EpisodeStore.create("e/x-v0", BOX, DISCRETE).close()
    assert (tmp_path / "env-root" / "e" / "x-v0" / "dataset.json").is_file()
    assert load_dataset("e/x-v0").total_episodes == 0


def test_missing_dataset_names_id_and_root(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("nope/missing-v0", root=tmp_path)
    assert "nope/missing-v0" in str(info.value) and str(tmp_path) in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="nope/missing-v0"):
        EpisodeStore.open("nope/missing-v0", root=tmp_path)
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path)):
        delete_dataset("nope/missing-v0", root=tmp_path)


def test_create_existing_open_append_and_space_mismatch(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    with EpisodeStore.create("ns/x-v0", BOX, DISCRETE, root=tmp_path) as store:
        store.write_episode(**make_episode(BOX, DISCRETE, 2, rng), seed=0, env_id=0)
    with pytest.raises(DatasetExistsError, match="ns/x-v0"):
        EpisodeStore.create("ns/x-v0", BOX, DISCRETE, root=tmp_path)
    with pytest.raises(SpaceMismatchError, match="observation"):
        EpisodeStore.open("ns/x-v0", root=tmp_path, observation_space=DICT)
    with pytest.raises(SpaceMismatchError, match="action"):
        EpisodeStore.open("ns/x-v0", root=tmp_path, action_space=spaces.Discrete(4))
    with EpisodeStore.open("ns/x-v0", root=tmp_path, observation_space=BOX) as appender:
        assert appender.observation_space == BOX and appender.action_space == DISCRETE
        appender.write_episode(**make_episode(BOX, DISCRETE, 3, rng), seed=1, env_id=5)
    ds = load_dataset("ns/x-v0", root=tmp_path)
    assert [len(e) for e in ds] == [2, 3] and [e.seed for e in ds] == [0, 1]
    with EpisodeStore.create("ns/x-v0", DICT, BOX, root=tmp_path, overwrite=True) as store:
        pass
    ds = load_dataset("ns/x-v0", root=tmp_path)
    assert ds.total_episodes == 0 and ds.observation_space == DICT


def test_write_validation_leaves_pending_state_untouched(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = EpisodeStore.create("ns/v-v0", DICT, DISCRETE, root=tmp_path)
    good = make_episode(DICT, DISCRETE, 3, rng)
    store.write_episode(**good, seed=0, env_id=0, infos={"x": np.arange(4)}, metadata={"m": 1.0})
    bad_obs = make_episode(DICT, DISCRETE, 3, rng)
    bad_obs["observations"]["pos"] = bad_obs["observations"]["pos"][:3]
    with pytest.raises(ValueError, match="pos"):
        store.write_episode(**bad_obs, seed=1, env_id=0, infos={"x": np.arange(4)}, metadata={"m": 1.0})
    with pytest.raises(ValueError, match="actions"):
        store.write_episode(**{**good, "actions": np.zeros(3, np.float32)}, seed=1, env_id=0,
                            infos={"x": np.arange(4)}, metadata={"m": 1.0})
    with pytest.raises(ValueError, match="terminations"):
        store.write_episode(**{**good, "terminations": np.zeros(2, bool)}, seed=1, env_id=0)
    with pytest.raises(InfoStructureError, match="'y'"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.arange(4), "y": np.arange(4)}, metadata={"m": 1.0})
    with pytest.raises(InfoStructureError, match="'x'"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.zeros((4, 2))}, metadata={"m": 1.0})
    with pytest.raises(InfoStructureError, match="'x'"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.arange(7)}, metadata={"m": 1.0})
    with pytest.raises(InfoStructureError, match="extras"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.arange(4)}, extras={"e": np.arange(3)},
                            metadata={"m": 1.0})
    with pytest.raises(ValueError, match="metadata"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.arange(4)}, metadata={"other": 1.0})
    with pytest.raises(ValueError, match="JSON"):
        store.write_episode(**good, seed=1, env_id=0, infos={"x": np.arange(4)}, metadata={"m": 1.0},
                            options={"f": object()})
    assert store.pending_episodes == 1 and store.pending_steps == 3
    store.close()
    assert store.closed and store.committed_episodes == 1
    with pytest.raises(DatasetError, match="closed"):
        store.write_episode(**good, seed=1, env_id=0)
    store.close()  # idempotent
    store.flush()  # nothing pending after close: a no-op (a Collector flushes the store on its own close)
    assert load_dataset("ns/v-v0", root=tmp_path).total_episodes == 1


def test_rejected_first_episode_does_not_fix_the_structure(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    ep = make_episode(BOX, DISCRETE, 3, rng)
    with EpisodeStore.create("ns/first-v0", BOX, DISCRETE, root=tmp_path) as store:
        with pytest.raises(ValueError, match="JSON"):
            store.write_episode(**ep, seed=0, env_id=0, infos={"a": np.arange(4)}, metadata={"m": 1},
                                options={"bad": object()})
        store.write_episode(**ep, seed=0, env_id=0, infos={"b": np.arange(3)}, metadata={"n": "x"})
    got = load_dataset("ns/first-v0", root=tmp_path)[0]
    assert list(got.infos) == ["b"] and got.metadata == {"n": "x"}


def test_commit_on_shard_steps_flush_close_and_exception_exit(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    store = EpisodeStore.create("ns/c-v0", BOX, DISCRETE, root=tmp_path, shard_steps=10)
    for _ in range(3):
        store.write_episode(**make_episode(BOX, DISCRETE, 4, rng), seed=0, env_id=0)
    assert len(store.shards_written) == 1 and store.pending_episodes == 0  # 12 >= 10 steps committed
    store.write_episode(**make_episode(BOX, DISCRETE, 4, rng), seed=0, env_id=0)
    assert store.pending_steps == 4
    store.flush()
    assert len(store.shards_written) == 2 and store.pending_steps == 0
    store.flush()  # nothing pending: no empty shard
    assert len(store.shards_written) == 2
    with pytest.raises(RuntimeError, match="boom"), store:
        store.write_episode(**make_episode(BOX, DISCRETE, 2, rng), seed=0, env_id=0)
        raise RuntimeError("boom")
    assert len(store.shards_written) == 3
    names = sorted(p.name for p in (store.path / "shards").iterdir())
    assert names == [p.name for p in store.shards_written]  # commit-time first: sorted == commit order
    assert all(store.writer_name in n for n in names)
    assert load_dataset("ns/c-v0", root=tmp_path).total_steps == 18


def test_metadata_env_spec_recover_list_delete(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    eval_env = gym.make("CartPole-v1", max_episode_steps=50)
    with EpisodeStore.create(
        "cart/meta-v1", env.observation_space, env.action_space, env_spec=env.spec, eval_env_spec=eval_env.spec,
        root=tmp_path, metadata={"author": "me", "algorithm_name": "random"},
    ) as store:
        store.write_episode(np.zeros((3, 4), np.float32), np.array([0, 1]), np.ones(2), np.array([False, True]),
                            np.zeros(2, bool), seed=7, env_id=1)
        store.update_metadata({"description": "two steps", "author": "you"})
    ds = load_dataset("cart/meta-v1", root=tmp_path)
    assert ds.metadata["author"] == "you" and ds.metadata["description"] == "two steps"
    assert ds.metadata["algorithm_name"] == "random" and ds.metadata["dataset_id"] == "cart/meta-v1"
    assert ds.env_spec is not None and ds.env_spec.id == "CartPole-v1"
    recovered = ds.recover_environment()
    assert recovered.spec is not None and recovered.spec.id == "CartPole-v1"
    assert recovered.spec.max_episode_steps == 500
    assert ds.recover_environment(eval_env=True).spec.max_episode_steps == 50
    EpisodeStore.create("cart/other-v0", BOX, DISCRETE, root=tmp_path).close()
    with pytest.raises(ValueError, match="env_spec"):
        load_dataset("cart/other-v0", root=tmp_path).recover_environment()
    listing = list_datasets(tmp_path)
    assert list(listing) == ["cart/meta-v1", "cart/other-v0"]
    assert listing["cart/meta-v1"]["total_episodes"] == 1 and listing["cart/meta-v1"]["total_steps"] == 2
    assert listing["cart/meta-v1"]["author"] == "you" and listing["cart/meta-v1"]["temporary_files"] == []
    delete_dataset("cart/meta-v1", root=tmp_path)
    assert list(list_datasets(tmp_path)) == ["cart/other-v0"]
    delete_dataset("cart/other-v0", root=tmp_path)
    assert not (tmp_path / "cart").exists()  # empty namespace directory removed too
    assert list_datasets(tmp_path / "does-not-exist") == {}


def test_step_data_callback_minari_signature_and_extras() -> None:
    class Extra(StepDataCallback):
        def __call__(self, env, **kwargs):
            step_data = super().__call__(env, **kwargs)
            step_data["state"] = {"pose": np.array([1.0, 2.0])}
            return step_data

    env = gym.make("CartPole-v1")
    obs, info = env.reset(seed=0)
    reset_data = StepDataCallback()(env=env, obs=obs, info=info)
    assert reset_data["observation"] is obs and reset_data["action"] is None and reset_data["reward"] is None
    assert set(reset_data) == {"observation", "action", "reward", "terminated", "truncated", "info"}
    nobs, rew, term, trunc, ninfo = env.step(1)
    data = Extra()(env=env, obs=nobs, info=ninfo, action=1, rew=rew, terminated=term, truncated=trunc)
    assert data["action"] == 1 and data["reward"] == rew and data["terminated"] is term
    np.testing.assert_array_equal(data["state"]["pose"], [1.0, 2.0])
    meta = EpisodeMetadataCallback()({"rewards": np.array([1.0, 3.0])})
    assert meta == {"rewards_sum": 4.0, "rewards_mean": 2.0, "rewards_std": 1.0, "rewards_max": 3.0, "rewards_min": 1.0}


def test_move_to_renames_a_staging_dataset_and_keeps_writing(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    eps = [make_episode(BOX, DISCRETE, n, rng) for n in (2, 3, 4)]
    store = EpisodeStore.create("staging/tmp-v0", BOX, DISCRETE, root=tmp_path / "staging")
    store.write_episode(**eps[0], seed=0, env_id=0)
    store.flush()
    store.write_episode(**eps[1], seed=1, env_id=0)  # pending: committed by move_to
    EpisodeStore.create("final/rec-v0", BOX, DISCRETE, root=tmp_path).close()
    with pytest.raises(DatasetExistsError, match="final/rec-v0"):
        store.move_to("final/rec-v0", root=tmp_path)
    env = gym.make("CartPole-v1")
    new_path = store.move_to("final/rec-v0", root=tmp_path, overwrite=True)
    assert new_path == tmp_path / "final" / "rec-v0" == store.path and store.dataset_id == "final/rec-v0"
    assert all(p.parent == new_path / "shards" and p.is_file() for p in store.shards_written)
    store.write_episode(**eps[2], seed=2, env_id=0)
    store.update_metadata({"author": "a"}, env_spec=env.spec)
    store.close()
    assert "staging/tmp-v0" not in list_datasets(tmp_path / "staging")
    ds = load_dataset("final/rec-v0", root=tmp_path)
    assert [e.seed for e in ds] == [0, 1, 2] and ds.metadata["author"] == "a" and ds.metadata["dataset_id"] == "final/rec-v0"
    assert ds.env_spec is not None and ds.env_spec.id == "CartPole-v1"
    for got, ep in zip(ds, eps):
        np.testing.assert_array_equal(got.observations, ep["observations"])


def test_replay_stored_episodes_reproduces_them_exactly(tmp_path: Path) -> None:
    """Stored seed + stored actions on a fresh env give back the stored observations, rewards and flags."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(7)
    with EpisodeStore.create("cart/replay-v0", env.observation_space, env.action_space, env_spec=env.spec,
                             root=tmp_path, shard_steps=50) as store:
        for seed in rng.integers(0, 2**31, size=6).tolist():
            obs, _ = env.reset(seed=seed)
            rows, acts, rews, terms, truncs = [obs], [], [], [], []
            while not (terms and (terms[-1] or truncs[-1])):
                a = int(rng.integers(2))
                obs, r, te, tr, _ = env.step(a)
                rows.append(obs)
                acts.append(a)
                rews.append(r)
                terms.append(te)
                truncs.append(tr)
            store.write_episode(np.array(rows), np.array(acts), np.array(rews), np.array(terms), np.array(truncs),
                                seed=seed, env_id=0)
    ds = load_dataset("cart/replay-v0", root=tmp_path)
    fresh = ds.recover_environment()
    for ep in ds:
        assert_replays(fresh, ep)


def test_write_episodes_stores_what_write_episode_stores(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lengths = [3, 1, 4, 2]
    episodes = [
        dict(observations=sample_batch(DICT, t + 1, rng), actions=sample_batch(DISCRETE, t, rng),
             rewards=rng.normal(size=t), terminations=np.arange(t) == t - 1, truncations=np.zeros(t, bool))
        for t in lengths
    ]
    seeds, env_ids, options = [5, None, 2**64 - 1, 7], [0, 1, 2, 0], [None, {"a": 1}, None, {"b": [2]}]
    with EpisodeStore.create("ns/one-v0", DICT, DISCRETE, root=tmp_path) as store:
        for ep, seed, env_id, opts in zip(episodes, seeds, env_ids, options):
            store.write_episode(**ep, seed=seed, env_id=env_id, options=opts)
    with EpisodeStore.create("ns/batch-v0", DICT, DISCRETE, root=tmp_path) as store:
        def cat(key: str, space: gym.Space) -> object:
            parts = [flatten_batch(space, ep[key]) for ep in episodes]
            return unflatten_batch(space, [np.concatenate(leaf) for leaf in zip(*parts)])

        store.write_episodes(
            cat("observations", DICT), cat("actions", DISCRETE),
            np.concatenate([ep["rewards"] for ep in episodes]),
            np.concatenate([ep["terminations"] for ep in episodes]),
            np.concatenate([ep["truncations"] for ep in episodes]),
            lengths, seeds=seeds, env_ids=env_ids, options=options,
        )
        with pytest.raises(ValueError, match="one each per episode"):
            store.write_episodes(cat("observations", DICT), cat("actions", DISCRETE), np.zeros(10),
                                 np.zeros(10, bool), np.zeros(10, bool), lengths, seeds=[1], env_ids=env_ids)
        with pytest.raises(ValueError, match="sum of lengths"):
            store.write_episodes(cat("observations", DICT), cat("actions", DISCRETE), np.zeros(9),
                                 np.zeros(9, bool), np.zeros(9, bool), lengths, seeds=seeds, env_ids=env_ids)
        assert store.pending_episodes == 4  # the rejected calls left nothing behind
    one, batch = load_dataset("ns/one-v0", root=tmp_path), load_dataset("ns/batch-v0", root=tmp_path)
    assert batch.total_episodes == 4 and batch.total_steps == sum(lengths)
    for a, b in zip(one, batch):
        assert_nested_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        assert (a.seed, a.env_id, a.options) == (b.seed, b.env_id, b.options)
    with EpisodeStore.create("ns/infos-v0", BOX, DISCRETE, root=tmp_path) as store:
        store.write_episode(np.zeros((2, 3), np.float32), np.zeros(1, np.int64), [1.0], [True], [False],
                            seed=0, env_id=0, infos={"x": np.zeros(1)})
        with pytest.raises(InfoStructureError, match="write each with write_episode"):
            store.write_episodes(np.zeros((2, 3), np.float32), np.zeros(1, np.int64), [1.0], [True], [False],
                                 [1], seeds=[0], env_ids=[0])


def test_write_episodes_with_negative_and_64_bit_seeds_splits_shards(tmp_path: Path) -> None:
    with EpisodeStore.create("ns/seeds-v0", BOX, DISCRETE, root=tmp_path) as store:
        store.write_episodes(np.zeros((4, 3), np.float32), np.zeros(2, np.int64), [1.0, 2.0], [True, True],
                             [False, False], [1, 1], seeds=[-3, 2**64 - 1], env_ids=[0, 1])
    ds = load_dataset("ns/seeds-v0", root=tmp_path)
    assert [e.seed for e in ds] == [-3, 2**64 - 1] and [float(e.rewards[0]) for e in ds] == [1.0, 2.0]


def test_episode_store_is_an_episode_sink(tmp_path: Path) -> None:
    from vcollect.store.sink import EpisodeSink, check_sink

    with EpisodeStore.create("ns/sink-v0", DICT, DISCRETE, root=tmp_path) as store:
        assert isinstance(store, EpisodeSink)
        assert check_sink(store, DICT, DISCRETE) is store
        with pytest.raises(ValueError, match="observation space"):
            check_sink(store, BOX, DISCRETE)


def _concatenated(episodes: list[dict], key: str, space: gym.Space) -> object:
    parts = [flatten_batch(space, ep[key]) for ep in episodes]
    return unflatten_batch(space, [np.concatenate(leaf) for leaf in zip(*parts)])


def test_write_episodes_with_infos_stores_what_write_episode_stores(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    lengths = [2, 3, 1]
    episodes = [make_episode(DICT, DISCRETE, t, rng) for t in lengths]
    infos = [  # T+1 rows ("obs"), T rows ("step") and a nested key, as the Collector's stacked infos are
        {"x": rng.normal(size=t + 1), "step": np.arange(t), "deep": {"tag": np.array(["a"] * (t + 1))}}
        for t in lengths
    ]
    seeds, env_ids, options = [1, None, 3], [0, 2, 1], [{"o": 1}, None, None]
    with EpisodeStore.create("ns/each-v0", DICT, DISCRETE, root=tmp_path) as store:
        for ep, seed, env_id, opts, info in zip(episodes, seeds, env_ids, options, infos):
            store.write_episode(**ep, seed=seed, env_id=env_id, options=opts, infos=info)
    with EpisodeStore.create("ns/batch-infos-v0", DICT, DISCRETE, root=tmp_path, env_id_offset=0) as store:
        store.write_episodes(
            _concatenated(episodes, "observations", DICT), _concatenated(episodes, "actions", DISCRETE),
            np.concatenate([ep["rewards"] for ep in episodes]),
            np.concatenate([ep["terminations"] for ep in episodes]),
            np.concatenate([ep["truncations"] for ep in episodes]),
            lengths, seeds=seeds, env_ids=env_ids, options=options, infos=infos,
        )
        with pytest.raises(ValueError, match="1 infos: one each per episode"):
            store.write_episodes(
                _concatenated(episodes, "observations", DICT), _concatenated(episodes, "actions", DISCRETE),
                np.zeros(6), np.zeros(6, bool), np.zeros(6, bool), lengths, seeds=seeds, env_ids=env_ids,
                infos=infos[:1],
            )
        # a later batch whose info tree changed structure is refused as write_episode refuses it
        with pytest.raises(InfoStructureError, match="changed structure"):
            store.write_episodes(
                episodes[0]["observations"], episodes[0]["actions"], episodes[0]["rewards"],
                episodes[0]["terminations"], episodes[0]["truncations"], [2], seeds=[0], env_ids=[0],
                infos=[{"other": np.zeros(2)}],
            )
        assert store.pending_episodes == 3
    one, batch = load_dataset("ns/each-v0", root=tmp_path), load_dataset("ns/batch-infos-v0", root=tmp_path)
    assert batch.total_episodes == 3
    for a, b in zip(one, batch, strict=True):
        assert_nested_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        assert_nested_equal(a.infos, b.infos)
        assert (a.seed, a.env_id, a.options) == (b.seed, b.env_id, b.options)
    assert batch[1].infos["deep"]["tag"].tolist() == ["a"] * 4 and batch[1].infos["step"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("batched", [False, True], ids=["write_episode", "write_episodes"])
def test_env_id_offset_shifts_every_stored_env_id(tmp_path: Path, batched: bool) -> None:
    obs, act = np.zeros((3, 3), np.float32), np.zeros(2, np.int64)
    EpisodeStore.create("ns/offset-v0", BOX, DISCRETE, root=tmp_path).close()
    with EpisodeStore.create("ns/offset-v0", BOX, DISCRETE, root=tmp_path, overwrite=True,
                             env_id_offset=10) as created:
        assert created.env_id_offset == 10
        created.write_episode(obs, act, [0.0, 1.0], [False, True], [False, False], seed=None, env_id=1)
    with EpisodeStore.open("ns/offset-v0", root=tmp_path, env_id_offset=4) as store:
        if batched:
            store.write_episodes(np.zeros((6, 3), np.float32), np.zeros(4, np.int64), np.zeros(4),
                                 [False, True, False, True], np.zeros(4, bool), [2, 2], seeds=[None, 5],
                                 env_ids=[0, 3])
        else:
            for env_id in (0, 3):
                store.write_episode(obs, act, [0.0, 1.0], [False, True], [False, False], seed=None, env_id=env_id)
    with h5py.File(store.shards_written[0], "r") as f:
        assert f["episodes/env_id"][()].tolist() == [4, 7]
    assert [ep.env_id for ep in load_dataset("ns/offset-v0", root=tmp_path)] == [11, 4, 7]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="env_id_offset must be an integer >= 0"):
            EpisodeStore.open("ns/offset-v0", root=tmp_path, env_id_offset=bad)  # type: ignore[arg-type]
