"""list_datasets lists every dataset under the root, broken ones included (marked, with the file and the error)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.errors import DamagedDatasetError
from vcollect.store import EpisodeStore, list_datasets
from vcollect.store.read.reader import StoredDataset

OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float64)
ACT = spaces.Discrete(7)


def write(root: Path, dataset_id: str, steps: tuple[int, ...] = (2, 3)) -> Path:
    with EpisodeStore.create(dataset_id, OBS, ACT, root=root, metadata={"author": "a"}) as store:
        for i, n in enumerate(steps):
            store.write_episode(
                observations=np.zeros((n + 1, 2)), actions=np.zeros(n, np.int64), rewards=np.ones(n),
                terminations=np.eye(1, n, n - 1, dtype=bool)[0], truncations=np.zeros(n, bool), seed=i, env_id=0,
            )
    return store.path


def not_json(file: Path) -> str:
    file.write_bytes(b"{nope")
    return "is not valid JSON"


def not_utf8(file: Path) -> str:
    file.write_bytes(b"\xff\xfe")
    return "is not UTF-8 text"


def other_format(file: Path) -> str:
    file.write_text(json.dumps({"format": "something-else"}))
    return "is not a vcollect dataset description"


def a_fifo(file: Path) -> str:
    file.unlink()
    os.mkfifo(file)
    return "is not a regular file"


def dangling_link(file: Path) -> str:
    file.unlink()
    file.symlink_to(file.parent / "gone.json")
    return "which does not exist"


BREAKERS: dict[str, Callable[[Path], str]] = {
    "not-json": not_json, "not-utf8": not_utf8, "other-format": other_format, "fifo": a_fifo,
    "dangling-link": dangling_link,
}


@pytest.mark.parametrize("case", list(BREAKERS))
def test_a_broken_dataset_is_listed_marked_with_its_file_and_error(tmp_path: Path, case: str) -> None:
    write(tmp_path, "l/a-v0")
    bad = write(tmp_path, "l/bad-v0")
    write(tmp_path, "l/z-v0", steps=(4,))
    fault = BREAKERS[case](bad / "dataset.json")
    listing = list_datasets(tmp_path)
    assert list(listing) == ["l/a-v0", "l/bad-v0", "l/z-v0"]  # sorted, the broken one in its place
    broken = listing["l/bad-v0"]
    assert str(bad / "dataset.json") in broken["broken"] and fault in broken["broken"]
    assert broken["dataset_id"] == "l/bad-v0"
    assert broken["total_episodes"] is None and broken["total_steps"] is None and broken["num_shards"] is None
    assert broken["size_bytes"] >= sum(p.stat().st_size for p in (bad / "shards").iterdir())  # files left there
    for good, (episodes, steps) in (("l/a-v0", (2, 5)), ("l/z-v0", (1, 4))):
        assert listing[good]["broken"] is None and listing[good]["author"] == "a"
        assert (listing[good]["total_episodes"], listing[good]["total_steps"], listing[good]["num_shards"]) == (
            episodes, steps, 1)


def test_an_unlistable_dataset_folder_is_listed_broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset folder that cannot be read (permissions: simulated, as root reads everything) is not hidden."""
    write(tmp_path, "l/a-v0")
    bad = write(tmp_path, "l/bad-v0")
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) == str(bad):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    listing = list_datasets(tmp_path)
    assert list(listing) == ["l/a-v0", "l/bad-v0"] and listing["l/a-v0"]["total_episodes"] == 2
    assert "Permission denied" in listing["l/bad-v0"]["broken"] and str(bad) in listing["l/bad-v0"]["broken"]
    assert listing["l/bad-v0"]["total_episodes"] is None


def test_folders_that_are_no_dataset_ids_are_not_listed(tmp_path: Path) -> None:
    write(tmp_path, "l/a-v0")
    (tmp_path / "l" / ".staging-x").mkdir()
    (tmp_path / "l" / ".staging-x" / "dataset.json").write_text("{nope")  # not an id: a staging folder
    (tmp_path / "l" / "noversion").mkdir()
    (tmp_path / "l" / "noversion" / "dataset.json").write_text("{}")
    assert list(list_datasets(tmp_path)) == ["l/a-v0"]


def test_listing_takes_totals_from_the_manifest_without_opening_shards(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    opened = spy_on_shard_opens(monkeypatch)
    obs, act = spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2)
    with EpisodeStore.create("m/many-v0", obs, act, root=tmp_path, shard_steps=3) as store:
        for seed in range(8):
            store.write_episode(np.zeros((4, 2), np.float32), np.zeros(3, np.int64), np.ones(3),
                                np.array([False, False, True]), np.zeros(3, bool), seed=seed, env_id=0,
                                metadata={"k": seed})  # tables the manifest lines do not summarise
    entry = list_datasets(tmp_path)["m/many-v0"]
    assert (entry["total_episodes"], entry["total_steps"], entry["num_shards"]) == (8, 24, 8)
    assert opened == [], "listing opened shards the manifest describes"
    touched = sorted((tmp_path / "m" / "many-v0" / "shards").glob("*.h5"))[0]
    os.utime(touched, ns=(1, 1))  # no longer as committed: this one is opened
    assert list_datasets(tmp_path)["m/many-v0"]["total_episodes"] == 8 and opened == [touched]


def spy_on_shard_opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The shard files the census reads (a StoredShard made without a manifest line opens its file)."""
    import vcollect.store.read.shards.shard_census as census

    opened: list[Path] = []
    real = census.StoredShard

    def spy(path: Path, obs: Any, act: Any, summary: Any = None) -> Any:
        if summary is None:
            opened.append(path)
        return real(path, obs, act, summary)

    monkeypatch.setattr(census, "StoredShard", spy)
    return opened


def delete_a_shard(shards: list[Path]) -> None:
    shards[1].unlink()


def copy_a_shard(shards: list[Path]) -> None:
    shutil.copy(shards[0], shards[0].with_name("99999999999999999999-wcopy-000000.h5"))


def copy_under_its_writers_name(shards: list[Path]) -> None:
    """A copy named as its own writer would name a later shard: the name parses, the file says otherwise."""
    time, writer, _ = shards[0].name[: -len(".h5")].split("-")
    shutil.copy(shards[0], shards[0].with_name(f"{int(time) + 10**15}-{writer}-000099.h5"))


def edit_a_manifest_line(shards: list[Path]) -> None:
    """A manifest line's episode count changed (its checksum no longer holds): the file decides."""
    manifest = sorted((shards[0].parent.parent / "manifest").glob("*.jsonl"))[0]
    lines = manifest.read_text().splitlines()
    line = json.loads(lines[0])
    line["episodes"] += 5
    line["steps"] += 50
    lines[0] = json.dumps(line, separators=(",", ":"))
    manifest.write_text("\n".join(lines) + "\n")


def truncate_a_shard(shards: list[Path]) -> None:
    data = shards[2].read_bytes()
    shards[2].write_bytes(data[: len(data) // 2])


def a_stray_file(shards: list[Path]) -> None:
    shards[0].with_name("stray.h5").write_bytes(b"not hdf5")


DAMAGE: dict[str, Callable[[list[Path]], None]] = {
    "deleted": delete_a_shard, "copied": copy_a_shard, "copied-as-its-writer": copy_under_its_writers_name,
    "edited-line": edit_a_manifest_line, "truncated": truncate_a_shard, "stray": a_stray_file,
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_listed_counts_are_what_the_dataset_yields_and_damage_is_marked(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vcollect.store import load_dataset

    path = write(tmp_path, "d/hurt-v0", steps=(2, 3, 4, 5, 6, 7))
    write(tmp_path, "d/whole-v0")
    with EpisodeStore.open("d/hurt-v0", root=tmp_path, shard_steps=1) as store:  # a shard per episode
        for i, n in enumerate((3, 4, 5)):
            store.write_episode(np.zeros((n + 1, 2)), np.zeros(n, np.int64), np.ones(n), np.arange(n) == n - 1,
                                np.zeros(n, bool), seed=i, env_id=1)
    shards = sorted((path / "shards").glob("*.h5"))
    assert len(shards) == 4
    DAMAGE[case](shards)
    opened = spy_on_shard_opens(monkeypatch)
    listing = list_datasets(tmp_path)
    entry = listing["d/hurt-v0"]
    unrecorded = {"copied", "copied-as-its-writer", "stray", "edited-line", "truncated"}
    assert len(opened) <= (1 if case in unrecorded else 0), f"listing read shards its manifest lines describe: {opened}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yielded = load_dataset("d/hurt-v0", root=tmp_path, on_damage="skip")
    assert (entry["total_episodes"], entry["total_steps"], entry["num_shards"]) == (
        yielded.total_episodes, yielded.total_steps, len(StoredDataset(yielded).shard_paths))
    try:
        load_dataset("d/hurt-v0", root=tmp_path)
    except DamagedDatasetError as exc:
        assert entry["damage"] == exc.problems and entry["broken"] is None  # marked, with the read's own words
    else:
        assert case == "edited-line" and entry["damage"] == []  # the file decides; nothing is damaged
    assert all(Path(p).name in " ".join(entry["damage"]) for p in entry["corrupt_shards"])
    assert bool(entry["damage"]) == (case != "edited-line")
    assert listing["d/whole-v0"]["damage"] == [] and listing["d/whole-v0"]["total_episodes"] == 2


def test_vcollect_list_marks_a_damaged_dataset_and_counts_what_it_yields(tmp_path: Path) -> None:
    path = write(tmp_path, "d/hurt-v0")
    with EpisodeStore.open("d/hurt-v0", root=tmp_path, shard_steps=1) as store:
        store.write_episode(np.zeros((4, 2)), np.zeros(3, np.int64), np.ones(3), np.arange(3) == 2,
                            np.zeros(3, bool), seed=9, env_id=1)
    shards = sorted((path / "shards").glob("*.h5"))
    shutil.copy(shards[0], shards[0].with_name("99999999999999999999-wcopy-000000.h5"))
    written = subprocess.run([sys.executable, "-m", "vcollect", "list", "--root", str(tmp_path)],
                             capture_output=True, text=True, timeout=120, check=False,
                             env={**os.environ, "COLUMNS": "200"})
    assert written.returncode == 0, written.stderr
    text = " ".join(written.stdout.split())
    assert "d/hurt-v0 (damaged)" in text and "counts are of its whole shards only" in text
    row = next(line for line in written.stdout.splitlines() if "d/hurt-v0" in line)
    assert [c.strip() for c in row.strip("│┃ ").split("│")][1:3] == ["3", "8"]  # 2 + 1 episodes, 5 + 3 steps
