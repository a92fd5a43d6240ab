"""list_datasets lists every dataset under the root, broken ones included (marked, with the file and the error)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.store import EpisodeStore, list_datasets

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
    import vcollect.store.layout.catalog as catalog

    obs, act = spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2)
    with EpisodeStore.create("m/many-v0", obs, act, root=tmp_path, shard_steps=3) as store:
        for seed in range(8):
            store.write_episode(np.zeros((4, 2), np.float32), np.zeros(3, np.int64), np.ones(3),
                                np.array([False, False, True]), np.zeros(3, bool), seed=seed, env_id=0)
    opened: list[Path] = []
    real = catalog._shard_totals
    monkeypatch.setattr(catalog, "_shard_totals", lambda file: (opened.append(file), real(file))[1])
    entry = catalog.list_datasets(tmp_path)["m/many-v0"]
    assert (entry["total_episodes"], entry["total_steps"], entry["num_shards"]) == (8, 24, 8)
    assert opened == [], "listing opened shards the manifest describes"
    touched = sorted((tmp_path / "m" / "many-v0" / "shards").glob("*.h5"))[0]
    os.utime(touched, ns=(1, 1))  # no longer as committed: this one is opened
    assert catalog.list_datasets(tmp_path)["m/many-v0"]["total_episodes"] == 8 and opened == [touched]
