"""Per-episode metadata after the fact (get/update_episode_metadata): sidecar file, atomic updates, export."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.small_datasets import make_dataset
from vcollect.errors import EpisodeIndexError, MetadataKeyError
from vcollect.minari import export_minari, import_minari
from vcollect.store import combine_datasets, load_dataset
from vcollect.store.layout.episode_metadata import EPISODE_METADATA_FILE

LENGTHS = [3, 1, 4, 2, 5]  # shards of 2, 2 and 1 episodes


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    path = tmp_path / "vc"
    make_dataset(path, "ns/d-v0", LENGTHS)
    return path


@pytest.fixture()
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "minari"
    path.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def plain(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in metadata.items()}


def test_get_episode_metadata_matches_minaris(root: Path, minari_root: Path) -> None:
    dataset = load_dataset("ns/d-v0", root)
    ours = dataset.get_episode_metadata()
    assert ours[1] == {"id": 1, "seed": 101, "total_steps": 1, "options": {"level": 1}, "tag": "ep1"}
    assert ours[0] == {"id": 0, "seed": 100, "total_steps": 3, "tag": "ep0"}
    assert [m["id"] for m in dataset.get_episode_metadata([4, 2])] == [4, 2]
    export_minari(dataset, "ns/d-v0", minari_root)
    theirs = list(minari.load_dataset("ns/d-v0").storage.get_episode_metadata(range(5)))
    assert [plain(m) for m in theirs] == ours


def test_update_with_different_keys_per_episode(root: Path, minari_root: Path) -> None:
    dataset = load_dataset("ns/d-v0", root)
    dataset.update_episode_metadata([{"score": 1.5}, {"label": "good", "tag": "changed"}, {"vec": [1, 2, 3]}],
                                    [0, 3, 4])
    dataset.update_episode_metadata([{"score": 2.5, "flag": True}], [0])  # merges: label of 3 stays
    for loaded in (dataset, load_dataset("ns/d-v0", root)):
        meta = loaded.get_episode_metadata()
        assert meta[0]["score"] == 2.5 and meta[0]["flag"] is True and meta[0]["tag"] == "ep0"
        assert meta[3]["label"] == "good" and meta[3]["tag"] == "changed"
        assert meta[4]["vec"].tolist() == [1, 2, 3]
        assert "score" not in meta[1] and meta[1]["tag"] == "ep1"
        assert loaded[3].metadata == {"tag": "changed", "label": "good"}  # EpisodeData sees it too
    # a view updates by global id, all of its episodes by default
    view = dataset.filter_episodes(lambda ep: ep.id in (1, 2))
    view.update_episode_metadata([{"w": 1}, {"w": 2}])
    assert [m.get("w") for m in load_dataset("ns/d-v0", root).get_episode_metadata()] == [None, 1, 2, None, None]

    # export: the real minari reads the updated metadata from the episode groups' attributes
    export_minari(load_dataset("ns/d-v0", root), "ns/d-v0", minari_root)
    theirs = [plain(m) for m in minari.load_dataset("ns/d-v0").storage.get_episode_metadata(range(5))]
    assert theirs[0]["score"] == 2.5 and theirs[3]["label"] == "good" and theirs[3]["tag"] == "changed"
    assert theirs[4]["vec"] == [1, 2, 3] and theirs[2]["w"] == 2 and "w" not in theirs[0]
    # and an import brings it back, differing keys included
    back = import_minari("ns/d-v0", "back-v0", root, minari_root=minari_root).get_episode_metadata()
    assert [plain(m) for m in back] == [plain(m) for m in load_dataset("ns/d-v0", root).get_episode_metadata()]


def test_bad_input_changes_nothing(root: Path) -> None:
    dataset = load_dataset("ns/d-v0", root)
    sidecar = root / "ns" / "d-v0" / EPISODE_METADATA_FILE
    view = dataset.filter_episodes(lambda ep: ep.id < 2)
    cases: list[tuple[Any, Any, type[Exception], str]] = [
        ([{"a": 1}], [5], EpisodeIndexError, "episode 5 is not in this dataset"),
        ([{"a": 1}], [-1], EpisodeIndexError, "episode -1"),
        ([{"a": 1}, {"a": 2}], [0], ValueError, "2 metadata dicts for 1 episodes"),
        ([{"a": 1}], None, ValueError, "for 5 episodes"),
        ([{"a": 1}, {"seed": 3}], [0, 1], MetadataKeyError, "'seed' is the episode's own"),
        ([{"total_steps": 3}], [0], MetadataKeyError, "total_steps"),
        ([{"a/b": 1}], [0], MetadataKeyError, "without '/'"),
        ([{"a": {"nested": 1}}], [0], ValueError, "bool, number, string"),
        ([{"a": None}], [0], ValueError, "bool, number, string"),
        ([{"a": float("nan")}], [0], ValueError, "NaN"),
        ([{"a": [[1], [1, 2]]}], [0], ValueError, "ragged"),
        (["not a dict"], [0], TypeError, "must be a dict"),
        ([{"a": 1}], [0.5], TypeError, "integers"),
    ]
    for metadatas, indices, error, message in cases:
        with pytest.raises(error, match=message):
            dataset.update_episode_metadata(metadatas, indices)
    with pytest.raises(EpisodeIndexError, match="not in this view"):
        view.update_episode_metadata([{"a": 1}], [3])
    with pytest.raises(EpisodeIndexError, match="episode 7"):
        dataset.get_episode_metadata([0, 7])
    assert not sidecar.exists()
    assert dataset.get_episode_metadata([0])[0] == {"id": 0, "seed": 100, "total_steps": 3, "tag": "ep0"}


def test_a_corrupt_sidecar_names_the_file(root: Path) -> None:
    from vcollect.errors import CorruptDatasetError

    (root / "ns" / "d-v0" / EPISODE_METADATA_FILE).write_text('{"format": "other"}')
    with pytest.raises(CorruptDatasetError, match=EPISODE_METADATA_FILE):
        load_dataset("ns/d-v0", root)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["a", "b", "tag"]), st.integers(-5, 5)),
                 min_size=1, max_size=6),
        min_size=1, max_size=4,
    )
)
def test_updates_land_on_the_right_episodes(root: Path, tmp_path_factory: pytest.TempPathFactory,
                                            batches: list[list[tuple[int, str, int]]]) -> None:
    """Global ids -> (shard, row) over shards of 2, 2 and 1 episodes, against a dict of dicts."""
    work = tmp_path_factory.mktemp("prop")
    shutil.copytree(root, work / "vc")
    reference: dict[int, dict[str, Any]] = {i: {"tag": f"ep{i}"} for i in range(len(LENGTHS))}
    dataset = load_dataset("ns/d-v0", work / "vc")
    for batch in batches:
        ids = [episode for episode, _, _ in batch]
        dataset.update_episode_metadata([{key: value} for _, key, value in batch], ids)
        for episode, key, value in batch:
            reference[episode][key] = value
    got = load_dataset("ns/d-v0", work / "vc").get_episode_metadata()
    assert [{k: v for k, v in m.items() if k in ("a", "b", "tag")} for m in got] == \
        [reference[i] for i in range(len(LENGTHS))]


UPDATER = """
import sys
from vcollect.store import load_dataset
root, key, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
dataset = load_dataset("ns/d-v0", root)
generation = 0
while count < 0 or generation < count:
    generation += 1
    dataset.update_episode_metadata([{key: generation}] * dataset.total_episodes)
    if generation == 1:
        print("ready", flush=True)
"""


def start_updater(root: Path, key: str, count: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", UPDATER, str(root), key, str(count)], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready and proc.stdout.readline().strip() == "ready", "updater did not start within 60 s"
    return proc


def generations(root: Path, key: str) -> set[Any]:
    """The values of ``key`` over all episodes, read as a fresh reader would."""
    return {m.get(key) for m in load_dataset("ns/d-v0", root).get_episode_metadata()}


def test_concurrent_updaters_both_land_and_readers_see_whole_files(root: Path) -> None:
    procs = [start_updater(root, "x", 15), start_updater(root, "y", 15)]
    seen = []
    while any(p.poll() is None for p in procs):
        values = generations(root, "x")
        assert len(values) == 1, values  # one file at a time: never half an update
        seen.append(values.pop())
        json.loads((root / "ns" / "d-v0" / EPISODE_METADATA_FILE).read_text())
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert seen == sorted(seen)  # a reader never goes back to an older file
    assert generations(root, "x") == {15} and generations(root, "y") == {15}  # neither update lost


def test_sigkill_leaves_the_old_or_the_new_file(root: Path) -> None:
    proc = start_updater(root, "x", -1)
    before = generations(root, "x").pop()
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    after = generations(root, "x")
    assert len(after) == 1 and after.pop() >= before  # whole, and not older than what was seen
    dataset = load_dataset("ns/d-v0", root)
    dataset.update_episode_metadata([{"x": 0}], [0])  # a later update works (no stale lock)
    assert dataset.get_episode_metadata([0])[0]["x"] == 0


def test_combine_keeps_metadata_set_after_the_fact(root: Path) -> None:
    make_dataset(root, "other-v0", [2, 2], episode_metadata=False)
    first = load_dataset("ns/d-v0", root)
    first.update_episode_metadata([{"x": 1}, {"tag": "changed"}, {"y": "s"}], [0, 1, 4])
    load_dataset("other-v0", root).update_episode_metadata([{"z": [1.5, 2.5]}], [1])
    combined = combine_datasets(["ns/d-v0", "other-v0"], "both-v0", root=root)
    got = [{k: v for k, v in m.items() if k not in ("id", "seed", "total_steps", "options")}
           for m in map(plain, combined.get_episode_metadata())]
    assert got == [{"tag": "ep0", "x": 1}, {"tag": "changed"}, {"tag": "ep2"}, {"tag": "ep3"},
                   {"tag": "ep4", "y": "s"}, {}, {"z": [1.5, 2.5]}]
    # keys the shards store are written there; only the others go to the new sidecar
    sidecar = json.loads((root / "both-v0" / EPISODE_METADATA_FILE).read_text())["shards"]
    assert sorted(key for rows in sidecar.values() for meta in rows.values() for key in meta) == ["x", "y", "z"]
