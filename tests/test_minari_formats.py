"""Minari 0.5's three storage layouts (hdf5, arrow, parquet): exports read by the real ``minari``, imports of
what minari itself wrote, Text and nested spaces in each, and bad input."""

from __future__ import annotations

import errno
import json
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
from gymnasium import spaces

from tests.test_minari_interop import assert_nested_equal, stack_nested
from tests.text_envs import TextEnv, text_action_space, text_obs_space
from vcollect import Collector, make_vector
from vcollect.errors import DatasetError, DiskFullError
from vcollect.minari import export_minari, import_minari
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset

FORMATS = ["hdf5", "arrow", "parquet"]


@pytest.fixture()
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def as_array(values: Any) -> np.ndarray:
    """What minari hands back for a Text leaf (a list of str, or bytes from HDF5) as a numpy str array."""
    if isinstance(values, list) or (isinstance(values, np.ndarray) and values.dtype == object):
        return np.array([v.decode("utf-8") if isinstance(v, bytes) else v for v in values])
    return np.asarray(values)


def assert_same_values(ours: Any, theirs: Any) -> None:
    """Equal nested values; Text leaves compared as strings (minari gives lists), the rest dtype and all."""
    if isinstance(ours, dict):
        assert set(ours) == set(theirs)
        for key in ours:
            assert_same_values(ours[key], theirs[key])
    elif isinstance(ours, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same_values(a, b)
    elif ours.dtype.kind == "U":
        assert as_array(theirs).tolist() == ours.tolist()
    else:
        theirs = np.asarray(theirs)
        assert theirs.dtype == ours.dtype and theirs.shape == ours.shape
        np.testing.assert_array_equal(theirs, ours)


def rich_dataset(root: Path) -> Any:
    """CartPole episodes with every kind of side data: infos with T+1 and T rows, nested, strings and
    matrices; extras; reset options; episode metadata; a seed of 64 bits and a missing one."""
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    with EpisodeStore.create("rich/cart-v0", env.observation_space, env.action_space, env_spec=env.spec, root=root,
                             metadata={"author": "Ada", "algorithm_name": "random"}) as store:
        for i, seed in enumerate([3, 2**64 - 5, None, 8]):
            obs, _ = env.reset(seed=seed)
            rows, acts, rews, terms, truncs = [obs], [], [], [], []
            while not (terms and (terms[-1] or truncs[-1])):
                obs, r, te, tr, _ = env.step(env.action_space.sample())
                rows.append(obs)
                acts.append(acts and 1 - acts[-1] or 0)
                rews.append(r)
                terms.append(te)
                truncs.append(tr or len(acts) >= 9)
            t = len(acts)
            store.write_episode(
                np.array(rows), np.array(acts, np.int64), np.array(rews), np.array(terms), np.array(truncs),
                seed=seed, env_id=0, options={"level": i, "deep": {"on": i % 2 == 0}} if i != 1 else None,
                metadata={"tag": f"ep{i}", "score": float(i) / 2},
                infos={"step": np.arange(t + 1), "name": np.array([f"r{j}é" for j in range(t + 1)]),
                       "per_step": np.ones(t, np.float32), "nested": {"m": np.arange(4 * (t + 1)).reshape(t + 1, 2, 2)}},
                extras={"ext": {"double": 2.0 * np.arange(t)}},
            )
    return load_dataset("rich/cart-v0", root)


def flat_infos(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_infos(value, f"{prefix}{key}/"))
        else:
            out[prefix + key] = value
    return out


@pytest.mark.parametrize("data_format", FORMATS)
def test_real_minari_reads_every_format_and_the_import_gives_everything_back(
    tmp_path: Path, minari_root: Path, data_format: str
) -> None:
    ds = rich_dataset(tmp_path)
    export_minari(ds, f"fmt/cart-{data_format}-v0", data_format=data_format)
    meta = json.loads((minari_root / "fmt" / f"cart-{data_format}-v0" / "data" / "metadata.json").read_text())
    assert meta["data_format"] == data_format and meta["total_steps"] == ds.total_steps
    theirs = minari.load_dataset(f"fmt/cart-{data_format}-v0")
    assert data_format == theirs.storage.FORMAT  # minari chose its storage from data_format
    assert meta["dataset_size"] == theirs.storage.get_size()  # Minari's own count of the same files
    assert (theirs.total_episodes, theirs.total_steps) == (ds.total_episodes, ds.total_steps)
    assert theirs.recover_environment().spec.id == "CartPole-v1"
    for ours, their in zip(ds, theirs.iterate_episodes()):
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert_same_values(getattr(ours, key), getattr(their, key))
        if data_format == "hdf5":  # minari's HDF5 reader keeps nesting; its Arrow reader needs flat fields
            assert_nested_equal(ours.infos["nested"], their.infos["nested"])
        else:
            got = {k: v for k, v in their.infos.items()}
            assert set(got) == {"step", "name", "per_step", "nested/m"}
            np.testing.assert_array_equal(got["nested/m"], ours.infos["nested"]["m"])
            assert as_array(got["name"]).tolist() == ours.infos["name"].tolist()
            np.testing.assert_array_equal(got["per_step"][:-1], ours.infos["per_step"])  # padded with one row
    their_meta = list(theirs.storage.get_episode_metadata(range(ds.total_episodes)))
    assert [m.get("seed") for m in their_meta] == [e.seed for e in ds]
    if data_format != "hdf5":  # options are kept nested in the arrow layouts' metadata.json
        assert [m.get("options") for m in their_meta] == [e.options for e in ds]

    back = import_minari(f"fmt/cart-{data_format}-v0", f"back/{data_format}-v0", tmp_path)
    assert back.observation_space == ds.observation_space and StoredDataset(back).env_spec_json == StoredDataset(ds).env_spec_json
    assert back.metadata["author"] == ["Ada"]
    for a, b in zip(ds, back):
        assert (a.seed, a.options, a.metadata) == (b.seed, b.options, b.metadata)
        for key in ("observations", "actions", "rewards", "terminations", "truncations", "infos", "extras"):
            assert_nested_equal(getattr(a, key), getattr(b, key))


def collect_text(root: Path) -> Any:
    venv = make_vector(partial(TextEnv), 2)
    store = EpisodeStore.create("text/src-v0", venv.single_observation_space, venv.single_action_space, root=root)
    collector = Collector(None, venv, store=store, seed=5)
    collector.collect(n_episode=5, random=True, reset_before_collect=True)
    collector.close()
    store.close()
    return load_dataset("text/src-v0", root)


@pytest.mark.parametrize("data_format", FORMATS)
def test_text_in_nested_dict_and_tuple_round_trips_through_every_format(
    tmp_path: Path, minari_root: Path, data_format: str
) -> None:
    ds = collect_text(tmp_path)
    export_minari(ds, f"fmt/text-{data_format}-v0", data_format=data_format)
    theirs = minari.load_dataset(f"fmt/text-{data_format}-v0")
    assert theirs.observation_space == ds.observation_space and theirs.action_space == ds.action_space
    for ours, their in zip(ds, theirs.iterate_episodes()):
        assert_same_values(ours.observations, their.observations)
        assert_same_values(ours.actions, their.actions)
    back = import_minari(f"fmt/text-{data_format}-v0", f"back/text-{data_format}-v0", tmp_path)
    for a, b in zip(ds, back):
        assert a.seed == b.seed
        assert_nested_equal(a.observations, b.observations)  # bit-exact, dtypes included
        assert_nested_equal(a.actions, b.actions)


def text_buffer(rng: np.random.Generator, steps: int, seed: int | None, word: str | None = None) -> Any:
    from minari.data_collector import EpisodeBuffer

    obs_space, act_space = text_obs_space(), text_action_space()
    obs_space.seed(int(rng.integers(2**31)))
    act_space.seed(int(rng.integers(2**31)))
    rows = [obs_space.sample() for _ in range(steps + 1)]
    if word is not None:
        rows[1]["word"] = word
    acts = [act_space.sample() for _ in range(steps)]
    observations = stack_nested(rows)
    # Text leaves as lists of str, as minari's DataCollector keeps them (its HDF5 writer needs lists)
    observations["word"] = observations["word"].tolist()
    observations["pair"] = (observations["pair"][0].tolist(), observations["pair"][1])
    return EpisodeBuffer(
        seed=seed, observations=observations,
        actions=([str(a[0]) for a in acts], np.array([a[1] for a in acts])),
        rewards=list(rng.normal(size=steps)), terminations=[False] * (steps - 1) + [True], truncations=[False] * steps,
        infos={"count": np.arange(steps + 1), "sub": {"x": np.ones((steps + 1, 2))}},
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("data_format", FORMATS)
def test_import_of_datasets_minari_wrote_in_every_format(tmp_path: Path, minari_root: Path, data_format: str) -> None:
    """create_dataset_from_buffers (Text in a nested Dict/Tuple, nested infos) and DataCollector, both with
    minari's own storage of that format."""
    rng = np.random.default_rng(0)
    buffers = [text_buffer(rng, 4, seed=2**64 - 3), text_buffer(rng, 6, seed=None), text_buffer(rng, 3, seed=9)]
    minari.create_dataset_from_buffers(
        f"mw/buffers-{data_format}-v0", buffers, observation_space=text_obs_space(), action_space=text_action_space(),
        author="Bob", algorithm_name="sampled", data_format=data_format,
    )
    # minari 0.5.4's own Arrow reader fails on the info arrays and nested infos its writer wrote, so the
    # import is checked against the buffers themselves
    ours = import_minari(f"mw/buffers-{data_format}-v0", f"mw/buffers-{data_format}-v0", tmp_path)
    assert ours.metadata["author"] == ["Bob"] and [e.seed for e in ours] == [2**64 - 3, None, 9]
    for a, buffer in zip(ours, buffers, strict=True):
        assert_same_values(a.observations, buffer.observations)
        assert_same_values(a.actions, buffer.actions)
        np.testing.assert_array_equal(a.rewards, np.array(buffer.rewards))
        np.testing.assert_array_equal(a.infos["count"], buffer.infos["count"])
        np.testing.assert_array_equal(a.infos["sub"]["x"], buffer.infos["sub"]["x"])  # a nested struct

    env = minari.DataCollector(TextEnv(), record_infos=True, data_format=data_format)
    for seed in (1, 2):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env.create_dataset(f"mw/collector-{data_format}-v0", algorithm_name="random")
    theirs = minari.load_dataset(f"mw/collector-{data_format}-v0")
    ours = import_minari(f"mw/collector-{data_format}-v0", f"mw/collector-{data_format}-v0", tmp_path)
    assert [e.seed for e in ours] == [1, 2]
    for a, b in zip(ours, theirs.iterate_episodes()):
        assert_same_values(a.observations, b.observations)
        assert_same_values(a.actions, b.actions)


def test_bad_formats_and_text_too_long_in_a_minari_dataset(tmp_path: Path, minari_root: Path) -> None:
    ds = collect_text(tmp_path)
    with pytest.raises(ValueError, match="data_format must be one of 'hdf5', 'arrow', 'parquet'.*'feather'"):
        export_minari(ds, "bad/fmt-v0", data_format="feather")
    assert not (minari_root / "bad").exists()

    path = export_minari(ds, "bad/zarr-v0", data_format="arrow")
    meta_file = path / "data" / "metadata.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "data_format": "zarr"}))
    with pytest.raises(DatasetError, match="stored as 'zarr'"):
        import_minari("bad/zarr-v0", "x/zarr-v0", tmp_path)

    # minari writes a Text value longer than max_length without a word; the import refuses it by name
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(
            "bad/long-v0", [text_buffer(rng, 3, seed=1), text_buffer(rng, 3, seed=2, word="a" * 20)],
            observation_space=text_obs_space(), action_space=text_action_space(), data_format="parquet",
        )
    with pytest.raises(DatasetError, match=r"episode 1 .*observations\['word'\].*more than max_length 8"):
        import_minari("bad/long-v0", "x/long-v0", tmp_path)
    assert not (tmp_path / "x").exists()


def test_arrow_export_full_disk_and_missing_pyarrow(
    tmp_path: Path, minari_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = collect_text(tmp_path)
    import pyarrow.parquet as pq

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(pq, "write_table", full)
        with pytest.raises(DiskFullError, match="no space left"):
            export_minari(ds, "full/text-v0", minari_root, data_format="parquet")
    assert not (minari_root / "full" / "text-v0").exists()

    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
        patch.delitem(sys.modules, "vcollect.minari.arrow")
        with pytest.raises(ImportError, match=r"pip install 'vcollect\[minari\]'"):
            export_minari(ds, "nopa/text-v0", minari_root, data_format="arrow")
        export_minari(ds, "nopa/text-v0", minari_root, data_format="hdf5")  # HDF5 needs no pyarrow
    assert (minari_root / "nopa" / "text-v0" / "data" / "main_data.hdf5").is_file()


def test_dict_space_with_image_and_discrete_in_arrow_is_raw_not_jpeg(tmp_path: Path, minari_root: Path) -> None:
    obs_space = spaces.Dict({"img": spaces.Box(0, 255, (32, 32, 3), np.uint8), "d": spaces.Discrete(4, start=-1)})
    act_space = spaces.MultiDiscrete([3, 2])
    rng = np.random.default_rng(2)
    with EpisodeStore.create("img/src-v0", obs_space, act_space, root=tmp_path) as store:
        for seed in range(2):
            obs_space.seed(seed)
            act_space.seed(seed)
            rows = [obs_space.sample() for _ in range(4)]
            store.write_episode(stack_nested(rows), np.array([act_space.sample() for _ in range(3)]),
                                rng.normal(size=3), [False, False, True], [False] * 3, seed=seed, env_id=0)
    ds = load_dataset("img/src-v0", tmp_path)
    export_minari(ds, "img/raw-v0", data_format="arrow")
    theirs = minari.load_dataset("img/raw-v0")
    assert theirs.storage.jpeg_encoding is False
    for a, b in zip(ds, theirs.iterate_episodes()):
        assert_nested_equal(a.observations, b.observations)  # lossless: no JPEG on export
        assert_nested_equal(a.actions, b.actions)


@pytest.mark.parametrize("data_format", FORMATS)
def test_dataset_size_is_what_minari_counts(tmp_path: Path, minari_root: Path, data_format: str) -> None:
    """300 short episodes: the Arrow layouts' folder per episode counts in Minari's size (0.1 vs 1.3 MB
    when only files were counted)."""
    from gymnasium import spaces

    from vcollect.store import EpisodeStore

    with EpisodeStore.create("size/many-v0", spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2),
                             root=tmp_path) as store:
        for seed in range(300):
            store.write_episode(np.zeros((6, 4), np.float32), np.zeros(5, np.int64), np.ones(5),
                                np.array([False] * 4 + [True]), np.zeros(5, bool), seed=seed, env_id=0)
    path = export_minari("size/many-v0", f"size/{data_format}-v0", root=tmp_path, data_format=data_format)
    meta = json.loads((path / "data" / "metadata.json").read_text())
    storage = minari.load_dataset(f"size/{data_format}-v0").storage
    assert meta["dataset_size"] == storage.get_size()
    if data_format != "hdf5":
        assert meta["dataset_size"] >= 1.0
