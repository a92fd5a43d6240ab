"""delete and overwrite are all or nothing: the old dataset is renamed aside (one rename) before anything is
removed, racing overwrites of one id leave exactly one winner, and no dataset ever lies inside another's folder."""

from __future__ import annotations

import itertools
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.store.layout.dataset_dir as dataset_dir
from tests import forked_scripts
from tests.test_store_leftovers import read_line
from vcollect.cli import main
from vcollect.errors import DatasetError, DatasetNotFoundError, InvalidDatasetIdError
from vcollect.store import (
    EpisodeStore,
    combine_datasets,
    delete_dataset,
    list_datasets,
    load_dataset,
)

REPO = Path(__file__).resolve().parents[1]
CHILDREN = itertools.count()
OBS = spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float32)
ACT = spaces.Discrete(3)


def make(root: Path, dataset_id: str, seeds: range, steps: int = 5, **kwargs: object) -> None:
    with EpisodeStore.create(dataset_id, OBS, ACT, root=root, shard_steps=steps, **kwargs) as store:  # type: ignore[arg-type]
        for seed in seeds:
            obs = np.stack([np.full(steps + 1, seed), np.arange(steps + 1)], axis=1).astype(np.float32)
            store.write_episode(obs, np.arange(steps) % 3, np.full(steps, float(seed)), np.arange(steps) == steps - 1,
                                np.zeros(steps, bool), seed=seed, env_id=0)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def seeds_of(dataset_id: str, root: Path) -> list[int]:
    return [e.seed for e in load_dataset(dataset_id, root=root)]


def child(script: str, root: Path, *args: str) -> forked_scripts.Forked:
    """``python -c script root *args`` in a process of its own, stdin and stdout piped, forked from a server
    that has imported vcollect (tests/forked_scripts.py): a real process, killed with real signals."""
    stderr = root.parent / f"{root.name}-stderr-{next(CHILDREN)}.txt"
    return forked_scripts.Forked(["-c", textwrap.dedent(script), str(root), *args], {}, str(REPO), str(stderr))


def kill(proc: forked_scripts.Forked) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


# Deletes a dataset of many shards; the removal of the renamed-away folder has unlinked half of its shards when
# the child says "mid" and waits there to be killed.
KILLED_DELETE = """
    import os, shutil, sys
    import vcollect.store.layout.catalog as catalog

    def half_then_wait(path, *args, **kwargs):
        shards = sorted((path / "shards").iterdir())
        for shard in shards[: len(shards) // 2]:
            os.unlink(shard)
        print("mid", path.name, flush=True)
        sys.stdin.read()  # until killed

    catalog.shutil.rmtree = half_then_wait
    catalog.delete_dataset("ns/big-v0", sys.argv[1])
"""


def test_delete_killed_part_way_leaves_no_half_deleted_dataset(tmp_path: Path) -> None:
    make(tmp_path, "ns/big-v0", range(60))
    make(tmp_path, "ns/other-v0", range(3))
    assert list_datasets(tmp_path)["ns/big-v0"]["num_shards"] == 60
    proc = child(KILLED_DELETE, tmp_path)
    line = read_line(proc)
    assert line.startswith("mid .big-v0.deleting-")
    kill(proc)
    leftover = tmp_path / "ns" / line.split()[1]
    assert leftover.is_dir() and 0 < len(list((leftover / "shards").iterdir())) < 60  # really half-deleted

    assert "ns/big-v0" not in list_datasets(tmp_path)  # the id is gone at once, not half of it
    assert not (tmp_path / "ns" / "big-v0").exists()
    with pytest.raises(DatasetNotFoundError):
        load_dataset("ns/big-v0", tmp_path)
    assert list(list_datasets(tmp_path)) == ["ns/other-v0"]

    EpisodeStore.open("ns/other-v0", tmp_path).close()  # the next open in the namespace removes the rest
    assert hidden(tmp_path / "ns") == []
    delete_dataset("ns/other-v0", tmp_path)
    assert not (tmp_path / "ns").exists()


def test_delete_killed_with_a_real_removal_never_shows_a_partial_dataset(tmp_path: Path) -> None:
    make(tmp_path, "ns/big-v0", range(150))
    proc = child("import sys\nfrom vcollect.store import delete_dataset\ndelete_dataset('ns/big-v0', sys.argv[1])\n",
                 tmp_path)
    deadline = time.monotonic() + 60
    while proc.poll() is None and not ((tmp_path / "ns").exists() and hidden(tmp_path / "ns")):
        assert time.monotonic() < deadline, "the child neither renamed the dataset away nor exited"
        time.sleep(0.001)  # a poll, not a spin: the child's start would otherwise cost a core of its own
    if proc.poll() is None:
        kill(proc)
    else:
        proc.wait(timeout=30)
    assert "ns/big-v0" not in list_datasets(tmp_path)
    with pytest.raises(DatasetNotFoundError):
        load_dataset("ns/big-v0", tmp_path)
    make(tmp_path, "ns/big-v0", range(2))  # made again at once; the leftover (if any) is removed
    assert seeds_of("ns/big-v0", tmp_path) == [0, 1]
    assert hidden(tmp_path / "ns") == []


# Overwrites ns/x-v0; the old dataset is renamed aside and the new one in place when the child says "mid"
# (dropping the old one) and waits there to be killed.
KILLED_OVERWRITE = """
    import sys
    import numpy as np
    from gymnasium import spaces
    import vcollect.store.layout.dataset_dir as dataset_dir
    from vcollect.store import EpisodeStore

    def wait(path, root):
        print("mid", path.name, flush=True)
        sys.stdin.read()  # until killed

    dataset_dir.drop_dir = wait
    EpisodeStore.create("ns/x-v0", spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float32), spaces.Discrete(3),
                        root=sys.argv[1], overwrite=True, metadata={"who": "new"})
"""


def test_overwrite_renames_the_old_dataset_aside_and_drops_it_only_after(tmp_path: Path) -> None:
    make(tmp_path, "ns/x-v0", range(4))
    proc = child(KILLED_OVERWRITE, tmp_path)
    line = read_line(proc)
    # swapped in one atomic step (renameat2 exchange: the old one now has the staging name) or renamed aside
    assert line.startswith(("mid .x-v0.replaced-", "mid .x-v0.staging-"))
    kill(proc)
    assert (tmp_path / "ns" / line.split()[1] / "dataset.json").is_file()  # the old one, aside, not yet removed
    new = load_dataset("ns/x-v0", tmp_path)
    assert new.metadata["who"] == "new" and new.total_episodes == 0
    assert list(list_datasets(tmp_path)) == ["ns/x-v0"]
    make(tmp_path, "ns/y-v0", range(1))  # the next operation in the namespace removes the leftover
    assert hidden(tmp_path / "ns") == []


def test_a_failed_overwrite_keeps_the_old_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make(tmp_path, "ns/x-v0", range(3))

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("write failed")

    monkeypatch.setattr(dataset_dir, "write_json_atomic", fail)
    with pytest.raises(OSError, match="write failed"):
        EpisodeStore.create("ns/x-v0", OBS, ACT, root=tmp_path, overwrite=True)
    assert seeds_of("ns/x-v0", tmp_path) == [0, 1, 2]
    assert hidden(tmp_path / "ns") == []


def test_move_to_overwrite_keeps_the_old_until_the_new_is_in_place(tmp_path: Path) -> None:
    make(tmp_path, "final/rec-v0", range(3))
    make(tmp_path, "staging/rec-v0", range(7, 9))
    store = EpisodeStore.open("staging/rec-v0", tmp_path)
    store.move_to("final/rec-v0", tmp_path, overwrite=True)
    store.close()
    assert seeds_of("final/rec-v0", tmp_path) == [7, 8]
    assert hidden(tmp_path / "final") == []
    assert list(list_datasets(tmp_path)) == ["final/rec-v0"]


# Waits for "go" on stdin, then overwrites ns/race-v0 with a large dataset.json (so the two overlap) and
# episodes of its own seed; exits 0 when it won, 3 with the error's message when it got a DatasetError.
RACER = """
    import sys
    import numpy as np
    from gymnasium import spaces
    from vcollect.errors import DatasetError
    from vcollect.store import EpisodeStore

    root, tag = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        store = EpisodeStore.create("ns/race-v0", spaces.Box(-1e9, 1e9, shape=(2,), dtype=np.float32),
                                    spaces.Discrete(3), root=root, overwrite=True,
                                    metadata={"who": tag, "pad": "x" * 40_000_000}, shard_steps=5)
        with store:
            for _ in range(5):
                obs = np.full((6, 2), tag, np.float32)
                store.write_episode(obs, np.zeros(5, int), np.zeros(5), np.arange(5) == 4, np.zeros(5, bool),
                                    seed=tag, env_id=0)
    except DatasetError as exc:
        print(exc, flush=True)
        sys.exit(3)
"""


def test_racing_overwrites_of_one_id_leave_exactly_one_winner(tmp_path: Path) -> None:
    make(tmp_path, "ns/race-v0", range(2))
    racers = [child(RACER, tmp_path, str(tag)) for tag in (100, 200)]
    for proc in racers:
        assert read_line(proc) == "ready"
    for proc in racers:  # both are waiting on their stdin: let them go at once
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    results = [proc.communicate(timeout=120) for proc in racers]
    codes = [proc.returncode for proc in racers]
    assert sorted(codes) == [0, 3], (codes, results)
    # the loser either found the dataset replaced when it came to publish its own (both read the old one
    # first), or, when the machine ran one create wholly before the other began, published first and
    # then found its dataset replaced when it came to commit: refused either way, nothing of it kept
    loser = codes.index(3)
    said = results[loser][0]
    assert b"by someone else meanwhile" in said or b"replaced since this writer opened it" in said, said
    winner = (100, 200)[codes.index(0)]
    dataset = load_dataset("ns/race-v0", tmp_path)
    assert dataset.metadata["who"] == winner
    assert seeds_of("ns/race-v0", tmp_path) == [winner] * 5  # the winner's episodes only, unmixed
    assert hidden(tmp_path / "ns") == []


def test_nested_ids_are_refused(tmp_path: Path) -> None:
    make(tmp_path, "a/outer-v0", range(2))
    for nested in ("a/outer-v0/inner-v0", "a/outer-v0/ns/inner-v0"):
        with pytest.raises(InvalidDatasetIdError, match="lies inside dataset 'a/outer-v0'"):
            EpisodeStore.create(nested, OBS, ACT, root=tmp_path)
        with pytest.raises(InvalidDatasetIdError, match="lies inside dataset 'a/outer-v0'"):
            combine_datasets(["a/outer-v0"], nested, tmp_path)
    make(tmp_path, "tmp/rec-v0", range(1))
    store = EpisodeStore.open("tmp/rec-v0", tmp_path)
    with pytest.raises(InvalidDatasetIdError, match="lies inside dataset 'a/outer-v0'"):
        store.move_to("a/outer-v0/inner-v0", tmp_path)
    store.close()
    assert sorted(p.name for p in (tmp_path / "a" / "outer-v0").iterdir()) == ["dataset.json", "manifest", "shards"]

    make(tmp_path, "b/ns-v0/inner-v0", range(3))  # 'b/ns-v0' is a namespace: it cannot become a dataset
    with pytest.raises(InvalidDatasetIdError, match="holds datasets"):
        EpisodeStore.create("b/ns-v0", OBS, ACT, root=tmp_path)
    with pytest.raises(InvalidDatasetIdError, match="holds datasets"):
        EpisodeStore.create("b/ns-v0", OBS, ACT, root=tmp_path, overwrite=True)
    assert not (tmp_path / "b" / "ns-v0" / "dataset.json").exists()
    assert sorted(list_datasets(tmp_path)) == ["a/outer-v0", "b/ns-v0/inner-v0", "tmp/rec-v0"]


def test_delete_and_overwrite_never_delete_datasets_nested_in_the_folder(tmp_path: Path) -> None:
    make(tmp_path, "a/outer-v0", range(2))
    make(tmp_path, "x/inner-v0", range(5, 7))
    shutil.copytree(tmp_path / "x" / "inner-v0", tmp_path / "a" / "outer-v0" / "inner-v0")  # made by hand
    with pytest.raises(DatasetError, match="holds other datasets"):
        delete_dataset("a/outer-v0", tmp_path)
    with pytest.raises(DatasetError, match="holds datasets"):
        EpisodeStore.create("a/outer-v0", OBS, ACT, root=tmp_path, overwrite=True)
    store = EpisodeStore.open("x/inner-v0", tmp_path)
    with pytest.raises(DatasetError, match="holds other datasets"):
        store.move_to("a/outer-v0", tmp_path, overwrite=True)
    store.close()
    assert seeds_of("a/outer-v0", tmp_path) == [0, 1]
    assert (tmp_path / "a" / "outer-v0" / "inner-v0" / "dataset.json").is_file()
    assert seeds_of("x/inner-v0", tmp_path) == [5, 6]
    assert hidden(tmp_path / "a") == [] and hidden(tmp_path / "x") == []


def test_split_parts_carry_their_metadata_when_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make(tmp_path, "src/a-v0", range(10), metadata={"author": "me"})
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))
    assert main(["split", "src/a-v0", "--sizes", "7,3", "--into", "p/train-v0", "p/test-v0", "--seed", "1"]) == 0
    for part, size in (("p/train-v0", 7), ("p/test-v0", 3)):
        meta = load_dataset(part, tmp_path).metadata
        assert meta["split_from"] == "src/a-v0" and meta["split_sizes"] == [7, 3] and meta["split_seed"] == 1
        assert meta["author"] == "me" and load_dataset(part, tmp_path).total_episodes == size


def test_an_overwrite_killed_between_its_renames_gives_the_old_dataset_back(tmp_path: Path) -> None:
    """The old dataset renamed aside, the new one not yet in, the process dead: the next load (or listing)
    puts the old one back, so a reader never finds neither."""
    from vcollect.store.layout.staging import pid_space

    make(tmp_path, "ns/a-v0", range(3))
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True, timeout=60)
    pid = int(done.stdout)  # a pid whose process has exited
    final = tmp_path / "ns" / "a-v0"
    final.rename(final.with_name(f".a-v0.replaced-{pid_space()}-{pid}-{'a' * 12}"))
    (final.with_name(f".a-v0.staging-{pid_space()}-{pid}-{'b' * 12}") / "shards").mkdir(parents=True)
    assert "ns/a-v0" in list_datasets(tmp_path)
    assert [e.seed for e in load_dataset("ns/a-v0", root=tmp_path)] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "ns").iterdir()) == ["a-v0"], "a leftover was kept"
    final.rename(final.with_name(f".a-v0.replaced-{pid_space()}-{pid}-{'c' * 12}"))
    assert [e.seed for e in load_dataset("ns/a-v0", root=tmp_path)] == [0, 1, 2]  # load alone restores it too


KILLED_EXPORT = """
    import os
    import shutil
    import sys
    from vcollect.minari.interop import export_minari

    def wait(path, *args, **kwargs):
        print("mid", path, flush=True)
        sys.stdin.read()  # until killed

    real_rename = os.rename

    def rename(src, dst):
        if os.path.basename(src) == "x-v0":  # the old export renamed aside: stop between the two renames
            wait(src)
        real_rename(src, dst)

    shutil.rmtree = wait  # the old export is about to be removed: the swap is done
    os.rename = rename
    export_minari("ns/new-v0", "mm/x-v0", sys.argv[2], root=sys.argv[1], overwrite=True)
"""


def test_export_overwrite_killed_midway_leaves_minari_a_dataset(tmp_path: Path) -> None:
    """The old export and the new one swap places in one step: killed at any point, Minari itself (no vcollect
    operation in between) loads the old export or the new one, never none."""
    import minari
    from minari.dataset.minari_storage import MinariStorage

    from vcollect.minari.interop import export_minari

    make(tmp_path, "ns/old-v0", range(2))
    make(tmp_path, "ns/new-v0", range(5))
    minari_root = tmp_path / "minari"
    export_minari("ns/old-v0", "mm/x-v0", minari_root, root=tmp_path)
    proc = child(KILLED_EXPORT, tmp_path, str(minari_root))
    line = read_line(proc)
    assert line.startswith("mid ")
    kill(proc)
    assert MinariStorage.read(minari_root / "mm" / "x-v0" / "data").total_episodes == 5
    assert minari.__name__ and (minari_root / "mm" / "x-v0" / "data" / "main_data.hdf5").is_file()
    aside = Path(line.split(maxsplit=1)[1])
    assert aside.parent == minari_root / "mm" and aside.name.startswith(".x-v0.")  # the old one, to be removed
    export_minari("ns/old-v0", "mm/y-v0", minari_root, root=tmp_path)  # the next export there cleans up
    assert hidden(minari_root / "mm") == []


def test_a_journaled_overwrite_killed_after_its_swap_is_not_swapped_back(tmp_path: Path) -> None:
    """After the swap the old dataset sits at the staging name; the next reader finishing the journal must
    not publish it again."""
    make(tmp_path, "ns/x-v0", range(2))
    make(tmp_path, "src/a-v0", range(10, 13))
    proc = child("""
        import shutil
        import sys
        from vcollect.store import combine_datasets

        def wait(path, *args, **kwargs):
            print("mid", path, flush=True)
            sys.stdin.read()

        shutil.rmtree = wait
        combine_datasets(["src/a-v0"], "ns/x-v0", sys.argv[1], overwrite=True)
    """, tmp_path)
    assert read_line(proc).startswith("mid ")
    kill(proc)
    assert seeds_of("ns/x-v0", tmp_path) == [10, 11, 12]
    assert list(tmp_path.glob(".vcollect-publish-*")) == []
    assert seeds_of("ns/x-v0", tmp_path) == [10, 11, 12]
    make(tmp_path, "ns/y-v0", range(1))
    assert hidden(tmp_path / "ns") == []
