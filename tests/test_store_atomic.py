"""combine / import-minari / export build the new dataset under a hidden staging name and publish it with one
rename: killed or failing part-way, nothing appears under the id and the next operation removes the leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.minari.interop as minari_interop
from tests.test_store_leftovers import read_line
from vcollect.errors import DatasetError, DatasetExistsError, DatasetNotFoundError
from vcollect.minari import export_minari, import_minari
from vcollect.store import EpisodeStore, combine_datasets, list_datasets, load_dataset
from vcollect.store.layout.staging import pid_space

REPO = Path(__file__).resolve().parents[1]
OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float32)
ACT = spaces.Discrete(3)


def make(root: Path, dataset_id: str, seeds: range, steps: int = 5) -> None:
    with EpisodeStore.create(dataset_id, OBS, ACT, root=root) as store:
        for seed in seeds:
            obs = np.stack([np.full(steps + 1, seed), np.arange(steps + 1)], axis=1).astype(np.float32)
            store.write_episode(obs, np.arange(steps) % 3, np.full(steps, float(seed)), np.arange(steps) == steps - 1,
                                np.zeros(steps, bool), seed=seed, env_id=0)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def seeds_of(dataset_id: str, root: Path) -> list[int]:
    return [e.seed for e in load_dataset(dataset_id, root=root)]


# Combines a (10 episodes) and b (10 episodes); b's episodes stop coming after 4: the child says "mid" and
# waits there to be killed. By then a's episodes are a committed shard of the staging dataset.
KILLED_COMBINE = textwrap.dedent(
    """
    import sys
    from vcollect.store import combine_datasets, load_dataset

    root = sys.argv[1]
    a, b = load_dataset("src/a-v0", root), load_dataset("src/b-v0", root)
    real = b.iterate_episodes

    def stalling():
        for i, episode in enumerate(real()):
            if i == 4:
                print("mid", flush=True)
                sys.stdin.readline()
            yield episode

    b.iterate_episodes = stalling
    combine_datasets([a, b], "out/both-v0", root)
    print("done", flush=True)
    """
)


def test_combine_killed_part_way_leaves_nothing_under_the_id(tmp_path: Path) -> None:
    make(tmp_path, "src/a-v0", range(10))
    make(tmp_path, "src/b-v0", range(100, 110))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_COMBINE, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert read_line(proc) == "mid"
        (staging,) = [tmp_path / "out" / name for name in hidden(tmp_path / "out")]
        assert staging.name.startswith(f".both-v0.staging-{pid_space()}-{proc.pid}-")
        assert len(list((staging / "shards").glob("*.h5"))) == 1  # part-way: the first source is committed
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert not (tmp_path / "out" / "both-v0").exists()
    assert sorted(list_datasets(tmp_path)) == ["src/a-v0", "src/b-v0"]
    assert staging.is_dir()  # the crash's leftover, until the next operation in its folder
    with pytest.raises(DatasetNotFoundError):
        load_dataset("out/both-v0", root=tmp_path)  # that one: looking for the missing id there cleans it
    assert not staging.exists()

    combined = combine_datasets(["src/a-v0", "src/b-v0"], "out/both-v0", tmp_path)
    assert [e.seed for e in combined] == [*range(10), *range(100, 110)]
    assert hidden(tmp_path / "out") == []  # the dead combine's staging folder is gone, and ours renamed
    assert combined.metadata["combined_datasets"] == ["src/a-v0", "src/b-v0"]


def test_combine_failing_part_way_or_onto_an_existing_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path, "src/a-v0", range(3))
    make(tmp_path, "src/b-v0", range(3, 6))
    b = load_dataset("src/b-v0", tmp_path)

    def failing() -> Iterator[object]:
        yield next(iter(load_dataset("src/b-v0", tmp_path)))
        raise OSError("source shard unreadable")

    monkeypatch.setattr(b, "iterate_episodes", failing)
    with pytest.raises(OSError, match="source shard unreadable"):
        combine_datasets(["src/a-v0", b], "out/x-v0", tmp_path)
    assert not (tmp_path / "out").exists()  # neither the id nor a staging folder (nor the namespace it made)

    combine_datasets(["src/a-v0"], "out/x-v0", tmp_path, metadata={"note": "first"})
    with pytest.raises(DatasetExistsError, match="'out/x-v0' already exists"):
        combine_datasets(["src/b-v0"], "out/x-v0", tmp_path)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["x-v0"]
    assert seeds_of("out/x-v0", tmp_path) == [0, 1, 2]
    assert load_dataset("out/x-v0", tmp_path).metadata["note"] == "first"


def test_stale_staging_folders_removed_only_when_their_process_is_dead(tmp_path: Path) -> None:
    make(tmp_path, "src/a-v0", range(2))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f".x-v0.staging-{pid_space()}-{dead.pid}-0123456789ab"
    live = out / f".y-v0.staging-{pid_space()}-{os.getpid()}-0123456789ab"
    replaced = out / f".z-v0.replaced-{pid_space()}-{dead.pid}-0123456789ab"
    unrelated = out / ".my-notes"
    for folder in (stale, live, replaced, unrelated):
        (folder / "shards").mkdir(parents=True)
        (folder / "dataset.json").write_text("{}")
    combine_datasets(["src/a-v0"], "out/new-v0", tmp_path)
    assert hidden(out) == sorted([live.name, unrelated.name])
    assert seeds_of("out/new-v0", tmp_path) == [0, 1]


def test_import_failing_part_way_keeps_the_dataset_it_would_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(tmp_path, "src/a-v0", range(4))
    minari_root = tmp_path / "minari"
    export_minari("src/a-v0", "mm/a-v0", minari_root, root=tmp_path)
    make(tmp_path, "imp/a-v0", range(50, 52))
    real = minari_interop._iter_minari_episodes

    def failing(*args: object) -> Iterator[dict[str, object]]:
        episodes = real(*args)  # type: ignore[arg-type]
        yield next(episodes)
        yield next(episodes)
        raise OSError("read error in main_data.hdf5")

    monkeypatch.setattr(minari_interop, "_iter_minari_episodes", failing)
    with pytest.raises(OSError, match="read error"):
        import_minari("mm/a-v0", "imp/a-v0", tmp_path, overwrite=True, minari_root=minari_root)
    assert seeds_of("imp/a-v0", tmp_path) == [50, 51]  # the old dataset, untouched
    with pytest.raises(OSError, match="read error"):
        import_minari("mm/a-v0", "imp/new-v0", tmp_path, minari_root=minari_root)
    assert [p.name for p in (tmp_path / "imp").iterdir()] == ["a-v0"]  # no new id, no staging folder

    monkeypatch.undo()
    with pytest.raises(DatasetExistsError, match="'imp/a-v0' already exists"):
        import_minari("mm/a-v0", "imp/a-v0", tmp_path, minari_root=minari_root)
    import_minari("mm/a-v0", "imp/a-v0", tmp_path, overwrite=True, minari_root=minari_root)
    assert seeds_of("imp/a-v0", tmp_path) == [0, 1, 2, 3]
    assert [p.name for p in (tmp_path / "imp").iterdir()] == ["a-v0"]


def test_export_leaves_no_hidden_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path, "src/a-v0", range(3))
    make(tmp_path, "src/b-v0", range(7, 9))
    minari_root = tmp_path / "minari"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (minari_root / "mm").mkdir(parents=True)
    crashed = minari_root / "mm" / f".a-v0.staging-{pid_space()}-{dead.pid}-0123456789ab"
    (crashed / "data").mkdir(parents=True)

    path = export_minari("src/a-v0", "mm/a-v0", minari_root, root=tmp_path)
    assert hidden(minari_root / "mm") == []  # the crashed export's folder removed, ours renamed
    before = (path / "data" / "main_data.hdf5").read_bytes()

    real = minari_interop._write_main_file

    def failing(dataset: object, file: Path) -> None:
        real(dataset, file)  # type: ignore[arg-type]
        raise OSError("disk error after the main file")

    monkeypatch.setattr(minari_interop, "_write_main_file", failing)
    with pytest.raises(OSError, match="disk error"):
        export_minari("src/b-v0", "mm/a-v0", minari_root, overwrite=True, root=tmp_path)
    assert hidden(minari_root / "mm") == []
    assert (path / "data" / "main_data.hdf5").read_bytes() == before  # the old export, untouched

    monkeypatch.undo()
    export_minari("src/b-v0", "mm/a-v0", minari_root, overwrite=True, root=tmp_path)
    assert hidden(minari_root / "mm") == []
    assert seeds_of_minari(minari_root) == [7, 8]


def seeds_of_minari(minari_root: Path) -> list[int]:
    return [e.seed for e in import_minari("mm/a-v0", "back/a-v0", minari_root / "back", minari_root=minari_root)]


def test_publish_replaces_empty_folders_only(tmp_path: Path) -> None:
    make(tmp_path, "src/a-v0", range(2))
    (tmp_path / "out" / "empty-v0" / "shards").mkdir(parents=True)  # what a failed create used to leave
    combine_datasets(["src/a-v0"], "out/empty-v0", tmp_path)
    assert seeds_of("out/empty-v0", tmp_path) == [0, 1]

    make(tmp_path, "out/ns-v0/inner-v1", range(5, 7))  # a dataset in the namespace 'out/ns-v0'
    with pytest.raises(DatasetError, match="something that is not a dataset is there"):
        combine_datasets(["src/a-v0"], "out/ns-v0", tmp_path)
    with pytest.raises(DatasetError, match="something that is not a dataset is there"):
        import_minari(export_minari("src/a-v0", "mm/a-v0", tmp_path / "minari", root=tmp_path), "out/ns-v0",
                      tmp_path, overwrite=True)
    assert seeds_of("out/ns-v0/inner-v1", tmp_path) == [5, 6]  # kept, even with overwrite=True
    assert hidden(tmp_path / "out") == []


def test_export_fsyncs_its_files_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path, "src/a-v0", range(2))
    real_fsync = os.fsync
    synced: list[str] = []

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    path = export_minari("src/a-v0", "mm/a-v0", tmp_path / "minari", root=tmp_path)
    names = [Path(p).name for p in synced if ".staging-" in p]
    assert "main_data.hdf5" in names and "metadata.json" in names  # written in the staging folder, synced there
    assert str(path.parent) in synced  # and the rename into place


def test_import_overwriting_a_symlinked_dataset_replaces_the_link(tmp_path: Path) -> None:
    make(tmp_path, "src/a-v0", range(3))
    make(tmp_path / "elsewhere", "x/linked-v0", range(40, 42))
    (tmp_path / "imp").mkdir()
    (tmp_path / "imp" / "l-v0").symlink_to(tmp_path / "elsewhere" / "x" / "linked-v0")
    export_minari("src/a-v0", "mm/a-v0", tmp_path / "minari", root=tmp_path)
    import_minari("mm/a-v0", "imp/l-v0", tmp_path, overwrite=True, minari_root=tmp_path / "minari")
    assert not (tmp_path / "imp" / "l-v0").is_symlink() and seeds_of("imp/l-v0", tmp_path) == [0, 1, 2]
    assert hidden(tmp_path / "imp") == []
    assert seeds_of("x/linked-v0", tmp_path / "elsewhere") == [40, 41]  # what the link pointed to is kept
