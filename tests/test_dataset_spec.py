"""Dataset.spec, list_local_datasets, Dataset.update_metadata and the requirements check, against real minari."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import minari
import pytest

from tests.small_datasets import ACT_SPACE, OBS_SPACE, make_dataset
from vcollect.errors import MetadataKeyError
from vcollect.minari import export_minari, import_minari
from vcollect.store import DatasetSpec, combine_datasets, list_local_datasets, load_dataset
from vcollect.store.layout.dataset_info import PROTECTED_METADATA_KEYS


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return tmp_path / "vc"


@pytest.fixture()
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "minari"
    path.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def test_spec_matches_minaris_spec_of_the_export(root: Path, minari_root: Path) -> None:
    make_dataset(root, "team/cart/data-v3", [3, 5, 2], metadata={"author": "me"})
    dataset = load_dataset("team/cart/data-v3", root)
    spec = dataset.spec
    assert isinstance(spec, DatasetSpec)
    export_minari(dataset, "team/cart/data-v3", minari_root)
    theirs = minari.load_dataset("team/cart/data-v3").spec
    for name in ("total_episodes", "total_steps", "dataset_id", "namespace", "dataset_name", "version",
                 "observation_space", "action_space", "env_spec", "combined_datasets"):
        assert getattr(spec, name) == getattr(theirs, name), name
    assert (spec.total_episodes, spec.total_steps, spec.version) == (3, 10, 3)
    assert (spec.namespace, spec.dataset_name) == ("team/cart", "data")
    assert spec.env_spec == gym.spec("CartPole-v1") and spec.eval_env_spec is None
    assert spec.data_path == str(root / "team" / "cart" / "data-v3")
    assert spec.metadata["author"] == "me" and spec.minari_version is None
    # a view's spec counts the view
    view = dataset.filter_episodes(lambda ep: len(ep) > 2)
    assert (view.spec.total_episodes, view.spec.total_steps) == (2, 8)
    with pytest.raises(AttributeError):
        spec.total_steps = 1  # type: ignore[misc]


def test_spec_of_combined_and_imported_datasets(root: Path, minari_root: Path) -> None:
    make_dataset(root, "a-v0", [2])
    make_dataset(root, "b-v0", [3])
    combined = combine_datasets(["a-v0", "b-v0"], "ab-v0", root=root)
    assert combined.spec.combined_datasets == ["a-v0", "b-v0"] == combined.combined_datasets
    assert load_dataset("a-v0", root).spec.combined_datasets == []
    export_minari("a-v0", "mm/a-v0", minari_root, root=root)
    imported = minari.load_dataset("mm/a-v0")
    spec = import_minari("mm/a-v0", "imp-v0", root, minari_root=minari_root).spec
    assert spec.minari_version == imported.spec.minari_version == minari.__version__


def test_list_local_datasets_like_minari(root: Path, minari_root: Path) -> None:
    ids = ["ns/data-v0", "ns/data-v2", "ns/data-v10", "ns/other-v1", "ns/sub/data-v1", "top-v0", "top-v1"]
    for dataset_id in ids:
        make_dataset(root, dataset_id, [2], metadata={"author": dataset_id})
        export_minari(dataset_id, dataset_id, minari_root, root=root)
    cases = [{}, {"latest_version": True}, {"prefix": "ns"}, {"prefix": "ns/sub"}, {"prefix": "ns", "latest_version": True},
             {"compatible_minari_version": True}, {"prefix": "nothing"}]
    for kwargs in cases:
        ours = list_local_datasets(root=root, **kwargs)
        theirs = minari.list_local_datasets(**kwargs)
        assert list(ours) == list(theirs), kwargs  # same ids, same order
    everything = list_local_datasets(root=root)
    assert list_local_datasets(root=root, latest_version=True).keys() == {"ns/data-v10", "ns/other-v1",
                                                                          "ns/sub/data-v1", "top-v1"}
    entry = everything["ns/data-v2"]
    assert entry["dataset_id"] == "ns/data-v2" and entry["author"] == "ns/data-v2"
    assert (entry["total_episodes"], entry["total_steps"]) == (1, 2)
    assert entry["dataset_size"] == round(sum(f.stat().st_size for f in (root / "ns" / "data-v2").rglob("*")
                                              if f.name.endswith((".json", ".h5"))) / 1e6, 1)
    assert "broken" not in entry and "size_bytes" not in entry


def test_list_local_datasets_leaves_out_a_broken_dataset_with_a_warning(root: Path) -> None:
    make_dataset(root, "good-v0", [2])
    make_dataset(root, "bad-v0", [2])
    (root / "bad-v0" / "dataset.json").write_text("{not json")
    with pytest.warns(UserWarning, match="Misconfigured dataset named bad-v0"):
        assert list(list_local_datasets(root=root)) == ["good-v0"]


def test_update_metadata(root: Path, minari_root: Path) -> None:
    make_dataset(root, "ns/d-v0", [2, 3], metadata={"author": "a", "description": "old"})
    dataset = load_dataset("ns/d-v0", root)
    dataset.update_metadata({"description": "new", "algorithm_name": "PPO", "author": {"b", "a"},
                             "eval_env_spec": gym.spec("CartPole-v1").to_json()})
    assert dataset.metadata["description"] == "new"  # this dataset sees it at once
    again = load_dataset("ns/d-v0", root)
    assert again.metadata["description"] == "new" and again.metadata["algorithm_name"] == "PPO"
    assert again.metadata["author"] == ["a", "b"]
    assert again.eval_env_spec == gym.spec("CartPole-v1")
    export_minari(again, "ns/d-v0", minari_root)
    theirs = minari.load_dataset("ns/d-v0")
    assert theirs.storage.metadata["description"] == "new"
    assert theirs.storage.metadata["algorithm_name"] == "PPO"
    assert theirs.storage.metadata["author"] == {"a", "b"}


@pytest.mark.parametrize("key", sorted(PROTECTED_METADATA_KEYS))
def test_update_metadata_refuses_keys_that_describe_the_data(root: Path, key: str) -> None:
    if not (root / "d-v0").exists():
        make_dataset(root, "d-v0", [2])
    before = (root / "d-v0" / "dataset.json").read_bytes()
    dataset = load_dataset("d-v0", root)
    with pytest.raises(MetadataKeyError, match=key):
        dataset.update_metadata({"description": "ok", key: "x"})
    assert (root / "d-v0" / "dataset.json").read_bytes() == before  # nothing written, not even "ok"
    for bad in ({1: "x"}, ["description"]):
        with pytest.raises((MetadataKeyError, TypeError)):
            dataset.update_metadata(bad)  # type: ignore[arg-type]
    assert (root / "d-v0" / "dataset.json").read_bytes() == before


def test_minari_refuses_the_same_keys(root: Path, minari_root: Path) -> None:
    """Every key Minari's update_metadata refuses on a vcollect export, vcollect refuses too."""
    make_dataset(root, "d-v0", [2])
    export_minari("d-v0", "d-v0", minari_root, root=root)
    storage = minari.load_dataset("d-v0").storage
    refused_by_minari = set()
    for key in json.loads((minari_root / "d-v0" / "data" / "metadata.json").read_text()):
        try:
            storage.update_metadata({key: storage.metadata[key] if key not in ("author", "author_email") else set()})
        except ValueError:
            refused_by_minari.add(key)
    assert refused_by_minari and refused_by_minari <= PROTECTED_METADATA_KEYS


def test_recover_environment_warns_for_unmet_requirements(root: Path) -> None:
    make_dataset(root, "req-v0", [2], metadata={"requirements": [
        "gymnasium>=1.0", "numpy<1", "vcollect-surely-not-installed-xyz>=2", "not a requirement @@",
    ]})
    dataset = load_dataset("req-v0", root)
    with pytest.warns(UserWarning) as record:
        env = dataset.recover_environment()
    env.close()
    messages = [str(w.message) for w in record]
    assert len(messages) == 3, messages
    assert any("numpy" in m and "does not meet" in m and 'pip install "numpy<1"' in m for m in messages)
    assert any("vcollect-surely-not-installed-xyz is not installed" in m for m in messages)
    assert any("malformed" in m and "not a requirement @@" in m for m in messages)
    make_dataset(root, "ok-v0", [2], metadata={"requirements": ["gymnasium>=1.0", "numpy"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset("ok-v0", root).recover_environment().close()


def test_spaces_of_the_spec_are_the_stored_ones(root: Path) -> None:
    make_dataset(root, "s-v0", [1], with_env_spec=False)
    spec = load_dataset("s-v0", root).spec
    assert spec.observation_space == OBS_SPACE and spec.action_space == ACT_SPACE and spec.env_spec is None
