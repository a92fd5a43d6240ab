"""The public surface a user holds in mind: a short sorted top level that README.md documents, every error in
vcollect.errors and README's table, and the names that left the top level still importable, with a warning."""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from pathlib import Path

import pytest

import vcollect
import vcollect.errors

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")

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
    assert len(names) <= 40, f"vcollect.__all__ has {len(names)} names"
    assert len(set(names)) == len(names)
    undocumented = [name for name in names if not re.search(rf"\b{re.escape(name)}\b", README)]
    assert not undocumented, f"names of vcollect.__all__ that README.md never mentions: {undocumented}"
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


def error_table() -> dict[str, list[str]]:
    """README's Errors table: name -> base classes."""
    section = README.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| .*? \| (.*?) \|$", section, re.M)
    return {name: re.findall(r"`(\w+)`", bases) for name, bases in rows}


def test_every_error_is_in_vcollect_errors_and_in_readme_table_with_its_bases() -> None:
    classes = {
        name: obj for name, obj in vars(vcollect.errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == "vcollect.errors"
    }
    assert sorted(vcollect.errors.__all__) == vcollect.errors.__all__ == sorted(classes)
    table = error_table()
    assert sorted(table) == sorted(classes), "README's Errors table and vcollect.errors list different names"
    for name, cls in classes.items():
        assert table[name] == [base.__name__ for base in cls.__bases__], name
        if name != "VCollectError" and not issubclass(cls, Warning):
            assert issubclass(cls, vcollect.errors.VCollectError), name
