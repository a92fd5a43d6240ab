"""Nothing outside the datasets root, ever: crafted publish journals are never replayed, and every rename or
deletion of the store refuses paths outside the root or through a symbolic link below it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.store.layout.publish_journal as publish_journal
from vcollect.errors import ForeignJournalWarning, UnsafePathError
from vcollect.store import EpisodeStore, combine_datasets, delete_dataset, list_datasets, load_dataset
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_dir import drop_dir, move_dataset_dir, replace_dataset_dir
from vcollect.store.layout.staging import (
    discard_staging,
    hidden_dir,
    new_staging_dir,
    pid_space,
    publish_dir,
    remove_stale_staging,
)
from vcollect.store.transforms import Staged, publish_staged, stage_combined

OBS = spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT = spaces.Discrete(2)


def make(root: Path, dataset_id: str, episodes: int = 3) -> None:
    with EpisodeStore.create(dataset_id, OBS, ACT, root=root) as store:
        for seed in range(episodes):
            store.write_episode(np.zeros((4, 2), np.float32), np.zeros(3, np.int64), np.ones(3),
                                np.array([False, False, True]), np.zeros(3, bool), seed=seed, env_id=0)


def snapshot(folder: Path) -> list[tuple[str, bytes | None]]:
    """Every path under ``folder`` with its bytes (links not followed): what an operation changed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            found.append((str(path.relative_to(folder)), None if path.is_dir() else path.read_bytes()))
    return sorted(found)


def victim(tmp_path: Path) -> Path:
    """A folder outside the datasets root that an attacker wants replaced."""
    folder = tmp_path / "outside" / "precious"
    folder.mkdir(parents=True)
    (folder / "thesis.txt").write_text("years of work")
    return folder


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60)
    return int(done.stdout)


def attacker_journal(root: Path, moves: list[list[str]], *, signed: bool, age_s: float = 0.0,
                     space: str | None = None) -> Path:
    """A journal at ``root`` as someone else would plant it (in a tarball, a download, a shared folder)."""
    pid = dead_pid()
    name = f".vcollect-publish-{space or pid_space()}-{pid}-{'a' * 12}.json"
    body: dict[str, Any] = {"version": 1, "name": name, "root": os.path.realpath(root), "moves": moves,
                            "marker": "dataset.json", "overwrite": True}
    if signed:
        body["signature"] = publish_journal.journal_signature(body)
    journal = root / name
    journal.write_text(json.dumps(body), encoding="utf-8")
    if age_s:
        then = time.time() - age_s
        os.utime(journal, (then, then))
    return journal


def attacker_staging(root: Path) -> Path:
    staging = root / "evil" / f".x-v0.staging-{pid_space()}-1-{'b' * 12}"
    staging.mkdir(parents=True)
    (staging / "dataset.json").write_text("{}")
    (staging / "payload.txt").write_text("attacker's files")
    return staging


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed-by-this-user"])
@pytest.mark.parametrize("final", ["../outside/precious", "ABSOLUTE", "evil/../../outside/precious"])
def test_a_journal_naming_a_place_outside_the_root_is_never_replayed(tmp_path: Path, final: str,
                                                                     signed: bool) -> None:
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    target = victim(tmp_path)
    before = snapshot(tmp_path / "outside")
    staging = attacker_staging(root)
    final = str(target) if final == "ABSOLUTE" else final
    journal = attacker_journal(root, [[str(staging.relative_to(root)), final, "x"]], signed=signed)
    with pytest.warns(ForeignJournalWarning, match="left the publish journal"):
        assert set(list_datasets(root)) == {"src/a-v0"}
    with pytest.warns(ForeignJournalWarning):
        load_dataset("src/a-v0", root=root)
    assert snapshot(tmp_path / "outside") == before, "a crafted journal changed files outside the root"
    assert journal.exists() and staging.is_dir(), "a foreign journal was acted on instead of left alone"


def test_a_signed_journal_through_a_symlinked_namespace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    target = victim(tmp_path)
    (root / "linked").symlink_to(target.parent)
    staging = root / "linked" / f".precious.staging-{pid_space()}-1-{'c' * 12}"
    staging.mkdir()
    (staging / "dataset.json").write_text("{}")
    before = snapshot(target)
    journal = attacker_journal(root, [[f"linked/{staging.name}", "linked/precious", "x"]], signed=True)
    with pytest.warns(ForeignJournalWarning, match="symbolic link"):
        list_datasets(root)
    assert snapshot(target) == before and journal.exists()


def test_an_hour_old_journal_from_another_machine_is_not_abandoned_into_replay(tmp_path: Path) -> None:
    """Unpacked from a tarball: old, from another process-id space, and not signed with this user's key."""
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    staging = attacker_staging(root)
    journal = attacker_journal(root, [[str(staging.relative_to(root)), "evil/x-v0", "x"]], signed=False,
                               age_s=7200, space="0badf00d")
    with pytest.warns(ForeignJournalWarning, match="signature"):
        list_datasets(root)
    assert not (root / "evil" / "x-v0").exists() and journal.exists()


@pytest.mark.parametrize("content", ['{"moves": []}', "[1, 2]", "not json", "[" * 100_000, ""])
def test_a_malformed_journal_is_reported_and_left_alone(tmp_path: Path, content: str) -> None:
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    journal = root / f".vcollect-publish-{pid_space()}-{dead_pid()}-{'d' * 12}.json"
    journal.write_text(content, encoding="utf-8")
    with pytest.warns(ForeignJournalWarning):
        assert load_dataset("src/a-v0", root=root).total_episodes == 3
    assert journal.read_text(encoding="utf-8") == content


def test_a_fifo_journal_does_not_hang_a_listing(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    os.mkfifo(root / f".vcollect-publish-{pid_space()}-{dead_pid()}-{'e' * 12}.json")
    with pytest.warns(ForeignJournalWarning, match="not a regular file"):
        assert set(list_datasets(root)) == {"src/a-v0"}


def test_an_edited_journal_loses_its_signature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal of this user's own, edited afterwards to point elsewhere, is no longer replayed."""
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    staged = stage_combined(["src/a-v0"], "out/b-v0", root)
    pid = dead_pid()
    monkeypatch.setattr(publish_journal.os, "getpid", lambda: pid)
    monkeypatch.setattr(publish_journal, "publish_dir", _killed)
    with pytest.raises(KeyboardInterrupt):
        publish_staged([staged], root)
    monkeypatch.undo()
    (journal,) = root.glob(".vcollect-publish-*.json")
    plan = json.loads(journal.read_text(encoding="utf-8"))
    plan["moves"][0][1] = "out/c-v0"
    journal.write_text(json.dumps(plan), encoding="utf-8")
    with pytest.warns(ForeignJournalWarning, match="signature"):
        assert "out/c-v0" not in list_datasets(root)
    plan["moves"][0][1] = "out/b-v0"  # put back as written: the owner's journal is finished by the next reader
    journal.write_text(json.dumps(plan), encoding="utf-8")
    assert list_datasets(root)["out/b-v0"]["total_episodes"] == 3
    assert not journal.exists()


def _killed(*args: Any, **kwargs: Any) -> None:
    raise KeyboardInterrupt


def test_a_dead_writers_journal_tmp_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    pid = dead_pid()
    leftover = root / f".vcollect-publish-{pid_space()}-{pid}-{'f' * 12}.json.{pid}.0123abcd.tmp"
    leftover.write_text("{")
    list_datasets(root)
    assert not leftover.exists()


# -- overwrite, combine, export and delete through a symlinked namespace folder -----------------------------

def linked_namespace(tmp_path: Path) -> tuple[Path, Path]:
    """A datasets root whose namespace folder ``ns`` is a link to a folder outside it holding a dataset."""
    root = tmp_path / "datasets"
    make(tmp_path / "outside", "ns/d-v0")
    root.mkdir()
    (root / "ns").symlink_to(tmp_path / "outside" / "ns")
    return root, tmp_path / "outside"


def test_create_with_overwrite_refuses_a_symlinked_namespace(tmp_path: Path) -> None:
    root, outside = linked_namespace(tmp_path)
    before = snapshot(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        EpisodeStore.create("ns/d-v0", OBS, ACT, root=root, overwrite=True)
    assert snapshot(outside) == before


def test_combine_with_overwrite_refuses_a_symlinked_namespace(tmp_path: Path) -> None:
    root, outside = linked_namespace(tmp_path)
    make(root, "src/a-v0")
    before = snapshot(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        combine_datasets(["src/a-v0"], "ns/d-v0", root=root, overwrite=True)
    assert snapshot(outside) == before


def test_delete_refuses_a_symlinked_namespace(tmp_path: Path) -> None:
    root, outside = linked_namespace(tmp_path)
    before = snapshot(outside)
    with pytest.raises(Exception, match="symbolic link"):
        delete_dataset("ns/d-v0", root)
    assert snapshot(outside) == before


def test_export_with_overwrite_refuses_a_symlinked_minari_namespace(tmp_path: Path) -> None:
    from vcollect.minari.interop import export_minari

    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    minari_root = tmp_path / "minari"
    minari_root.mkdir()
    target = victim(tmp_path)
    (target / "data").mkdir()
    (minari_root / "ns").symlink_to(target.parent)
    before = snapshot(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        export_minari("src/a-v0", "ns/precious-v0", minari_root, root=root, overwrite=True)
    assert snapshot(target) == before


# -- the one containment check, on every path that renames or deletes --------------------------------------

def test_check_contained_refuses_what_is_outside_or_linked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to(tmp_path)
    (root / "leaf-link").symlink_to(tmp_path)
    assert check_contained(root / "real" / "x", root, action="delete") == root / "real" / "x"
    assert check_contained(root / "leaf-link", root, action="delete") == root / "leaf-link"  # the link itself
    for bad in (root, tmp_path / "other", root / ".." / "other", root / "real" / ".." / "x", root / "link" / "x",
                Path("/etc/passwd")):
        with pytest.raises(UnsafePathError):
            check_contained(bad, root, action="delete")


def outside_cases(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "datasets"
    make(root, "ns/a-v0")
    target = victim(tmp_path)
    (root / "linked").symlink_to(target.parent)
    staging_out = target.parent / f".precious.staging-{pid_space()}-1-{'0' * 12}"
    staging_out.mkdir()
    (target.parent / "p-v0").mkdir()
    (target.parent / "p-v0" / "dataset.json").write_text("{}")
    return {"root": root, "target": target, "staging_out": staging_out}


OPERATIONS = {
    "publish_dir": lambda c: publish_dir(c["staging_out"], c["target"], root=c["root"], marker="dataset.json",
                                         overwrite=True, exists_message="x"),
    "publish_dir via link": lambda c: publish_dir(
        c["root"] / "linked" / c["staging_out"].name, c["root"] / "linked" / "precious", root=c["root"],
        marker="dataset.json", overwrite=True, exists_message="x"),
    "discard_staging": lambda c: discard_staging(c["staging_out"], c["root"]),
    "discard_staging via link": lambda c: discard_staging(c["root"] / "linked" / c["staging_out"].name, c["root"]),
    "drop_dir": lambda c: drop_dir(c["target"], c["root"]),
    "drop_dir via link": lambda c: drop_dir(c["root"] / "linked" / "precious", c["root"]),
    "replace_dataset_dir via link": lambda c: replace_dataset_dir(
        c["root"] / "ns" / "a-v0", c["root"] / "linked" / "precious", "linked/precious", (0, 0)),
    "move_dataset_dir via link": lambda c: move_dataset_dir(
        c["root"] / "ns" / "a-v0", c["root"] / "linked" / "precious", "linked/precious", source_root=c["root"],
        overwrite=True),
    "move_dataset_dir from outside": lambda c: move_dataset_dir(
        c["target"], c["root"] / "ns" / "b-v0", "ns/b-v0", source_root=c["root"], overwrite=True),
    "new_staging_dir via link": lambda c: new_staging_dir(c["root"] / "linked" / "precious", c["root"]),
    "delete_dataset via link": lambda c: delete_dataset("linked/p-v0", c["root"]),
    "hand-made hidden name": lambda c: discard_staging(hidden_dir(c["root"] / ".." / "precious", "staging"),
                                                       c["root"]),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_every_rename_and_delete_refuses_paths_outside_the_root(tmp_path: Path, operation: str) -> None:
    cases = outside_cases(tmp_path)
    (cases["target"] / "dataset.json").write_text("{}")
    before = snapshot(tmp_path / "outside")
    with pytest.raises(Exception, match="symbolic link|outside the datasets root|holds '..'") as caught:
        OPERATIONS[operation](cases)
    assert isinstance(caught.value, UnsafePathError) or "symbolic link" in str(caught.value)
    assert snapshot(tmp_path / "outside") == before
    assert load_dataset("ns/a-v0", root=cases["root"]).total_episodes == 3


def test_stale_cleanup_never_walks_into_a_linked_folder(tmp_path: Path) -> None:
    cases = outside_cases(tmp_path)
    dead = target_stale = cases["target"].parent / f".old.staging-{pid_space()}-{dead_pid()}-{'9' * 12}"
    dead.mkdir()
    assert remove_stale_staging(cases["root"] / "linked", cases["root"]) == []
    assert target_stale.is_dir()


def test_a_staged_publish_into_the_root_still_works(tmp_path: Path) -> None:
    """The checks refuse only what leaves the root: an ordinary split-style publish goes through."""
    root = tmp_path / "datasets"
    make(root, "src/a-v0")
    parts = [stage_combined(["src/a-v0"], f"out/{n}-v0", root) for n in ("a", "b")]
    publish_staged([Staged(*p) for p in parts], root)
    assert {"out/a-v0", "out/b-v0"} <= set(list_datasets(root))


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed-by-this-user"])
def test_a_dataset_loaded_by_its_folder_holds_journals_to_the_folders_parent(tmp_path: Path, signed: bool) -> None:
    """A dataset named by its folder has that folder's parent as its root: a journal there naming a place
    outside it (here the dataset's grandparent's other folder) is never replayed."""
    parent = tmp_path / "runs"
    make(parent, "a-v0")
    folder = parent / "saved"
    (parent / "a-v0").rename(folder)
    victim(tmp_path)
    before = snapshot(tmp_path / "outside")
    staging = parent / f".x-v0.staging-{pid_space()}-1-{'d' * 12}"
    staging.mkdir()
    (staging / "dataset.json").write_text("{}")
    journal = attacker_journal(parent, [[staging.name, "../outside/precious", "x"]], signed=signed)
    with pytest.warns(ForeignJournalWarning):
        assert load_dataset(folder).total_episodes == 3
    assert snapshot(tmp_path / "outside") == before and journal.exists() and staging.is_dir()


def test_moving_a_store_onto_a_linked_folder_replaces_the_link_never_what_it_points_to(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    target = victim(tmp_path)
    (target / "dataset.json").write_text("{}")  # a dataset's marker, so overwrite takes it for one
    before = snapshot(tmp_path / "outside")
    (tmp_path / "runs").mkdir()
    link = tmp_path / "runs" / "saved"
    link.symlink_to(target)
    with EpisodeStore.create("s/a-v0", OBS, ACT, root=root) as store:
        store.write_episode(np.zeros((4, 2), np.float32), np.zeros(3, np.int64), np.ones(3),
                            np.array([False, False, True]), np.zeros(3, bool), seed=0, env_id=0)
        assert store.move_to(link, overwrite=True) == link
        assert (store.dataset_id, store.path) == ("saved", link)
    assert snapshot(tmp_path / "outside") == before, "the overwrite reached through the link"
    assert not link.is_symlink() and load_dataset(link).total_episodes == 1
    with EpisodeStore.create("s/b-v0", OBS, ACT, root=root) as other, pytest.raises(
            ValueError, match="root= applies to dataset ids"):
        other.move_to(tmp_path / "x", root=root)
