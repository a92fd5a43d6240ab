"""The manifest of committed shards: fast loading from it, and Dataset.verify naming what is wrong."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from gymnasium import spaces

from vcollect.errors import CorruptShardError, DamagedDatasetError
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.layout.manifest import read_manifest, shard_summary
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


def test_a_deleted_shard_is_refused_by_default_skipped_on_request_and_named_by_verify(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    shards_a[1].unlink()
    with pytest.raises(DamagedDatasetError, match=f"shard {shards_a[1].name} is missing") as raised:
        load_dataset("v/x-v0", root=tmp_path)
    assert isinstance(raised.value, CorruptShardError) and len(raised.value.problems) == 1
    with pytest.warns(UserWarning, match=f"reading its 5 whole shard.*{shards_a[1].name} is missing"):
        ds = load_dataset("v/x-v0", root=tmp_path, on_damage="skip")
    assert ds.total_episodes == 5 and len(list(ds)) == 5
    (problem,) = ds.verify()
    assert problem.startswith(f"shard {shards_a[1].name} is missing (recorded in manifest/")


def test_a_shard_copied_under_another_name_is_refused_and_its_episodes_never_count_twice(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    copy = shards_a[0].with_name("99999999999999999999-wcopy-000000.h5")
    shutil.copyfile(shards_a[0], copy)
    with pytest.raises(DamagedDatasetError, match=f"shard {copy.name} holds shard 0 of writer"):
        load_dataset("v/x-v0", root=tmp_path)
    with pytest.warns(UserWarning, match=copy.name):
        ds = load_dataset("v/x-v0", root=tmp_path, on_damage="skip")
    assert ds.total_episodes == 6 == len(list(ds)) and copy not in ds.shard_paths  # counts are what it yields
    writer = shards_a[0].name.split("-")[1]
    assert ds.verify() == [
        f"shard {copy.name} holds shard 0 of writer {writer!r}, not what its name says: a copy under another "
        "name (its episodes would count twice)",
        f"shard {copy.name} has the same content as {shards_a[0].name} (a copy: its episodes count twice)",
    ]


def test_a_copy_under_its_own_writer_and_seq_is_a_duplicate(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    name = shards_a[1].name
    copy = shards_a[1].with_name("00000000000000000001" + name[20:])  # an earlier commit time: sorts first
    shutil.copyfile(shards_a[1], copy)
    with pytest.raises(DamagedDatasetError, match=f"shard {copy.name} is named for the same writer and seq as {name}"):
        load_dataset("v/x-v0", root=tmp_path)
    with pytest.warns(UserWarning):
        assert load_dataset("v/x-v0", root=tmp_path, on_damage="skip").total_episodes == 6


def test_stray_and_truncated_files_are_listed_by_verify(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    shards = shards_a[0].parent
    (shards / "notes.h5").write_bytes(b"not a shard")
    (shards / "README").write_text("hello")
    data = shards_b[0].read_bytes()
    shards_b[0].write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedDatasetError) as raised:
        load_dataset("v/x-v0", root=tmp_path)
    assert len(raised.value.problems) == 2
    with pytest.warns(UserWarning):
        ds = load_dataset("v/x-v0", root=tmp_path, on_damage="skip")
    assert ds.total_episodes == 5
    problems = ds.verify()
    assert problems[0].startswith(
        f"shard {shards_b[0].name} is {len(data) // 2} bytes, but its manifest line (manifest/"
        f"{shards_b[0].name.split('-')[1]}.jsonl line 1) records {len(data)}: truncated or altered since it was "
        f"committed; shard {str(shards_b[0])!r} is corrupt or truncated: "
    )
    assert problems[1:] == [
        "shard notes.h5 is recorded in no manifest and is not named as vcollect names shards "
        "(<time>-<writer>-<seq>.h5): a stray or renamed file",
        "shards/README is not a shard (no .h5 name); reads ignore it",
    ]


def test_verify_names_altered_shards_and_wrong_returns(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    with h5py.File(shards_b[1], "r+") as f:
        f["episodes/return"][...] = [1.5]
    problems = load_dataset("v/x-v0", root=tmp_path).verify()
    assert len(problems) == 3
    assert problems[0].startswith(f"shard {shards_b[1].name}: checksum mismatch")
    assert problems[1] == (
        f"shard {shards_b[1].name}: its manifest line (manifest/{shards_b[1].name.split('-')[1]}.jsonl line 2) "
        "disagrees with the file on return"
    )
    assert problems[2].startswith(f"shard {shards_b[1].name}: episodes/return of 1 episode(s) (rows [0])")


def test_verify_reports_corrupt_shards_and_manifest_damage(tmp_path: Path) -> None:
    shards_a, shards_b = two_writers(tmp_path)
    with open(shards_a[2], "r+b") as f:
        f.truncate(shards_a[2].stat().st_size // 2)
    manifest_file = tmp_path / "v" / "x-v0" / "manifest" / f"{shards_b[0].name.split('-')[1]}.jsonl"
    lines = manifest_file.read_text().splitlines(keepends=True)
    manifest_file.write_text(lines[0] + lines[0] + lines[1] + lines[2][:40])  # a duplicate and a torn last line
    with pytest.warns(UserWarning, match=shards_a[2].name):
        ds = load_dataset("v/x-v0", root=tmp_path, skip_corrupt=True)
    problems = ds.verify()
    assert problems[0] == (
        f"shard {shards_b[0].name} is recorded twice in the manifest ({manifest_file.name} line 1 and "
        f"{manifest_file.name} line 2)"
    )
    assert problems[1] == f"manifest {manifest_file} line 4: a torn last line (a crash mid-append)"
    assert problems[2].startswith(f"shard {shards_a[2].name} is {shards_a[2].stat().st_size} bytes, but its manifest")
    assert f"truncated or altered since it was committed; shard {str(shards_a[2])!r} is corrupt" in problems[2]
    # the shard whose line was torn is whole and named by its writer: taken, no problem
    assert len(problems) == 3 and shards_b[2] in ds.shard_paths and ds.total_episodes == 5


def test_a_shard_damaged_in_place_is_corrupt_for_load_and_verify(tmp_path: Path) -> None:
    shards_a, _ = two_writers(tmp_path)
    with open(shards_a[1], "r+b") as f:  # the size its line records: opened (its mtime changed), and corrupt
        f.write(b"\0" * 64)
    with pytest.raises(CorruptShardError, match=f"shard {str(shards_a[1])!r} is corrupt or truncated"):
        load_dataset("v/x-v0", root=tmp_path)
    with pytest.warns(UserWarning, match="is corrupt or truncated"):
        problems = load_dataset("v/x-v0", root=tmp_path, on_damage="skip").verify()
    assert len(problems) == 2
    assert problems[0].startswith(f"shard {str(shards_a[1])!r} is corrupt or truncated")
    assert problems[1].startswith(f"shard {shards_a[1].name}: checksum mismatch")


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
    assert ds.verify() == []  # whole and named as its writer named it: a sound dataset


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
    with pytest.raises(DamagedDatasetError, match="99999999999999999999-wcopy-000000.h5 holds shard 0"):
        load_dataset("v/x-v0", root=tmp_path)
    with pytest.warns(UserWarning):
        ds = load_dataset("v/x-v0", root=tmp_path, on_damage="skip")
    assert ds.total_episodes == 6  # the shards whose manifest was lost read; the copy does not
    assert ds.verify() == [
        f"{path / 'manifest'} is absent (written before vcollect kept manifests?): missing shards cannot be "
        "detected, and shards are checked only against themselves",
        f"shard 99999999999999999999-wcopy-000000.h5 holds shard 0 of writer {shards_a[0].name.split('-')[1]!r}, "
        "not what its name says: a copy under another name (its episodes would count twice)",
        f"shard 99999999999999999999-wcopy-000000.h5 has the same content as {shards_a[0].name} (a copy: its "
        "episodes count twice)",
    ]


def _episodes(ds: object) -> list[tuple[int | None, list[float], list[list[float]], list[int]]]:
    return [(ep.seed, ep.rewards.tolist(), ep.observations.tolist(), ep.actions.tolist()) for ep in ds]  # type: ignore[attr-defined]


@pytest.mark.parametrize("edit", ["return", "seed", "length", "columns"])
def test_an_edited_manifest_line_is_never_trusted_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    shards_a, _ = two_writers(tmp_path)
    want = _episodes(load_dataset("v/x-v0", root=tmp_path))
    name, writer = shards_a[1].name, shards_a[1].name.split("-")[1]
    manifest_file = tmp_path / "v" / "x-v0" / "manifest" / f"{writer}.jsonl"
    lines = manifest_file.read_text().splitlines()
    entry = json.loads(lines[1])
    if edit == "return":
        entry["return"] = [123.0]
    elif edit == "seed":
        entry["seed"] = [99]
    elif edit == "length":  # a consistent table, one step shorter
        entry["length"], entry["steps"] = [entry["length"][0] - 1], entry["steps"] - 1
    else:  # rewards read from the observations' bytes
        columns = {col[0]: col for col in entry["columns"]}
        columns["rewards"][1], columns["rewards"][3] = "<f8", columns["observations"][3]
    lines[1] = json.dumps(entry, separators=(",", ":"))
    manifest_file.write_text("\n".join(lines) + "\n")  # the shard's size and mtime still match the line
    ds = load_dataset("v/x-v0", root=tmp_path)
    assert _episodes(ds) == want and ds.total_steps == sum(len(ep[1]) for ep in want)
    assert ds.verify() == [
        f"the manifest line of shard {name} (manifest/{writer}.jsonl line 2) was altered after it was written "
        "(its summary_sha256 does not match): reads open the shard instead of trusting it",
        f"shard {name}: its manifest line (manifest/{writer}.jsonl line 2) disagrees with the file on "
        + {"return": "return", "seed": "seed", "length": "steps, length", "columns": "columns"}[edit],
    ]


def test_intact_lines_stand_in_for_their_shards_and_carry_a_checksum(tmp_path: Path) -> None:
    two_writers(tmp_path)
    manifest = read_manifest(tmp_path / "v" / "x-v0")
    assert len(manifest.intact) == 6 and manifest.intact == set(manifest.by_shard)
    entry = next(iter(manifest.by_shard.values()))
    assert list(entry)[-1] == "summary_sha256" and entry["layout"]["actions"] == [["", "<i8", []]]


def test_verify_is_quiet_on_empty_and_just_created_datasets(tmp_path: Path) -> None:
    with EpisodeStore.create("v/empty-v0", OBS, ACT, root=tmp_path):
        pass
    assert (tmp_path / "v" / "empty-v0" / "manifest").is_dir()
    assert load_dataset("v/empty-v0", root=tmp_path).verify() == []
    store = EpisodeStore.create("v/open-v0", OBS, ACT, root=tmp_path)  # a writer still open, nothing committed
    assert load_dataset("v/open-v0", root=tmp_path).verify() == []
    store.close()
    shutil.rmtree(tmp_path / "v" / "empty-v0" / "manifest")  # made by an older vcollect: no manifest, no shards
    assert load_dataset("v/empty-v0", root=tmp_path).verify() == []


def test_shards_renamed_but_not_yet_recorded_are_whole_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that died between a shard's rename and its manifest line (or one about to write it)."""
    with EpisodeStore.create("v/x-v0", OBS, ACT, root=tmp_path):
        pass
    store = EpisodeStore.open("v/x-v0", tmp_path)
    store.write_episode(**episode(0, 3), seed=0, env_id=0)
    store.flush()  # recorded
    monkeypatch.setattr("vcollect.store.write.shard_commits.record_commit", lambda *args: None)
    for code in (1, 2):
        store.write_episode(**episode(code, 2), seed=code, env_id=0)
        store.flush()  # renamed into place, never recorded
    monkeypatch.undo()
    other = EpisodeStore.open("v/x-v0", tmp_path)  # a writer with no manifest line at all
    monkeypatch.setattr("vcollect.store.write.shard_commits.record_commit", lambda *args: None)
    other.write_episode(**episode(3, 1), seed=3, env_id=1)
    other.flush()
    monkeypatch.undo()
    ds = load_dataset("v/x-v0", root=tmp_path)
    assert [ep.seed for ep in ds] == [0, 1, 2, 3] and ds.total_steps == 8
    assert ds.verify() == []


def test_a_shard_committed_between_reading_the_manifest_and_listing_the_shards_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live writer commits (rename, then manifest line) while a reader opens the dataset."""
    two_writers(tmp_path)
    import vcollect.store.read.reader as reader_module

    writer = EpisodeStore.open("v/x-v0", tmp_path)
    calls: list[str] = []

    def commit_after(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            calls.append(name)
            if len(calls) == 1:  # between the reader's two looks at the folder
                writer.write_episode(**episode(9, 2), seed=9, env_id=0)
                writer.flush()
            return out
        return wrapped

    monkeypatch.setattr(reader_module, "read_manifest", commit_after("manifest", reader_module.read_manifest))
    monkeypatch.setattr(reader_module, "dataset_files", commit_after("files", reader_module.dataset_files))
    ds = load_dataset("v/x-v0", root=tmp_path)
    monkeypatch.undo()
    writer.close()
    assert calls[0] == "manifest" and ds.total_episodes == 7 and ds.verify() == []


def test_verify_names_stored_actions_outside_a_narrowed_action_space(tmp_path: Path) -> None:
    two_writers(tmp_path)
    file = tmp_path / "v" / "x-v0" / "dataset.json"
    info = json.loads(file.read_text())
    info["action_space"]["n"] = 3  # Discrete(7) narrowed: stored actions 3..6 no longer fit
    file.write_text(json.dumps(info))
    ds = load_dataset("v/x-v0", root=tmp_path)
    problems = ds.verify()
    assert len(problems) >= 1 and all("stored actions outside dataset.json's action space" in p for p in problems)
    assert "is not in Discrete(3)" in problems[0]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_manifest_line_recorded_while_writing_equals_the_file_read_back(tmp_path: Path, compression: str) -> None:
    """A writer records a shard's manifest line from what it wrote (no second open of the file): every field
    equals what reading the committed file gives, for nested, text, info, extras, options and metadata
    columns, plain or filtered."""
    obs_space = spaces.Dict({"pos": spaces.Box(-1, 1, shape=(2,), dtype=np.float32),
                             "name": spaces.Text(max_length=6)})
    store = EpisodeStore.create("v/facts-v0", obs_space, ACT, root=tmp_path, compression=compression)
    for code in range(3):
        steps = 3 + code
        store.write_episode(
            {"pos": np.full((steps + 1, 2), code / 4, np.float32), "name": np.array(["ab"] * (steps + 1))},
            np.arange(steps) % 7, np.full(steps, 0.5 + code), np.arange(steps) == steps - 1, np.zeros(steps, bool),
            seed=code, env_id=code, infos={"speed": np.arange(steps + 1, dtype=np.float64)},
            extras={"value": np.ones(steps, np.float32)}, metadata={"tag": f"e{code}"}, options={"level": code},
        )
    store.close()
    path = tmp_path / "v" / "facts-v0"
    (shard,) = store.shards_written
    entry = dict(read_manifest(path).by_shard[shard.name])
    entry.pop("summary_sha256")
    fresh = shard_summary(shard)
    assert entry == json.loads(json.dumps(fresh))
    assert entry["extra_tables"] is True and any(column[3] is not None for column in entry["columns"]) == (
        compression == "none"
    )
    assert load_dataset("v/facts-v0", tmp_path).verify() == []
