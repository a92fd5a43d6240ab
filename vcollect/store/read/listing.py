"""The datasets under a root, each with the counts ``load_dataset`` would yield, damaged ones marked.

A listing takes each dataset's census by the read's own damage policy (store/read/shards/shard_census.py), so the
totals it reports are those of the episodes the dataset yields (``load_dataset(..., on_damage="skip")``):
a shard deleted, copied under another name, truncated or written with another layout is left out and the
dataset marked damaged, never counted. It stays fast: a shard's totals come from its manifest line when the
line's checksum holds and the file's size and mtime match it (no file opened, no data read); only a shard
whose line cannot stand in (an unrecorded file, an edited line, a touched file) has its small episode table
read, never its columns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vcollect.errors import DatasetError, DatasetNotFoundError
from vcollect.spaces import Leaf, leaves
from vcollect.store.layout.dataset_info import (
    DATASET_FILE,
    SHARDS_DIR,
    dataset_files,
    dataset_spaces,
    read_dataset_info,
)
from vcollect.store.layout.manifest import read_manifest
from vcollect.store.layout.naming import parse_dataset_id, resolve_root
from vcollect.store.layout.publish_journal import recover_publishes
from vcollect.store.layout.shard_format import shard_layout
from vcollect.store.layout.staging import is_replaced_leftover, remove_stale_staging
from vcollect.store.read.shards.shard_census import take_census
from vcollect.store.write.frame_stack import FrameStack, frame_leaves

__all__ = ["list_datasets"]


def list_datasets(root: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """All datasets under the root, broken and damaged ones included: id -> metadata plus totals and problems.

    A broken dataset (its dataset.json cannot be read or checked, its shards all disagree with it, or its
    folder, or a folder below the root named like a dataset, cannot be listed) is listed, never left out
    and never a reason to fail the others: ``broken`` says why, its ``total_episodes``, ``total_steps``,
    ``num_shards`` and ``created_at`` are None, ``size_bytes`` counts the files there without opening them.
    Folders whose path below the root is no valid dataset id (hidden staging folders, ...) are not datasets
    and are not listed.

    Args:
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        Id -> the dataset metadata (author, ...), ``dataset_id``, ``total_episodes``, ``total_steps``,
        ``num_shards`` (those of the episodes ``load_dataset(id, on_damage="skip")`` yields), ``size_bytes``
        (dataset.json plus the shards counted), ``created_at``, ``temporary_files`` (half-written ``.tmp``
        files, e.g. left by a crash), ``damage`` (one line per problem the read's damage policy finds, each
        naming its file: a recorded shard missing, an unrecorded copy or stray, a truncated, unreadable or
        differently laid out one; empty for a sound dataset, and ``load_dataset`` without
        ``on_damage="skip"`` raises DamagedDatasetError when it is not), ``corrupt_shards`` (the shard files
        left out of the counts) and ``broken``: None for a readable dataset, else a message naming the file
        and what is wrong with it.
    """
    root_path = resolve_root(root)
    recover_publishes(root_path)  # finish what a killed split or overwrite committed (store/layout/publish_journal.py)
    out: dict[str, dict[str, Any]] = {}
    if not root_path.is_dir():
        return out
    unreadable: list[OSError] = []
    layouts: _Layouts = {}
    for dirpath, dirnames, filenames in os.walk(root_path, onerror=unreadable.append):
        if any(is_replaced_leftover(name) for name in dirnames):  # maybe an overwrite killed between its renames:
            remove_stale_staging(Path(dirpath), root_path)  # its old dataset is put back before this folder is walked
            dirnames[:] = sorted(e.name for e in os.scandir(dirpath) if e.is_dir(follow_symlinks=False))
        if SHARDS_DIR in dirnames and DATASET_FILE in filenames:
            dirnames.remove(SHARDS_DIR)
        if DATASET_FILE not in filenames:
            continue
        path = Path(dirpath)
        dataset_id = path.relative_to(root_path).as_posix()
        try:
            parse_dataset_id(dataset_id)
        except Exception:
            continue
        entry = _listing_entry(path, dataset_id, root_path, layouts)
        if entry is not None:
            out[dataset_id] = entry
    for exc in unreadable:  # a folder named like a dataset that cannot be listed may hide one: say so
        if exc.filename is None or exc.filename == str(root_path):
            continue
        path = Path(exc.filename)
        try:
            dataset_id = path.relative_to(root_path).as_posix()
            parse_dataset_id(dataset_id)
        except Exception:
            continue
        out.setdefault(dataset_id, _broken_entry(path, dataset_id, exc))
    return dict(sorted(out.items()))


#: A listing's layouts already worked out: (spaces, frame stack) as JSON -> what _layout returns.
_Layouts = dict[str, tuple[list[Leaf], list[Leaf], dict[str, Any]]]


def _layout(info: dict[str, Any], layouts: _Layouts) -> tuple[list[Leaf], list[Leaf], dict[str, Any]]:
    """(stored observation leaves, action leaves, expected shard layout) of a dataset.json, worked out once per
    listing for datasets that share their spaces and frame stack (most under one root do)."""
    key = json.dumps([info["observation_space"], info["action_space"], info.get("frame_stack")], sort_keys=True)
    if key not in layouts:
        obs_space, act_space = dataset_spaces(info)
        stack = FrameStack.from_json(info.get("frame_stack"))
        expected = shard_layout(leaves(obs_space), leaves(act_space), None if stack is None else stack.to_json())
        layouts[key] = (frame_leaves(leaves(obs_space), stack), leaves(act_space), expected)
    return layouts[key]


def _listing_entry(path: Path, dataset_id: str, root_path: Path, layouts: _Layouts) -> dict[str, Any] | None:
    """The ``list_datasets`` value of one dataset directory; None when it vanished while listing (``layouts``:
    the listing's layouts worked out so far)."""
    try:
        info = read_dataset_info(path, dataset_id, root_path)
        obs_leaves, act_leaves, expected = _layout(info, layouts)
        manifest = read_manifest(path)  # before listing shards/, as a read does
        committed, temporary = dataset_files(path)
        census = take_census(path, manifest, committed, obs_leaves, act_leaves, expected, counts_only=True)
        if census.layout_problem is not None:
            raise DatasetError(census.layout_problem)
        size = (path / DATASET_FILE).stat().st_size + sum(_size_or_zero(shard.path) for shard in census.shards)
    except DatasetNotFoundError as not_found:
        file = path / DATASET_FILE
        if not os.path.lexists(file):
            return None  # deleted since the walk saw it
        error: Exception = not_found
        if file.is_symlink():  # a dangling link, not a deleted dataset
            error = DatasetError(f"{file} is a symbolic link to {os.readlink(file)!r}, which does not exist")
        return _broken_entry(path, dataset_id, error)
    except Exception as exc:
        return _broken_entry(path, dataset_id, exc)
    return {
        **info.get("metadata", {}),
        "dataset_id": dataset_id,
        "total_episodes": sum(shard.num_episodes for shard in census.shards),
        "total_steps": sum(shard.num_steps for shard in census.shards),
        "num_shards": len(census.shards),
        "size_bytes": size,
        "temporary_files": [str(p) for p in temporary],
        "damage": list(census.problems),
        "corrupt_shards": [str(p) for p in census.left_out],
        "created_at": info.get("created_at"),
        "broken": None,
    }


def _broken_entry(path: Path, dataset_id: str, exc: Exception) -> dict[str, Any]:
    """The ``list_datasets`` value of a dataset that cannot be read: ``broken`` names the file and the error."""
    message = str(exc)
    file = str(path / DATASET_FILE)
    if file not in message and not (isinstance(exc, OSError) and exc.filename is not None):
        message = f"{file}: {message}" if message else file
    if not isinstance(exc, DatasetError):
        message = f"{message} ({type(exc).__name__})"
    temporary: list[Path] = []
    try:
        committed, temporary = dataset_files(path)
    except OSError:
        committed = []
    size = sum(_size_or_zero(file_path) for file_path in [path / DATASET_FILE, *committed])
    return {
        "dataset_id": dataset_id,
        "total_episodes": None,
        "total_steps": None,
        "num_shards": None,
        "size_bytes": size,
        "temporary_files": [str(p) for p in temporary],
        "damage": [],
        "corrupt_shards": [],
        "created_at": None,
        "broken": message,
    }


def _size_or_zero(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0
