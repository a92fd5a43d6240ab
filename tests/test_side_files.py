"""A dataset's small JSON files (dataset.json, episode_metadata.json, namespace_metadata.json) are read so
that nothing there can hang or exhaust a reader: a FIFO, a link to /dev/zero, a folder, a file nested too
deeply or too large is a CorruptDatasetError naming the file."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.cli import main
from vcollect.errors import CorruptDatasetError
from vcollect.store import EpisodeStore, create_namespace, get_namespace_metadata, load_dataset
from vcollect.store.layout.dataset_info import MAX_SIDE_FILE_BYTES


def make(root: Path) -> Path:
    create_namespace("ns", root=root, description="plain")
    with EpisodeStore.create("ns/a-v0", spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2),
                             root=root) as store:
        store.write_episode(np.zeros((3, 2), np.float32), np.zeros(2, np.int64), np.ones(2),
                            np.array([False, True]), np.zeros(2, bool), seed=0, env_id=0)
    return root / "ns" / "a-v0"


def fifo(file: Path) -> None:
    os.mkfifo(file)


def dev_zero(file: Path) -> None:
    file.symlink_to("/dev/zero")


def folder(file: Path) -> None:
    file.mkdir()


def deep(file: Path) -> None:
    file.write_text("[" * 200_000 + "]" * 200_000)


def huge(file: Path) -> None:
    with open(file, "wb") as f:
        f.truncate(MAX_SIDE_FILE_BYTES + 1)


DAMAGE: dict[str, Callable[[Path], None]] = {"fifo": fifo, "dev-zero": dev_zero, "folder": folder, "deep": deep,
                                             "huge": huge}


def replace(file: Path, damage: str) -> None:
    if file.exists() or file.is_symlink():
        shutil.rmtree(file) if file.is_dir() and not file.is_symlink() else file.unlink()
    DAMAGE[damage](file)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("which", ["dataset.json", "episode_metadata.json"])
def test_a_damaged_side_file_is_a_clear_error_not_a_hang(tmp_path: Path, damage: str, which: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path)
    replace(path / which, damage)
    with pytest.raises(CorruptDatasetError, match=which.replace(".", r"\.")):
        ds = load_dataset("ns/a-v0", root=tmp_path)
        ds.episode_metadata  # noqa: B018 - read on use
        list(ds.iterate_episodes())
    assert main(["show", "ns/a-v0", "--root", str(tmp_path)]) != 0
    assert which in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_namespace_file_is_a_clear_error_not_a_hang(tmp_path: Path, damage: str) -> None:
    make(tmp_path)
    replace(tmp_path / "ns" / "namespace_metadata.json", damage)
    with pytest.raises(CorruptDatasetError, match="namespace_metadata"):
        get_namespace_metadata("ns", root=tmp_path)
