"""export_minari / import_minari against the real ``minari`` package (0.5.x) on real HDF5 files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import minari  # noqa: E402  (dev extra: the real package must read our exports)
import numpy as np
import pytest
from gymnasium import spaces

from tests.envs import DictObsEnv
from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    InfoStructureError,
    InvalidDatasetIdError,
)
from vcollect.minari import export_minari, import_minari, parse_minari_dataset_id, resolve_minari_root
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset


@pytest.fixture()
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the real minari (and our default rule) at a fresh directory."""
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def record(store: EpisodeStore, env: gym.Env, n_episodes: int, rng: np.random.Generator, **per_episode: Any) -> None:
    """Step ``env`` with random actions and write ``n_episodes`` whole episodes with their seeds."""
    for i in range(n_episodes):
        seed = int(rng.integers(0, 2**63))
        obs, _ = env.reset(seed=seed)
        rows, acts, rews, terms, truncs = [obs], [], [], [], []
        while not (terms and (terms[-1] or truncs[-1])):
            a = env.action_space.sample()
            obs, r, te, tr, _ = env.step(a)
            rows.append(obs)
            acts.append(a)
            rews.append(r)
            terms.append(te)
            truncs.append(tr)
        if isinstance(env.observation_space, spaces.Dict):
            observations: Any = stack_nested(rows)
        else:
            observations = np.array(rows)
        store.write_episode(
            observations, np.array(acts), np.array(rews), np.array(terms), np.array(truncs), seed=seed, env_id=0,
            metadata={"rewards_sum": float(np.sum(rews)), "tag": f"ep{i}"},
            options={"level": i, "nested": {"flag": bool(i % 2)}} if i % 3 == 1 else None,
            infos={"step": np.arange(len(acts) + 1), "name": np.array([f"r{t}" for t in range(len(acts) + 1)])},
            extras={"ext": {"double": 2.0 * np.arange(len(acts))}},
        )


def stack_nested(rows: list[Any]) -> Any:
    first = rows[0]
    if isinstance(first, dict):
        return {k: stack_nested([r[k] for r in rows]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack_nested([r[i] for r in rows]) for i in range(len(first)))
    return np.array(rows)


def assert_nested_equal(ours: Any, theirs: Any) -> None:
    if isinstance(ours, dict):
        assert isinstance(theirs, dict) and set(ours) == set(theirs)
        for key in ours:
            assert_nested_equal(ours[key], theirs[key])
    elif isinstance(ours, tuple):
        assert isinstance(theirs, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_nested_equal(a, b)
    else:
        assert isinstance(theirs, np.ndarray)
        if ours.dtype.kind == "U" and theirs.dtype == object:  # Minari reads its UTF-8 strings back as bytes
            theirs = np.array([v.decode("utf-8") for v in theirs.tolist()])
        assert theirs.dtype == ours.dtype and theirs.shape == ours.shape
        np.testing.assert_array_equal(theirs, ours)


def cartpole_dataset(root: Path, n: int = 12) -> Any:
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    with EpisodeStore.create(
        "cart/random-v0", env.observation_space, env.action_space, env_spec=env.spec, root=root,
        metadata={"author": "Ada", "author_email": "ada@example.org", "algorithm_name": "random",
                  "description": "random CartPole", "code_permalink": "https://example.org/code", "custom": [1, 2]},
        shard_steps=100,
    ) as store:
        record(store, env, n, np.random.default_rng(1))
    return load_dataset("cart/random-v0", root)


def test_real_minari_loads_cartpole_export(tmp_path: Path, minari_root: Path) -> None:
    ds = cartpole_dataset(tmp_path / "vc")
    path = export_minari(ds, "cart/random-v0")
    assert path == minari_root / "cart" / "random-v0"
    assert (path / "data" / "main_data.hdf5").is_file() and (minari_root / "cart" / "namespace_metadata.json").is_file()

    theirs = minari.load_dataset("cart/random-v0")
    assert theirs.total_episodes == ds.total_episodes and theirs.total_steps == ds.total_steps
    assert theirs.observation_space == ds.observation_space and theirs.action_space == ds.action_space
    assert theirs.env_spec.id == "CartPole-v1"
    assert theirs.recover_environment().spec.id == "CartPole-v1"
    for ours, got in zip(ds.iterate_episodes(), theirs.iterate_episodes()):
        assert got.id == ours.id
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert_nested_equal(getattr(ours, key), getattr(got, key))
        assert_nested_equal(ours.infos, got.infos)
    metas = list(theirs.storage.get_episode_metadata(range(ds.total_episodes)))
    for ours, meta in zip(ds, metas):
        assert meta["seed"] == ours.seed and meta["total_steps"] == len(ours) and meta["id"] == ours.id
        assert meta["rewards_sum"] == ours.metadata["rewards_sum"] and meta["tag"] == ours.metadata["tag"]
        if ours.options is None:
            assert "options" not in meta
        else:
            assert meta["options"]["level"] == ours.options["level"]
            assert bool(meta["options"]["nested"]["flag"]) == ours.options["nested"]["flag"]

    # metadata.json: Minari's keys, in the order its DataCollector.create_dataset writes them.
    raw = json.loads((path / "data" / "metadata.json").read_text())
    assert list(raw)[:10] == [
        "total_episodes", "total_steps", "data_format", "jpeg_encoding", "observation_space", "action_space",
        "env_spec", "dataset_size", "dataset_id", "code_permalink",
    ]
    assert raw["data_format"] == "hdf5" and raw["jpeg_encoding"] is False and raw["dataset_id"] == "cart/random-v0"
    assert raw["author"] == ["Ada"] and raw["author_email"] == ["ada@example.org"] and raw["custom"] == [1, 2]
    assert raw["minari_version"] == minari.__version__
    assert isinstance(raw["observation_space"], str)  # a JSON string, as Minari stores it
    assert minari.serialization.deserialize_space(raw["observation_space"]) == ds.observation_space
    meta = theirs.storage.metadata
    assert meta["author"] == {"Ada"} and meta["algorithm_name"] == "random" and meta["description"] == "random CartPole"
    assert isinstance(meta["dataset_size"], float) and meta["dataset_size"] >= 0
    assert "cart/random-v0" in minari.list_local_datasets()
    # Minari's own sampling works on it too.
    theirs.set_seed(0)
    assert len(theirs.sample_episodes(3)) == 3


def test_real_minari_loads_dict_observation_export(tmp_path: Path, minari_root: Path) -> None:
    env = DictObsEnv()
    env.action_space.seed(0)
    with EpisodeStore.create("dict/obs-v0", env.observation_space, env.action_space, root=tmp_path) as store:
        record(store, env, 8, np.random.default_rng(2))
    ds = load_dataset("dict/obs-v0", tmp_path)
    export_minari("dict/obs-v0", "dict/obs-v1", root=tmp_path)
    theirs = minari.load_dataset("dict/obs-v1")
    assert theirs.observation_space == ds.observation_space
    for ours, got in zip(ds, theirs):
        assert isinstance(got.observations, dict) and isinstance(got.observations["nested"], tuple)
        assert_nested_equal(ours.observations, got.observations)
        assert_nested_equal(ours.actions, got.actions)
        np.testing.assert_array_equal(ours.rewards, got.rewards)
        np.testing.assert_array_equal(ours.terminations, got.terminations)
        np.testing.assert_array_equal(ours.truncations, got.truncations)


def test_image_observations_are_exported_losslessly(tmp_path: Path, minari_root: Path) -> None:
    """Minari JPEG-encodes image spaces by default; exports store raw arrays, so minari returns them exactly."""
    obs_space = spaces.Box(0, 255, (32, 32, 3), np.uint8)
    act_space = spaces.Discrete(3)
    rng = np.random.default_rng(4)
    with EpisodeStore.create("img/raw-v0", obs_space, act_space, root=tmp_path) as store:
        for seed in range(3):
            steps = 2 + seed
            store.write_episode(rng.integers(0, 256, (steps + 1, 32, 32, 3), dtype=np.uint8),
                                rng.integers(0, 3, steps), rng.normal(size=steps), np.eye(steps, dtype=bool)[-1],
                                np.zeros(steps, bool), seed=seed, env_id=0)
    ds = load_dataset("img/raw-v0", tmp_path)
    export_minari(ds, "img/raw-v0")
    for ours, got in zip(ds, minari.load_dataset("img/raw-v0")):
        assert_nested_equal(ours.observations, got.observations)


def test_export_of_a_view_renumbers_and_existing_ids_need_overwrite(tmp_path: Path, minari_root: Path) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=10)
    view = ds.filter_episodes(lambda ep: ep.id % 3 == 0)
    export_minari(view, "cart/view-v0")
    theirs = minari.load_dataset("cart/view-v0")
    assert theirs.total_episodes == 4 and list(theirs.episode_indices) == [0, 1, 2, 3]
    for ours, got in zip(view, theirs):
        np.testing.assert_array_equal(ours.observations, got.observations)
    with pytest.raises(DatasetExistsError, match="overwrite=True"):
        export_minari(ds, "cart/view-v0")
    export_minari(ds, "cart/view-v0", overwrite=True)
    assert minari.load_dataset("cart/view-v0").total_episodes == 10
    # No temporary directories are left next to the dataset.
    assert sorted(p.name for p in (minari_root / "cart").iterdir()) == ["namespace_metadata.json", "view-v0"]


def test_minari_id_rules_are_checked_before_writing(tmp_path: Path, minari_root: Path) -> None:
    assert parse_minari_dataset_id("ab/cd/name-v3") == ("ab/cd", "name", 3)
    assert parse_minari_dataset_id("name-v0") == (None, "name", 0)
    ds = cartpole_dataset(tmp_path / "vc", n=2)
    # A one-character namespace is fine for vcollect but Minari refuses it.
    with pytest.raises(InvalidDatasetIdError, match="at least two characters"):
        export_minari(ds, "c/random-v0")
    for bad in ("cart/random", "cart//random-v0", "/random-v0", "cart/ran dom-v0"):
        with pytest.raises(InvalidDatasetIdError):
            export_minari(ds, bad)
    assert not minari_root.exists() or list(minari_root.iterdir()) == []


def test_minari_root_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "env"))
    assert resolve_minari_root() == tmp_path / "env"
    assert resolve_minari_root(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("MINARI_DATASETS_PATH")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_minari_root() == tmp_path / "home" / ".minari" / "datasets"


def test_export_import_round_trip_keeps_everything(tmp_path: Path, minari_root: Path) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=9)
    export_minari(ds, "cart/random-v0")
    back = import_minari("cart/random-v0", "back/random-v0", tmp_path / "vc")
    assert back.observation_space == ds.observation_space and back.action_space == ds.action_space
    assert StoredDataset(back).env_spec_json == StoredDataset(ds).env_spec_json
    assert back.metadata["author"] == ["Ada"] and back.metadata["custom"] == [1, 2]
    assert back.metadata["minari_dataset_id"] == "cart/random-v0"
    for a, b in zip(ds, back):
        assert (a.seed, a.options, a.metadata) == (b.seed, b.options, b.metadata)
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert_nested_equal(getattr(a, key), getattr(b, key))
        assert_nested_equal(a.infos, b.infos)
        assert_nested_equal(a.extras, b.extras)  # kept through Minari's file, which ignores them
    # By path too (the dataset directory or its data/ directory).
    by_path = import_minari(minari_root / "cart" / "random-v0" / "data", "back/path-v0", tmp_path / "vc")
    assert by_path.total_steps == ds.total_steps
    with pytest.raises(DatasetExistsError):
        import_minari("cart/random-v0", "back/random-v0", tmp_path / "vc")


def test_import_of_a_missing_minari_dataset_names_where_it_looked(tmp_path: Path, minari_root: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="nothere-v0") as info:
        import_minari("cart/nothere-v0", "x/y-v0", tmp_path)
    assert str(minari_root) in str(info.value)
    assert not (tmp_path / "x").exists()


def episode_buffer(rng: np.random.Generator, obs_space: gym.Space, act_space: gym.Space, steps: int,
                   infos: dict | None, seed: int | None) -> Any:
    from minari.data_collector import EpisodeBuffer

    obs_space.seed(int(rng.integers(2**31)))
    act_space.seed(int(rng.integers(2**31)))
    rows = [obs_space.sample() for _ in range(steps + 1)]
    return EpisodeBuffer(
        seed=seed,
        observations=stack_nested(rows),
        actions=np.array([act_space.sample() for _ in range(steps)]),
        rewards=list(rng.normal(size=steps)),
        terminations=[False] * (steps - 1) + [True],
        truncations=[False] * steps,
        infos=infos,
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_import_of_minari_created_datasets_with_changing_infos_and_jpeg_images(tmp_path: Path, minari_root: Path) -> None:
    """Datasets written by minari.create_dataset_from_buffers: Dict obs, infos whose keys change, JPEG images."""
    rng = np.random.default_rng(3)
    obs_space = spaces.Dict({"img": spaces.Box(0, 255, (32, 32, 3), np.uint8), "v": spaces.Box(-1, 1, (2,), np.float32)})
    act_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    buffers = [
        episode_buffer(rng, obs_space, act_space, 4, {"a": np.arange(5)}, seed=2**64 - 3),
        episode_buffer(rng, obs_space, act_space, 6, {"a": np.arange(7)}, seed=None),
        episode_buffer(rng, obs_space, act_space, 3, {"b": {"c": np.ones(4)}}, seed=5),  # new info structure
    ]
    minari.create_dataset_from_buffers(
        "imgs/buffers-v0", buffers, observation_space=obs_space, action_space=act_space, author="Bob",
        algorithm_name="sampled",
    )
    theirs = minari.load_dataset("imgs/buffers-v0")  # JPEG-decoded by minari
    ours = import_minari("imgs/buffers-v0", "imgs/imported-v0", tmp_path)
    assert ours.total_episodes == 3 and ours.metadata["author"] == ["Bob"]
    assert [e.seed for e in ours] == [2**64 - 3, None, 5]  # a 64-bit Minari seed survives
    for a, b in zip(ours, theirs):
        assert_nested_equal(a.observations, b.observations)
        assert_nested_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert_nested_equal(a.infos, b.infos)


def test_import_of_a_minari_datacollector_dataset(tmp_path: Path, minari_root: Path) -> None:
    """minari.DataCollector on CartPole + create_dataset, imported: identical arrays, seeds and options."""
    env = minari.DataCollector(gym.make("CartPole-v1"), record_infos=True)
    env.action_space.seed(0)
    env.reset(seed=11)
    finished = 0
    while finished < 6:
        _, _, te, tr, _ = env.step(env.action_space.sample())
        if te or tr:
            finished += 1
            env.reset(options={"minari_autoseed": False} if finished == 2 else None)
    for _ in range(3):  # an unfinished episode: Minari truncates it
        env.step(env.action_space.sample())
    with pytest.warns(UserWarning):
        theirs = env.create_dataset("cart/minari-v0", author="Cy")
    env.close()
    ours = import_minari("cart/minari-v0", "cart/imported-v0", tmp_path)
    assert ours.total_episodes == theirs.total_episodes == 7 and ours.total_steps == theirs.total_steps
    metas = list(theirs.storage.get_episode_metadata(range(7)))
    assert ours[0].seed == 11 and ours[2].seed is None and ours[2].options == {"minari_autoseed": False}
    assert bool(ours[6].truncations[-1]) is True
    for a, b, meta in zip(ours, theirs, metas):
        assert a.seed == meta.get("seed")
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        np.testing.assert_array_equal(a.truncations, b.truncations)
        assert a.metadata["rewards_sum"] == meta["rewards_sum"]
    # Replay from the imported seeds reproduces the episodes.
    fresh = ours.recover_environment()
    for ep in ours:
        if ep.seed is None:
            continue
        obs, _ = fresh.reset(seed=ep.seed)
        np.testing.assert_array_equal(obs, ep.observations[0])
        for t, action in enumerate(ep.actions.tolist()):
            obs, r, _, _, _ = fresh.step(action)
            np.testing.assert_array_equal(obs, ep.observations[t + 1])
            assert r == ep.rewards[t]


def test_export_writes_minari_episode_groups(tmp_path: Path, minari_root: Path) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=3)
    path = export_minari(ds, "cart/groups-v0")
    with h5py.File(path / "data" / "main_data.hdf5", "r") as f:
        assert list(f) == ["episode_0", "episode_1", "episode_2"]
        group = f["episode_1"]
        assert int(group.attrs["id"]) == 1 and int(group.attrs["total_steps"]) == len(ds[1])
        assert int(group.attrs["seed"]) == ds[1].seed and int(group.attrs["options/level"]) == 1
        assert group["observations"].shape == (len(ds[1]) + 1, 4) and group["observations"].maxshape == (None, 4)
        assert group["rewards"].dtype == np.float64 and group["terminations"].dtype == np.bool_
        assert set(group["infos"]) == {"step", "name"} and "extras" in group


def test_export_refuses_an_option_key_that_would_nest_on_import(tmp_path: Path, minari_root: Path) -> None:
    space = gym.spaces.Discrete(2)
    with EpisodeStore.create("opt/slash-v0", space, space, root=tmp_path) as store:
        store.write_episode([0, 1], [0], [1.0], [True], [False], seed=None, env_id=0, options={"a/b": 1})
    # stored as the attribute "options/a/b", it would come back as {"a": {"b": 1}}: refused, naming the key
    with pytest.raises(InfoStructureError, match="reset options key 'a/b' under '<top>'"):
        export_minari("opt/slash-v0", "opt/slash-v0", root=tmp_path)


def drop_spaces(minari_root: Path, minari_id: str) -> Path:
    """Remove both spaces from an exported Minari dataset's metadata.json (as old Minari releases wrote it)."""
    file = minari_root.joinpath(*minari_id.split("/"), "data", "metadata.json")
    metadata = json.loads(file.read_text())
    del metadata["observation_space"], metadata["action_space"]
    file.write_text(json.dumps(metadata))
    return file


def test_import_without_stored_spaces_makes_the_env_only_when_trusted(
    tmp_path: Path, minari_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=3)
    export_minari(ds, "cart/nospaces-v0")
    file = drop_spaces(minari_root, "cart/nospaces-v0")
    made: list[Any] = []
    real_make = gym.make
    monkeypatch.setattr(gym, "make", lambda *a, **k: made.append(a) or real_make(*a, **k))
    with pytest.raises(DatasetError) as excinfo:
        import_minari("cart/nospaces-v0", "back/nospaces-v0", tmp_path / "vc")
    message = str(excinfo.value)
    assert str(file) in message and "observation_space and action_space" in message
    assert "trust_env_spec=True" in message and "gymnasium.envs.classic_control.cartpole:CartPoleEnv" in message
    assert made == [] and not (tmp_path / "vc" / "back").exists()  # no env made, nothing left under the id
    back = import_minari("cart/nospaces-v0", "back/nospaces-v0", tmp_path / "vc", trust_env_spec=True)
    assert len(made) == 1  # the spaces came from the env of the stored spec
    assert back.observation_space == ds.observation_space and back.action_space == ds.action_space
    assert back.total_steps == ds.total_steps


def test_import_with_stored_spaces_never_makes_the_env(
    tmp_path: Path, minari_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=3)
    export_minari(ds, "cart/spaces-v0")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"import_minari made an env: {args} {kwargs}")

    monkeypatch.setattr(gym, "make", refuse)
    monkeypatch.setattr(gym.envs.registration, "make", refuse)
    for trust in (False, True):
        back = import_minari("cart/spaces-v0", f"back/spaces-v{int(trust)}", tmp_path / "vc", trust_env_spec=trust)
        assert back.observation_space == ds.observation_space and back.action_space == ds.action_space
        assert StoredDataset(back).env_spec_json == StoredDataset(ds).env_spec_json and back.total_steps == ds.total_steps


def test_import_without_spaces_or_env_spec_names_the_file(tmp_path: Path, minari_root: Path) -> None:
    ds = cartpole_dataset(tmp_path / "vc", n=2)
    export_minari(ds, "cart/bare-v0")
    file = drop_spaces(minari_root, "cart/bare-v0")
    metadata = json.loads(file.read_text())
    del metadata["env_spec"]
    file.write_text(json.dumps(metadata))
    for trust in (False, True):
        with pytest.raises(DatasetError, match="no env_spec to recover them from") as excinfo:
            import_minari("cart/bare-v0", "back/bare-v0", tmp_path / "vc", trust_env_spec=trust)
        assert str(file) in str(excinfo.value)
