"""Namespaces (Minari 0.5's API and namespace_metadata.json layout), checked against the real minari package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import minari
import minari.namespace as minari_ns
import pytest

from tests.small_datasets import make_dataset
from vcollect.cli import main
from vcollect.durable import pid_space
from vcollect.errors import (
    InvalidDatasetIdError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
)
from vcollect.minari import export_minari, import_minari
from vcollect.store import (
    create_namespace,
    delete_namespace,
    get_namespace_metadata,
    list_datasets,
    list_local_datasets,
    list_local_namespaces,
    load_dataset,
    update_namespace,
    update_namespace_metadata,
)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return tmp_path / "vc"


@pytest.fixture()
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "minari"
    path.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def test_create_get_update_delete(root: Path) -> None:
    create_namespace("team/cartpole", "CartPole data", root=root, url="https://example.org", level=3)
    assert get_namespace_metadata("team/cartpole", root) == {"url": "https://example.org", "level": 3,
                                                             "description": "CartPole data"}
    # the parent is marked with {} as Minari does; both are namespaces
    assert json.loads((root / "team" / "namespace_metadata.json").read_text()) == {}
    assert list_local_namespaces(root) == ["team", "team/cartpole"]
    update_namespace("team/cartpole", "new text", root=root, owner="me")
    # replaced, not merged (Minari's update_namespace_metadata)
    assert get_namespace_metadata("team/cartpole", root) == {"owner": "me", "description": "new text"}
    update_namespace_metadata("team/cartpole", root=root)
    assert get_namespace_metadata("team/cartpole", root) == {"description": None}
    delete_namespace("team/cartpole", root)
    assert list_local_namespaces(root) == ["team"]
    assert not (root / "team" / "cartpole").exists()
    delete_namespace("team", root)
    assert list_local_namespaces(root) == []


def test_bad_input(root: Path) -> None:
    create_namespace("ns", root=root)
    with pytest.raises(NamespaceExistsError, match="already exists"):
        create_namespace("ns", "again", root=root)
    assert get_namespace_metadata("ns", root) == {}  # the failed create changed nothing
    with pytest.raises(NamespaceNotFoundError, match="no namespace 'missing'"):
        get_namespace_metadata("missing", root)
    with pytest.raises(NamespaceNotFoundError):
        update_namespace("missing", "x", root=root)
    assert not (root / "missing").exists()
    with pytest.warns(UserWarning, match="does not exist"):
        delete_namespace("missing", root)
    for bad in ("", "a//b", "../up", "has space", "name-v1", "/abs"):
        with pytest.raises(InvalidDatasetIdError):
            create_namespace(bad, root=root)
    with pytest.raises(ValueError, match="JSON"):
        create_namespace("other", root=root, value=object())
    assert list_local_namespaces(root) == ["ns"]


def test_delete_refuses_a_namespace_with_datasets(root: Path) -> None:
    create_namespace("ns", "d", root=root)
    make_dataset(root, "ns/data-v0", [3])
    with pytest.raises(NamespaceNotEmptyError, match="data-v0"):
        delete_namespace("ns", root)
    create_namespace("outer/inner", root=root)
    with pytest.raises(NamespaceNotEmptyError, match="inner"):
        delete_namespace("outer", root)
    # nothing removed
    assert load_dataset("ns/data-v0", root).total_episodes == 1
    assert get_namespace_metadata("ns", root) == {"description": "d"}
    assert list_local_namespaces(root) == ["ns", "outer", "outer/inner"]


def test_folders_with_datasets_are_namespaces_and_namespaces_are_no_datasets(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_dataset(root, "a/b/data-v0", [2])
    make_dataset(root, "plain-v0", [2])
    create_namespace("empty", "nothing yet", root=root)
    assert list_local_namespaces(root) == ["a", "a/b", "empty"]
    assert get_namespace_metadata("a/b", root) == {}
    with pytest.raises(NamespaceExistsError):
        create_namespace("a/b", root=root)
    # listings: datasets only, no broken rows for namespace folders
    assert list(list_datasets(root)) == ["a/b/data-v0", "plain-v0"]
    assert all(entry["broken"] is None for entry in list_datasets(root).values())
    assert list(list_local_datasets(root=root)) == ["plain-v0", "a/b/data-v0"]  # Minari's order: namespace first
    assert main(["list", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "broken" not in out and "empty" not in out and "a/b/data-v0" in out
    assert main(["list", "--root", str(root), "--by-namespace"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # titles may wrap
    assert "namespace empty: nothing yet (no datasets)" in out
    assert "namespace a/b" in out and "without a namespace" in out
    assert out.index("without a namespace") < out.index("plain-v0") < out.index("namespace a/b") \
        < out.index("a/b/data-v0")


def test_listing_namespaces_leaves_no_directory_open(root: Path) -> None:
    """Each folder's listing is closed when the walk has seen what it needs (a scandir left to the garbage
    collector holds a file descriptor meanwhile, and says so with a ResourceWarning)."""
    import gc
    import warnings

    for i in range(3):
        make_dataset(root, f"ns{i}/data-v0", [2])
        make_dataset(root, f"ns{i}/more-v0", [2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert list_local_namespaces(root) == ["ns0", "ns1", "ns2"]
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_same_layout_as_minari(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Namespaces made by vcollect read with minari's functions on the same folder, and the other way round."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    create_namespace("ours/deep", "by vcollect", root=root, n=1)
    assert minari_ns.list_local_namespaces() == ["ours", "ours/deep"]
    assert minari_ns.get_namespace_metadata("ours/deep") == {"n": 1, "description": "by vcollect"}
    minari_ns.create_namespace("theirs", "by minari", k="v")
    assert get_namespace_metadata("theirs", root) == {"k": "v", "description": "by minari"}
    minari_ns.update_namespace_metadata("theirs", "changed")
    assert get_namespace_metadata("theirs", root) == {"description": "changed"}
    delete_namespace("theirs", root)
    assert minari_ns.list_local_namespaces() == ["ours", "ours/deep"]


def test_export_keeps_and_import_reads_namespace_metadata(root: Path, minari_root: Path) -> None:
    create_namespace("team/cartpole", "CartPole runs", root=root, team="rl")
    make_dataset(root, "team/cartpole/random-v0", [3, 4])
    export_minari("team/cartpole/random-v0", "team/cartpole/random-v0", minari_root, root=root)
    assert minari_ns.get_namespace_metadata("team/cartpole") == {"team": "rl", "description": "CartPole runs"}
    assert minari_ns.get_namespace_metadata("team") == {}
    assert "team/cartpole/random-v0" in minari.list_local_datasets()
    # an existing Minari namespace keeps its own metadata
    minari_ns.create_namespace("other", "theirs")
    export_minari(load_dataset("team/cartpole/random-v0", root), "other/copy-v0", minari_root)
    assert minari_ns.get_namespace_metadata("other") == {"description": "theirs"}

    # import: a Minari namespace's metadata arrives with the dataset
    minari_ns.create_namespace("src", "from minari", origin="m")
    export_minari(load_dataset("team/cartpole/random-v0", root), "src/data-v2", minari_root)
    minari_ns.update_namespace_metadata("src", "from minari", origin="m")
    fresh = root.parent / "fresh"
    import_minari("src/data-v2", "src/data-v2", fresh, minari_root=minari_root)
    assert get_namespace_metadata("src", fresh) == {"origin": "m", "description": "from minari"}
    # imported by path into another namespace: no metadata to copy, the namespace exists implicitly
    import_minari(minari_root / "src" / "data-v2", "elsewhere/data-v0", fresh)
    assert get_namespace_metadata("elsewhere", fresh) == {}


def test_delete_removes_what_a_dead_writer_left_but_refuses_a_live_writers_staging(root: Path) -> None:
    """A staging folder of a process that died (a combine or import killed mid-build) no longer keeps its
    namespace; one whose process is alive does, named in the refusal."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    create_namespace("ns", root=root)
    stale = root / "ns" / f".x-v0.staging-{pid_space()}-{dead.pid}-0123456789ab"
    (stale / "shards").mkdir(parents=True)
    (stale / "shards" / "part.h5").write_bytes(b"half a shard")
    delete_namespace("ns", root)
    assert not (root / "ns").exists() and list_local_namespaces(root) == []
    create_namespace("ns", root=root)
    live = root / "ns" / f".y-v0.staging-{pid_space()}-{os.getpid()}-0123456789ab"
    live.mkdir()
    with pytest.raises(NamespaceNotEmptyError, match=re.escape(live.name)):
        delete_namespace("ns", root)
    assert live.is_dir() and list_local_namespaces(root) == ["ns"]
