"""The manifest of committed shards: fast loading from it, and Dataset.verify naming what is wrong."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
from gymnasium import spaces

from vcollect.errors import CorruptShardError
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.layout.manifest import read_manifest
from vcollect.store.read.reader import StoredDataset

OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float64)
ACT = spaces.Discrete(7)


def episode(code: int, steps: int) -> dict[str, np.ndarray]:
    rows = np.arange(steps + 1)
    return {
        "observations": np.stack([np.full(steps + 1, code), rows], axis=1).astype(np.float64),
        "actions": (code + rows[:-1]) % 7,
        "rewards": code * 1000.0 + rows[:-1] + 0.25,
        "terminations": rows[:-1] == steps - 1,
        "truncations": np.zeros(steps, bool),
    }


def two_writers(root: Path) -> tuple[list[Path], list[Path]]:
    """Two writers appending to one dataset at once, interleaving commits: 3 shards each."""
    with EpisodeStore.create("v/x-v0", OBS, ACT, root=root):
        pass
    a = EpisodeStore.open("v/x-v0", root)
    b = EpisodeStore.open("v/x-v0", root)
    for code in range(6):
        store = a if code % 2 == 0 else b
        store.write_episode(**episode(code, 2 + code), seed=code, env_id=code % 2)
        store.flush()
    a.close()
    b.close()
    return a.shards_written, b.shards_written


def test_each_writer_records_its_shards_and_a_sound_dataset_verifies(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    path = tmp_path / "v" / "x-v0"
    files = sorted(p.name for p in (path / "manifest").iterdir())
    assert len(files) == 2 and all(name.endswith(".jsonl") for name in files)
    manifest = read_manifest(path)
    assert manifest.problems == []
    assert sorted(manifest.by_shard) == sorted(p.name for p in shards_a + shards_b)
    entry = manifest.by_shard[shards_b[0].name]
    assert entry["episodes"] == 1 and entry["steps"] == 3 and entry["length"] == [3]
    assert entry["return"] == [float(episode(1, 3)["rewards"].sum())]
    ds = load_dataset("v/x-v0", root=tmp_path)
    assert ds.verify() == []
    assert ds.total_episodes == 6 and sorted(ds.episode_returns.tolist()) == sorted(
        float(episode(c, 2 + c)["rewards"].sum()) for c in range(6)
    )


def test_load_reads_recorded_shards_from_the_manifest_without_opening_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_writers(tmp_path)
    want = [(ep.id, ep.seed, ep.observations.tolist(), ep.rewards.tolist()) for ep in load_dataset("v/x-v0", root=tmp_path)]

    def no_hdf5(*args: object, **kwargs: object) -> None:
        raise AssertionError("a shard was opened with h5py")

    monkeypatch.setattr(h5py, "File", no_hdf5)
    ds = load_dataset("v/x-v0", root=tmp_path)  # tables from the manifest; columns read through maps
    assert [(ep.id, ep.seed, ep.observations.tolist(), ep.rewards.tolist()) for ep in ds] == want
    assert ds.sample_steps(50)["rewards"].shape == (50,)
    monkeypatch.undo()
    shard = StoredDataset(ds).shard_paths[2]
    with h5py.File(shard, "r+") as f:  # changed since commit: its mtime and size no longer match
        f["episodes/env_id"][...] = [7]
    monkeypatch.setattr(h5py, "File", no_hdf5)
    with pytest.raises(CorruptShardError, match="opened with h5py"):
        load_dataset("v/x-v0", root=tmp_path)
    monkeypatch.undo()
    assert load_dataset("v/x-v0", root=tmp_path)[2].env_id == 7  # the file, not the stale manifest line


def test_verify_names_a_deleted_shard(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    shards_a[1].unlink()
    ds = load_dataset("v/x-v0", root=tmp_path)
    assert ds.total_episodes == 5
    (problem,) = ds.verify()
    assert problem.startswith(f"shard {shards_a[1].name} is missing (recorded in manifest/")


def test_verify_names_a_copied_shard(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    copy = shards_a[0].with_name("99999999999999999999-wcopy-000000.h5")
    shutil.copyfile(shards_a[0], copy)
    ds = load_dataset("v/x-v0", root=tmp_path)
    assert ds.total_episodes == 7  # the copy is read like any shard ...
    problems = ds.verify()  # ... and named by verify
    assert problems == [
        f"shard {copy.name} is not recorded in the manifest (copied in, or its writer crashed before recording it)",
        f"shard {copy.name} has the same content as {shards_a[0].name} (a copy: its episodes count twice)",
    ]


def test_verify_names_altered_shards_and_wrong_returns(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    with h5py.File(shards_b[1], "r+") as f:
        f["episodes/return"][...] = [1.5]
    problems = load_dataset("v/x-v0", root=tmp_path).verify()
    assert len(problems) == 2
    assert problems[0].startswith(f"shard {shards_b[1].name}: checksum mismatch")
    assert problems[1].startswith(f"shard {shards_b[1].name}: episodes/return of 1 episode(s) (rows [0])")


def test_verify_reports_corrupt_shards_and_manifest_damage(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    with open(shards_a[2], "r+b") as f:
        f.truncate(shards_a[2].stat().st_size // 2)
    manifest_file = tmp_path / "v" / "x-v0" / "manifest" / f"{shards_b[0].name.split('-')[1]}.jsonl"
    lines = manifest_file.read_text().splitlines(keepends=True)
    manifest_file.write_text(lines[0] + lines[0] + lines[1] + lines[2][:40])  # a duplicate and a torn last line
    with pytest.warns(UserWarning, match=shards_a[2].name):
        problems = load_dataset("v/x-v0", root=tmp_path, skip_corrupt=True).verify()
    assert problems[0] == (
        f"shard {shards_b[0].name} is recorded twice in the manifest ({manifest_file.name} line 1 and "
        f"{manifest_file.name} line 2)"
    )
    assert problems[1] == f"manifest {manifest_file} line 4: a torn last line (a crash mid-append)"
    assert problems[2].startswith(f"shard {shards_a[2].name}: checksum mismatch")
    assert f"shard {str(shards_a[2])!r} is corrupt or truncated" in problems[3]
    assert problems[4] == (
        f"shard {shards_b[2].name} is not recorded in the manifest (copied in, or its writer crashed before "
        "recording it)"
    )
    assert len(problems) == 5


def test_a_shard_committed_without_its_manifest_line_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(*args: object) -> int:
        raise OSError(28, "No space left on device")

    store = EpisodeStore.create("v/y-v0", OBS, ACT, root=tmp_path)
    store.write_episode(**episode(0, 3), seed=0, env_id=0)
    # the manifest module's own os, with a write that fails (the shard writer's os.write stays real)
    manifest_os = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os) if not name.startswith("__")})
    manifest_os.write = full_disk
    monkeypatch.setattr("vcollect.store.layout.manifest.os", manifest_os)
    with pytest.warns(RuntimeWarning, match="could not be recorded in the manifest"):
        store.flush()
    monkeypatch.undo()
    assert store.pending_episodes == 0 and store.committed_episodes == 1  # committed, not to be retried
    store.write_episode(**episode(1, 2), seed=1, env_id=0)
    store.close()
    ds = load_dataset("v/y-v0", root=tmp_path)
    assert [len(ep) for ep in ds] == [3, 2]
    assert ds.verify() == [
        f"shard {store.shards_written[0].name} is not recorded in the manifest (copied in, or its writer crashed "
        "before recording it)"
    ]


def test_manifest_line_is_json_of_the_shard_layout(tmp_path: Path) -> None:
    with EpisodeStore.create("v/z-v0", OBS, ACT, root=tmp_path) as store:
        store.write_episode(**episode(0, 3), seed=2**64 - 1, env_id=0)
    (file,) = (tmp_path / "v" / "z-v0" / "manifest").iterdir()
    (entry,) = [json.loads(line) for line in file.read_text().splitlines()]
    with h5py.File(store.shards_written[0]) as f:
        assert entry["columns"][0][:4] == ["actions", f["actions"].dtype.str, [3], f["actions"].id.get_offset()]
    assert entry["seed"] == [2**64 - 1] and entry["seed_dtype"] == "<u8"
    assert load_dataset("v/z-v0", root=tmp_path)[0].seed == 2**64 - 1


def test_verify_without_a_manifest_says_so_once_and_still_checks_the_shards(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    path = tmp_path / "v" / "x-v0"
    shutil.rmtree(path / "manifest")  # as a dataset written before manifests existed
    shutil.copyfile(shards_a[0], shards_a[0].with_name("99999999999999999999-wcopy-000000.h5"))
    problems = load_dataset("v/x-v0", root=tmp_path).verify()
    assert problems == [
        f"{path / 'manifest'} is absent (written before vcollect kept manifests?): missing shards cannot be "
        "detected, and shards are checked only against themselves",
        f"shard 99999999999999999999-wcopy-000000.h5 has the same content as {shards_a[0].name} (a copy: its "
        "episodes count twice)",
    ]
