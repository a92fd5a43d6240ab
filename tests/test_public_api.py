"""The public surface a user holds in mind: a short sorted top level that the documentation (README.md and the
pages under docs/) documents, every error in vcollect.errors and the errors page's table, and the names that left
the top level still importable, with a warning."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import vcollect
import vcollect.errors

REPO = Path(__file__).resolve().parents[1]
# The written documentation: README.md and the pages under docs/ (not the API pages, which mkdocstrings fills in
# from the docstrings)
DOCUMENTATION = "\n".join(
    path.read_text(encoding="utf-8")
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    if "api" not in path.relative_to(REPO).parts
)
ERRORS_PAGE = (REPO / "docs" / "api" / "errors.md").read_text(encoding="utf-8")

ERRORS_MOVED = [
    "ActionError",
    "BufferNotReadyError",
    "CollectorStateError",
    "CorruptShardError",
    "DatasetError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "EnvWorkerError",
    "EpisodeIndexError",
    "HookOutputError",
    "InfoStructureError",
    "InvalidDatasetIdError",
    "MetadataKeyError",
    "NamespaceExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "ObservationError",
    "SpaceMismatchError",
    "UnfinishedEpisodesWarning",
    "VCollectError",
]
#: (name, the module it is imported from now) for every name that left the top level.
MOVED = [
    *((name, "vcollect.errors") for name in ERRORS_MOVED),
    ("DatasetSpec", "vcollect.store"),
    ("EnvCapabilities", "vcollect.envs"),
    ("EnvPoolVectorEnv", "vcollect.envs"),
    ("EpisodeSink", "vcollect.store"),
    ("GymnasiumVectorEnv", "vcollect.envs"),
    ("StepRollout", "vcollect.hooks"),
    ("SummaryStats", "vcollect.stats"),
    ("update_namespace", "vcollect.store"),
]


def test_top_level_is_sorted_short_and_documented() -> None:
    names = vcollect.__all__
    assert names == sorted(names), "vcollect.__all__ is not sorted"
    assert len(names) <= 42, f"vcollect.__all__ has {len(names)} names (about 40 a user can hold in mind)"
    assert len(set(names)) == len(names)
    undocumented = [name for name in names if not re.search(rf"\b{re.escape(name)}\b", DOCUMENTATION)]
    assert not undocumented, f"names of vcollect.__all__ that the documentation never mentions: {undocumented}"
    for name in names:
        if name != "TorchPolicy":  # loaded lazily (it imports torch); its own tests cover it
            assert getattr(vcollect, name) is not None


def test_top_level_holds_no_errors_and_no_moved_name() -> None:
    errors = {name for name, obj in vars(vcollect.errors).items() if inspect.isclass(obj)}
    assert not errors & set(vcollect.__all__), "an exception is exported from the top level"
    assert not {name for name, _ in MOVED} & set(vcollect.__all__)
    assert not {name for name, _ in MOVED} & set(dir(vcollect))


@pytest.mark.parametrize(("name", "module"), MOVED, ids=[name for name, _ in MOVED])
def test_moved_name_imports_from_the_top_level_with_a_warning(name: str, module: str) -> None:
    new = getattr(importlib.import_module(module), name)
    assert name in importlib.import_module(module).__all__
    with pytest.warns(DeprecationWarning, match=rf"vcollect\.{name} is deprecated.*from {re.escape(module)} import {name}"):
        old = getattr(vcollect, name)
    assert old is new
    with pytest.warns(DeprecationWarning, match=re.escape(module)):
        exec(f"from vcollect import {name} as imported", namespace := {})
    assert namespace["imported"] is new


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
            vcollect.NoSuchThing  # noqa: B018


def test_import_vcollect_loads_a_names_module_on_its_first_use() -> None:
    """`import vcollect` alone imports none of its parts (nor gymnasium, numpy or h5py); a name loads its own
    module and what that needs, a subpackage (`vcollect.errors`) imports on first use as before, and
    `from vcollect import *` gives every name of __all__."""
    script = (
        "import sys\n"
        "import vcollect\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('vcollect.') or m in ('gymnasium', 'numpy', 'h5py'))\n"
        "assert loaded == [], loaded\n"
        "vcollect.RandomPolicy\n"
        "assert 'vcollect.policies' in sys.modules and 'vcollect.collector' not in sys.modules\n"
        "assert 'vcollect.store' not in sys.modules and 'torch' not in sys.modules\n"
        "namespace = {}\n"
        "exec('from vcollect import *', namespace)\n"
        "assert sorted(set(namespace) - {'__builtins__'}) == vcollect.__all__\n"
        "assert namespace['Collector'] is sys.modules['vcollect.collector'].Collector\n"
        "assert vcollect.errors.ObservationError and vcollect.envs.subproc.SubprocVectorEnv  # subpackages too\n"
        "assert not hasattr(vcollect, 'no_such_module') and not hasattr(vcollect, '__main__')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def error_table() -> dict[str, list[str]]:
    """The errors page's table (docs/api/errors.md): name -> base classes."""
    rows = re.findall(r"^\| `(\w+)` \| .*? \| (.*?) \|$", ERRORS_PAGE, re.M)
    return {name: re.findall(r"`(\w+)`", bases) for name, bases in rows}


def test_every_error_is_in_vcollect_errors_and_in_the_errors_page_table_with_its_bases() -> None:
    classes = {
        name: obj for name, obj in vars(vcollect.errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "vcollect.errors"
    }
    assert sorted(vcollect.errors.__all__) == vcollect.errors.__all__ == sorted(classes)
    table = error_table()
    assert sorted(table) == sorted(classes), "docs/api/errors.md's table and vcollect.errors list different names"
    for name, cls in classes.items():
        assert table[name] == [base.__name__ for base in cls.__bases__], name
        if name != "VCollectError" and not issubclass(cls, Warning):
            assert issubclass(cls, vcollect.errors.VCollectError), name


def public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


DATASET_MEMBERS = {
    # Minari's MinariDataset names
    "action_space", "env_spec", "episode_indices", "eval_env_spec", "filter_episodes", "id", "iterate_episodes",
    "observation_space", "recover_environment", "sample_episodes", "set_seed", "spec", "total_episodes",
    "total_steps", "update_dataset_from_buffer",
    # Minari's storage-level calls, on the dataset
    "get_episode_metadata", "metadata", "update_episode_metadata", "update_metadata",
    # vcollect's own
    "as_torch_dataset", "close", "episode_lengths", "episode_returns", "episode_seeded", "path", "sample_steps",
    "steps_at", "verify",
    # seeing the data
    "render_env", "render_episode",
    # offline-to-online: what a ring preloads
    "episode_rows",
    # slices for sequence models
    "sample_slices", "slices_at",
}
RING_MEMBERS = {
    "action_space", "add", "add_all", "bind_spaces", "capacity", "episode", "episode_lengths", "episode_returns",
    "extras", "has_spaces", "keep_overflow", "num_envs", "observation_space", "reset", "sample", "start_episodes",
    "unfinished",
    # offline-to-online: preloading and checkpoints
    "extend_from", "load", "save",
    # slices for sequence models
    "sample_slices",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> vcollect.Dataset:
    from tests.small_datasets import make_dataset

    root = tmp_path_factory.mktemp("surface")
    make_dataset(root, "surface/data-v0", [3, 4, 5])
    return vcollect.load_dataset("surface/data-v0", root=root)


def test_dataset_members_are_what_a_user_calls(dataset: vcollect.Dataset) -> None:
    assert public(dataset) == DATASET_MEMBERS


@pytest.mark.parametrize(
    "name", ["env_spec_json", "eval_env_spec_json", "frame_stack", "open_files", "root", "sample_cache_nbytes",
             "shard_paths"],
)
def test_dataset_members_moved_to_stored_dataset_still_work_with_a_warning(dataset: vcollect.Dataset, name: str) -> None:
    from vcollect.store.read.reader import StoredDataset

    want = getattr(StoredDataset(dataset), name)
    with pytest.warns(DeprecationWarning, match=rf"Dataset\.{name} is deprecated.*StoredDataset\(dataset\)\.{name}"):
        got = getattr(dataset, name)
    assert got == want


def test_dataset_combined_datasets_still_works_with_a_warning(dataset: vcollect.Dataset) -> None:
    with pytest.warns(DeprecationWarning, match=r"dataset\.spec\.combined_datasets"):
        assert dataset.combined_datasets == dataset.spec.combined_datasets == []  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'no_such_member'"):
        dataset.no_such_member  # type: ignore[attr-defined]  # noqa: B018


def test_ring_members_are_what_a_user_calls() -> None:
    ring = vcollect.VectorRingBuffer(2, 5, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
    assert public(ring) == RING_MEMBERS
    assert public(vcollect.VectorRingBuffer(total_size=10, num_envs=2)) <= RING_MEMBERS  # storage comes with spaces


def test_ring_members_moved_to_ring_writer_still_work_with_a_warning() -> None:
    from vcollect.buffers.ring import RingWriter

    def ring() -> vcollect.VectorRingBuffer:
        made = vcollect.VectorRingBuffer(2, 3, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
        made.start_episodes(np.arange(2), np.zeros((2, 2)))
        for step in range(4):
            made.add(np.arange(2), np.zeros(2, np.int64), np.ones(2), np.zeros(2, bool), np.zeros(2, bool),
                     np.full((2, 2), step / 4))
        return made

    old, new = ring(), ring()
    for name, args in [("episode_truncated_in_ring", (0,)), ("last_obs", (np.arange(2),))]:
        with pytest.warns(DeprecationWarning, match=rf"VectorRingBuffer\.{name} is deprecated.*RingWriter\(ring\)\.{name}"):
            got = getattr(old, name)(*args)
        np.testing.assert_array_equal(got, getattr(RingWriter(new), name)(*args))
    with pytest.warns(DeprecationWarning, match="keep_whole_episodes"):
        old.keep_whole_episodes()
    RingWriter(new).keep_whole_episodes()
    assert old.keep_overflow and new.keep_overflow
    with pytest.warns(DeprecationWarning, match="set_episode_extras"):
        old.set_episode_extras(0, {"x": np.arange(2.0)})
    RingWriter(new).set_episode_extras(0, {"x": np.arange(2.0)})
    np.testing.assert_array_equal(old.extras["x"], new.extras["x"])
