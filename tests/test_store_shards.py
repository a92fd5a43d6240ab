"""Shard layout, global episode ids, sample_steps, views/transforms and damaged or failing disks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

import vcollect.store.read.reader as reader_module
from vcollect.errors import CorruptShardError, DatasetError, SpaceMismatchError
from vcollect.store import (
    EpisodeStore,
    combine_datasets,
    list_datasets,
    load_dataset,
    split_dataset,
)
from vcollect.store.read.reader import StoredDataset

# Observation (episode code, row): every row of every episode is unique and says where it came from.
OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float64)
ACT = spaces.Discrete(7)


def episode(code: int, steps: int) -> dict:
    """A deterministic episode identified by ``code``."""
    rows = np.arange(steps + 1)
    return {
        "observations": np.stack([np.full(steps + 1, code), rows], axis=1).astype(np.float64),
        "actions": (code + rows[:-1]) % 7,
        "rewards": code * 1000.0 + rows[:-1],
        "terminations": (rows[:-1] == steps - 1) & (code % 2 == 0),
        "truncations": (rows[:-1] == steps - 1) & (code % 2 == 1),
    }


def check_episode(got, code: int, steps: int) -> None:
    want = episode(code, steps)
    assert len(got) == steps
    np.testing.assert_array_equal(got.observations, want["observations"])
    np.testing.assert_array_equal(got.actions, want["actions"])
    np.testing.assert_array_equal(got.rewards, want["rewards"])
    np.testing.assert_array_equal(got.terminations, want["terminations"])
    np.testing.assert_array_equal(got.truncations, want["truncations"])


def write(store: EpisodeStore, code: int, steps: int) -> None:
    store.write_episode(**episode(code, steps), seed=code, env_id=code % 4)


@settings(max_examples=40, deadline=None)
@given(
    plan=st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=1, max_size=25),
    shard_steps=st.integers(1, 30),
)
def test_offsets_and_global_ids_match_reference(plan: list[tuple[int, bool]], shard_steps: int) -> None:
    """Random episode lengths, flushes and shard_steps vs a plain reference of concatenated episodes."""
    # Reference: which episodes each shard holds, by the commit rule (pending >= shard_steps, or flush).
    ref_shards: list[list[int]] = []
    current: list[int] = []
    pending = 0
    for code, (steps, flush) in enumerate(plan):
        current.append(code)
        pending += steps
        if pending >= shard_steps or flush:
            ref_shards.append(current)
            current, pending = [], 0
    if current:
        ref_shards.append(current)
    lengths = [steps for steps, _ in plan]

    with tempfile.TemporaryDirectory() as root:
        with EpisodeStore.create("p/offsets-v0", OBS, ACT, root=root, shard_steps=shard_steps) as store:
            for code, (steps, flush) in enumerate(plan):
                write(store, code, steps)
                if flush:
                    store.flush()
        ds = load_dataset("p/offsets-v0", root=root)
        assert ds.total_episodes == len(plan) and ds.total_steps == sum(lengths)
        assert len(StoredDataset(ds).shard_paths) == len(ref_shards)
        for path, codes in zip(StoredDataset(ds).shard_paths, ref_shards):
            with h5py.File(path) as f:
                shard_lengths = [lengths[c] for c in codes]
                np.testing.assert_array_equal(f["episodes/length"][()], shard_lengths)
                starts = np.cumsum([0] + shard_lengths)[:-1]
                np.testing.assert_array_equal(f["episodes/step_offset"][()], starts)
                np.testing.assert_array_equal(f["episodes/obs_offset"][()], starts + np.arange(len(codes)))
                assert f["observations"].shape == (sum(shard_lengths) + len(codes), 2)
                assert f["actions"].shape == (sum(shard_lengths),)
                # Concatenated columns equal the concatenated reference episodes.
                np.testing.assert_array_equal(
                    f["observations"][()], np.concatenate([episode(c, lengths[c])["observations"] for c in codes])
                )
        for i, got in enumerate(ds):
            assert got.id == i and got.seed == i and got.env_id == i % 4
            check_episode(got, i, lengths[i])
        np.testing.assert_array_equal(ds.episode_lengths, lengths)
        if sum(lengths):
            check_sample_steps(ds, lengths, 64)


def check_sample_steps(ds, lengths: list[int], n: int) -> set[tuple[int, int]]:
    """Every sampled transition is a real step; next obs is the following row of the same episode."""
    batch = ds.sample_steps(n)
    obs, nxt = batch["observations"], batch["next_observations"]
    assert obs.shape == (n, 2) and nxt.shape == (n, 2) and batch["actions"].shape == (n,)
    codes, rows = obs[:, 0].astype(int), obs[:, 1].astype(int)
    allowed = set(ds.episode_indices.tolist())
    for code, row, next_obs, act, rew, term, trunc in zip(
        codes, rows, nxt, batch["actions"], batch["rewards"], batch["terminations"], batch["truncations"]
    ):
        assert code in allowed and 0 <= row < lengths[code]  # a step row, never an episode's final obs
        np.testing.assert_array_equal(next_obs, [code, row + 1])  # same episode, next row
        assert act == (code + row) % 7 and rew == code * 1000.0 + row
        last = row == lengths[code] - 1
        assert term == (last and code % 2 == 0) and trunc == (last and code % 2 == 1)
    return set(zip(codes.tolist(), rows.tolist()))


@pytest.mark.parametrize("cache", [True, False], ids=["in-memory", "memory-mapped"])
def test_sample_steps_covers_all_steps_of_a_view_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool) -> None:
    if not cache:
        monkeypatch.setattr(reader_module, "SAMPLE_CACHE_BYTES", 0)
    lengths = [3, 0, 5, 1, 4, 2, 6]
    with EpisodeStore.create("p/sample-v0", OBS, ACT, root=tmp_path, shard_steps=5) as store:
        for code, steps in enumerate(lengths):
            write(store, code, steps)
    ds = load_dataset("p/sample-v0", root=tmp_path)
    ds.set_seed(0)
    seen: set[tuple[int, int]] = set()
    for _ in range(20):
        seen |= check_sample_steps(ds, lengths, 64)
    assert seen == {(c, r) for c, n in enumerate(lengths) for r in range(n)}
    view = ds.filter_episodes(lambda ep: ep.id in (2, 5))
    view_seen: set[tuple[int, int]] = set()
    for _ in range(10):
        view_seen |= check_sample_steps(view, lengths, 32)
    assert view_seen == {(2, r) for r in range(5)} | {(5, r) for r in range(2)}
    ds.set_seed(123)
    a = ds.sample_steps(10)
    ds.set_seed(123)
    np.testing.assert_array_equal(a["observations"], ds.sample_steps(10)["observations"])


def test_sample_steps_nested_spaces(tmp_path: Path) -> None:
    obs_space = spaces.Dict({"a": spaces.Box(-1e6, 1e6, shape=(1,)), "t": spaces.Tuple((spaces.Discrete(100),))})
    with EpisodeStore.create("p/nested-v0", obs_space, ACT, root=tmp_path) as store:
        for code in range(3):
            rows = np.arange(5)
            store.write_episode(
                {"a": (code * 10 + rows)[:, None].astype(np.float32), "t": (code * 10 + rows,)},
                rows[:4] % 7, np.zeros(4), np.zeros(4, bool), np.zeros(4, bool), seed=code, env_id=0,
            )
    batch = load_dataset("p/nested-v0", root=tmp_path).sample_steps(50)
    a, t = batch["observations"]["a"][:, 0], batch["observations"]["t"][0]
    np.testing.assert_array_equal(a, t)
    np.testing.assert_array_equal(batch["next_observations"]["t"][0], t + 1)
    assert t.dtype == np.int64 and np.all(t % 10 < 4)


def test_views_filter_split_sample_episodes(tmp_path: Path) -> None:
    lengths = [2, 7, 3, 9, 1, 4, 4, 8]
    with EpisodeStore.create("p/views-v0", OBS, ACT, root=tmp_path, shard_steps=6) as store:
        for code, steps in enumerate(lengths):
            write(store, code, steps)
    ds = load_dataset("p/views-v0", root=tmp_path)
    long = ds.filter_episodes(lambda ep: len(ep) >= 4)
    np.testing.assert_array_equal(long.episode_indices, [1, 3, 5, 6, 7])
    assert long.total_steps == 7 + 9 + 4 + 4 + 8 and len(long) == 5
    check_episode(long[1], 3, 9)  # position in the view, as in Minari
    assert [e.id for e in long.iterate_episodes([0, 2])] == [0, 2]  # global ids
    assert [e.id for e in long] == [1, 3, 5, 6, 7]

    parts = split_dataset(ds, [3, 4], seed=5)
    assert [len(p) for p in parts] == [3, 4]
    assert not set(parts[0].episode_indices) & set(parts[1].episode_indices)
    assert set(parts[0].episode_indices) | set(parts[1].episode_indices) <= set(range(8))
    again = split_dataset(ds, [3, 4], seed=5)
    np.testing.assert_array_equal(again[1].episode_indices, parts[1].episode_indices)
    for got in parts[1]:
        check_episode(got, got.id, lengths[got.id])
    with pytest.raises(ValueError, match="more than the 8 episodes"):
        split_dataset(ds, [5, 4])

    ds.set_seed(1)
    drawn = ds.sample_episodes(8)
    assert sorted(e.id for e in drawn) == list(range(8))  # without replacement
    sub = long.sample_episodes(3)
    assert len({e.id for e in sub}) == 3 and {e.id for e in sub} <= {1, 3, 5, 6, 7}
    with pytest.raises(ValueError, match="distinct"):
        long.sample_episodes(6)
    ds.set_seed(9)
    first = [e.id for e in ds.sample_episodes(4)]
    ds.set_seed(9)
    assert [e.id for e in ds.sample_episodes(4)] == first


def test_combine_datasets(tmp_path: Path) -> None:
    with EpisodeStore.create("c/a-v0", OBS, ACT, root=tmp_path, shard_steps=4) as store:
        for code in range(3):
            store.write_episode(**episode(code, 3), seed=code, env_id=0, infos={"x": np.arange(4)},
                                metadata={"m": float(code)})
    with EpisodeStore.create("c/b-v0", OBS, ACT, root=tmp_path) as store:
        for code in range(3, 5):
            store.write_episode(**episode(code, code), seed=None, env_id=1, extras={"e": np.ones(code)},
                                options={"o": code})
    view = load_dataset("c/a-v0", root=tmp_path).filter_episodes(lambda ep: ep.id != 1)
    combined = combine_datasets([view, "c/b-v0"], "c/ab-v0", root=tmp_path)
    assert combined.metadata["combined_datasets"] == ["c/a-v0", "c/b-v0"]
    assert combined.total_episodes == 4 and combined.total_steps == 3 + 3 + 3 + 4
    got = list(combined)
    for ep, code, steps in zip(got, [0, 2, 3, 4], [3, 3, 3, 4]):
        check_episode(ep, code, steps)
    assert got[0].seed == 0 and got[1].metadata == {"m": 2.0} and got[1].infos["x"].tolist() == [0, 1, 2, 3]
    assert got[2].seed is None and got[2].options == {"o": 3} and got[3].extras["e"].tolist() == [1.0] * 4
    with EpisodeStore.create("c/other-v0", OBS, spaces.Discrete(8), root=tmp_path):
        pass
    with pytest.raises(SpaceMismatchError, match="action"):
        combine_datasets(["c/a-v0", "c/other-v0"], "c/bad-v0", root=tmp_path)
    assert "c/bad-v0" not in list_datasets(tmp_path)


def make_shards(root: Path, n_shards: int = 3) -> list[Path]:
    with EpisodeStore.create("d/x-v0", OBS, ACT, root=root) as store:
        for s in range(n_shards):
            write(store, 2 * s, 3)
            write(store, 2 * s + 1, 5)
            store.flush()
    return store.shards_written


@pytest.mark.parametrize("damage", ["truncate", "garbage-header", "not-a-shard"])
def test_corrupt_shard_error_and_skip(tmp_path: Path, damage: str) -> None:
    shards = make_shards(tmp_path)
    bad = shards[1]
    if damage == "truncate":
        size = bad.stat().st_size
        with open(bad, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "garbage-header":
        with open(bad, "r+b") as f:
            f.write(b"\x00" * 512)
    else:
        bad.unlink()
        with h5py.File(bad, "w") as f:
            f["something"] = np.arange(3)
    with pytest.raises(CorruptShardError, match=bad.name):
        load_dataset("d/x-v0", root=tmp_path)
    with pytest.warns(UserWarning, match=bad.name):
        ds = load_dataset("d/x-v0", root=tmp_path, skip_corrupt=True)
    assert ds.total_episodes == 4 and StoredDataset(ds).shard_paths == [shards[0], shards[2]]
    for got, code in zip(ds, [0, 1, 4, 5]):
        check_episode(got, code, 3 if code % 2 == 0 else 5)
    listing = list_datasets(tmp_path)["d/x-v0"]
    assert listing["corrupt_shards"] == [str(bad)] and listing["total_episodes"] == 4


def test_data_past_end_of_file_is_corrupt(tmp_path: Path) -> None:
    """A shard whose header survived but whose data was cut off is caught at load time."""
    shards = make_shards(tmp_path, 1)
    with h5py.File(shards[0]) as f:
        end = f["observations"].id.get_offset() + f["observations"].id.get_storage_size()
    size = shards[0].stat().st_size
    assert end <= size
    with open(shards[0], "r+b") as f:
        f.truncate(end - 1)
    with pytest.raises(CorruptShardError, match=shards[0].name):
        load_dataset("d/x-v0", root=tmp_path)


def test_tmp_files_ignored_by_readers_and_reported(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, 2)
    half = shards[0].parent / "99999999999999999999-wdead-000000.h5.tmp"
    half.write_bytes(shards[0].read_bytes()[:1000])
    ds = load_dataset("d/x-v0", root=tmp_path)
    assert ds.total_episodes == 4 and StoredDataset(ds).shard_paths == shards
    listing = list_datasets(tmp_path)["d/x-v0"]
    assert listing["temporary_files"] == [str(half)]
    assert listing["total_episodes"] == 4 and listing["total_steps"] == 16 and listing["num_shards"] == 2


def test_disk_error_mid_commit_keeps_earlier_shards_and_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EpisodeStore.create("d/fail-v0", OBS, ACT, root=tmp_path)
    write(store, 0, 3)
    store.flush()
    write(store, 1, 4)
    write(store, 2, 2)
    real_create = h5py.Group.create_dataset
    calls = {"n": 0}

    def failing_create(self, name, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # a few columns in: the file exists and is half written
            raise OSError(28, "No space left on device")
        return real_create(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing_create)
    with pytest.raises(DatasetError, match="No space left on device") as info:
        store.flush()
    assert "d/fail-v0" in str(info.value) and "intact" in str(info.value)
    shards_dir = store.path / "shards"
    assert [p.name for p in shards_dir.iterdir()] == [store.shards_written[0].name]  # no .tmp left behind
    ds = load_dataset("d/fail-v0", root=tmp_path)
    assert ds.total_episodes == 1
    check_episode(ds[0], 0, 3)
    assert store.pending_episodes == 2

    # os.replace failing (e.g. EIO on rename) is reported the same way.
    monkeypatch.setattr(h5py.Group, "create_dataset", real_create)

    real_replace = os.replace

    def failing_replace(src, dst, **dir_fds):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(DatasetError, match="Input/output error"):
        store.close()
    assert load_dataset("d/fail-v0", root=tmp_path).total_episodes == 1
    assert not any(p.name.endswith(".tmp") for p in shards_dir.iterdir())
    monkeypatch.setattr(os, "replace", real_replace)

    # Once the disk is fine again, a new writer works and the old one's error left the dataset usable.
    with EpisodeStore.open("d/fail-v0", root=tmp_path) as again:
        write(again, 1, 4)
    ds = load_dataset("d/fail-v0", root=tmp_path)
    assert [len(e) for e in ds] == [3, 4]


def test_flush_can_be_retried_after_a_disk_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EpisodeStore.create("d/retry-v0", OBS, ACT, root=tmp_path)
    write(store, 0, 3)
    real_file = h5py.File

    def no_file(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(h5py, "File", no_file)
    with pytest.raises(DatasetError):
        store.flush()
    monkeypatch.setattr(h5py, "File", real_file)
    store.flush()
    store.close()
    ds = load_dataset("d/retry-v0", root=tmp_path)
    assert ds.total_episodes == 1
    check_episode(ds[0], 0, 3)
