"""The publish journal (store/layout/publish_journal.py): several staged datasets published all or none; a dead
process's committed journal is finished by the next reader, and its staging folders are never cleaned away."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.store.layout.publish_journal as publish_journal
from vcollect.errors import DatasetExistsError
from vcollect.store import EpisodeStore, list_datasets, load_dataset
from vcollect.store.layout.staging import JOURNAL_NAME_FILE, pid_space, remove_stale_staging
from vcollect.store.transforms import Staged, publish_staged, stage_combined

OBS = spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT = spaces.Discrete(2)


def source(root: Path, episodes: int = 6) -> None:
    with EpisodeStore.create("src/s-v0", OBS, ACT, root=root) as store:
        for seed in range(episodes):
            store.write_episode(np.zeros((4, 2), np.float32), np.zeros(3, np.int64), np.ones(3),
                                np.array([False, False, True]), np.zeros(3, bool), seed=seed, env_id=0)


def killed(*args: Any, **kwargs: Any) -> None:
    """Stands in for publish_dir: the owner stops before a move, as a SIGKILL would stop it."""
    raise KeyboardInterrupt


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60)
    return int(done.stdout)


def test_parts_publish_together_or_not_at_all(tmp_path: Path) -> None:
    source(tmp_path)
    parts = [stage_combined(["src/s-v0"], f"out/{n}-v0", tmp_path) for n in ("a", "b")]
    assert list_datasets(tmp_path).keys() == {"src/s-v0"}, "a staged part is visible before publishing"
    publish_staged(parts, tmp_path)
    assert list_datasets(tmp_path).keys() == {"src/s-v0", "out/a-v0", "out/b-v0"}
    assert not (tmp_path / "out" / "a-v0" / JOURNAL_NAME_FILE).exists()
    assert not list(tmp_path.glob(".vcollect-publish-*"))
    # an existing target refuses the whole group before anything moves, and leaves no staging behind
    again = [stage_combined(["src/s-v0"], f"out/{n}-v0", tmp_path, overwrite=True) for n in ("c", "a")]
    with pytest.raises(DatasetExistsError, match="out/a-v0"):
        publish_staged(again, tmp_path)
    assert "out/c-v0" not in list_datasets(tmp_path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a-v0", "b-v0"]


def test_a_dead_owners_journal_is_finished_by_the_next_reader(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    source(tmp_path)
    parts = [stage_combined(["src/s-v0"], f"out/{n}-v0", tmp_path) for n in ("a", "b")]
    real = publish_journal.publish_dir
    calls: list[Any] = []

    def dies_after_the_first(*args: Any, **kwargs: Any) -> None:
        if calls:
            raise KeyboardInterrupt  # the owner stops between the two moves, as a SIGKILL would stop it
        calls.append(args)
        real(*args, **kwargs)

    monkeypatch.setattr(publish_journal, "publish_dir", dies_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        publish_staged(parts, tmp_path)
    monkeypatch.setattr(publish_journal, "publish_dir", real)
    assert parts[1].staging.is_dir(), "a staging folder of a committed publish was discarded"
    load_dataset("out/a-v0", root=tmp_path)  # the owner (this process) is alive: the journal waits for it
    assert not (tmp_path / "out" / "b-v0").exists()
    monkeypatch.setattr(publish_journal, "is_stale", lambda *args: True)  # now its owner is gone
    assert load_dataset("out/b-v0", root=tmp_path).total_episodes == 6
    assert not list(tmp_path.glob(".vcollect-publish-*"))


def test_stale_cleanup_keeps_a_staging_folder_its_journal_needs(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    source(tmp_path)
    staged = stage_combined(["src/s-v0"], "out/a-v0", tmp_path)
    pid = dead_pid()
    staging = staged.staging.rename(staged.staging.with_name(f".a-v0.staging-{pid_space()}-{pid}-{'0' * 12}"))
    # the journal of a dead owner: written by publish_staged with that pid, killed before its first move
    monkeypatch.setattr(publish_journal.os, "getpid", lambda: pid)
    monkeypatch.setattr(publish_journal, "publish_dir", killed)
    with pytest.raises(KeyboardInterrupt):
        publish_staged([Staged(staging, staged.final, staged.exists_message)], tmp_path)
    monkeypatch.undo()
    (journal,) = tmp_path.glob(".vcollect-publish-*.json")
    assert f"-{pid}-" in journal.name
    assert remove_stale_staging(staging.parent, tmp_path) == [] and staging.is_dir()
    assert list_datasets(tmp_path)["out/a-v0"]["total_episodes"] == 6
    journal.unlink(missing_ok=True)
    orphan = tmp_path / "out" / f".x-v0.staging-{pid_space()}-{pid}-{'2' * 12}"
    orphan.mkdir()
    (orphan / JOURNAL_NAME_FILE).write_text(str(tmp_path / "no-such-journal.json"), encoding="utf-8")
    assert remove_stale_staging(orphan.parent, tmp_path) == [orphan], "an uncommitted staging folder was kept"
