"""A dataset's directory on disk: making it, opening it to append, moving it, and telling it from a replacement.

EpisodeStore's classmethods and ``move_to`` call these; what goes into ``dataset.json`` is ``dataset_info``'s,
and the shard files inside ``shards/`` are ``shard``'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from vcollect.errors import DatasetError, DatasetExistsError, DiskFullError, SpaceMismatchError
from vcollect.store.dataset_info import (
    DATASET_FILE,
    SHARDS_DIR,
    dataset_spaces,
    fsync_dir,
    read_dataset_info,
    write_json_atomic,
)
from vcollect.store.staging import remove_stale_json_tmps, remove_stale_shard_tmps

__all__ = [
    "APPEND_HINT",
    "NO_SPACE",
    "OVERWRITE_HINT",
    "Identity",
    "check_identity",
    "create_dataset_dir",
    "move_dataset_dir",
    "open_dataset_dir",
    "read_identity",
]

#: What a DatasetExistsError tells Python callers to do (the CLI says its flags instead).
OVERWRITE_HINT = "pass overwrite=True to replace it"
APPEND_HINT = "EpisodeStore.open() to append to it"

#: errnos of a write that failed for want of space (a full disk, or a quota)
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})

#: A dataset directory's device and inode, and the creation time its dataset.json records.
Identity = tuple[int, int, str | None]


def _make_dirs(path: Path, made: list[Path]) -> None:
    """``mkdir -p path``, appending each directory it creates to ``made`` (outermost first)."""
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if directory.is_dir():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # made by someone else meanwhile: not ours to remove
        made.append(directory)


def create_dataset_dir(path: Path, dataset_id: str, info: Mapping[str, Any], *, overwrite: bool) -> None:
    """Make the directory ``path`` of a new dataset: its ``shards/`` and its ``dataset.json`` (``info``).

    DatasetExistsError when a dataset is there unless ``overwrite`` (which deletes it first), or when someone
    else creates one there meanwhile; DiskFullError for want of space. A failed call removes the directories
    it made (only those, and only while empty).
    """
    exists = (path / DATASET_FILE).exists()
    if exists and not overwrite:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {str(path)!r}; {OVERWRITE_HINT} or {APPEND_HINT}"
        )
    if exists:
        shutil.rmtree(path)
    made: list[Path] = []
    try:
        _make_dirs(path / SHARDS_DIR, made)
        write_json_atomic(path / DATASET_FILE, info, exclusive=not overwrite)
    except FileExistsError:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} was created at {str(path)!r} by someone else meanwhile"
        ) from None
    except OSError as exc:
        for directory in reversed(made):  # only what this call made, and only while empty
            with contextlib.suppress(OSError):
                directory.rmdir()
        if exc.errno not in NO_SPACE:
            raise
        raise DiskFullError(
            f"no space left on device while creating dataset {dataset_id!r} at {str(path)!r}; "
            "nothing was created"
        ) from exc
    fsync_dir(path.parent)


def open_dataset_dir(
    path: Path,
    dataset_id: str,
    root_path: Path,
    observation_space: gym.Space[Any] | None,
    action_space: gym.Space[Any] | None,
) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The stored (observation, action) spaces of the dataset at ``path``, ready for a new writer.

    Given spaces must equal the stored ones, else SpaceMismatchError. Makes ``shards/`` if missing and removes
    the temporary files that crashed writers left behind (never those of a writer still running).
    """
    stored_obs, stored_act = dataset_spaces(read_dataset_info(path, dataset_id, root_path))
    for what, given, stored in (
        ("observation", observation_space, stored_obs),
        ("action", action_space, stored_act),
    ):
        if given is not None and given != stored:
            raise SpaceMismatchError(
                f"dataset {dataset_id!r} stores {what} space {stored}, but {given} was given"
            )
    (path / SHARDS_DIR).mkdir(exist_ok=True)
    remove_stale_shard_tmps(path / SHARDS_DIR)
    remove_stale_json_tmps(path)
    return stored_obs, stored_act


def move_dataset_dir(path: Path, new_path: Path, dataset_id: str, *, overwrite: bool) -> None:
    """Rename the dataset directory ``path`` to ``new_path`` (``dataset_id``'s place).

    DatasetExistsError if a dataset is there unless ``overwrite`` (which deletes it first). Across filesystems
    the directory is copied, then deleted (not atomic, but nothing is lost).
    """
    if (new_path / DATASET_FILE).exists():
        if not overwrite:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} already exists at {str(new_path)!r}; {OVERWRITE_HINT}"
            )
        shutil.rmtree(new_path)
    new_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, new_path)
    except OSError:  # another filesystem: copy, then delete (not atomic, but nothing is lost)
        shutil.move(str(path), str(new_path))
    fsync_dir(new_path.parent)


def read_identity(path: Path, dataset_id: str, root: Path) -> Identity:
    """What tells this dataset from one deleted and made again at its place: the directory's device and
    inode, and the creation time its dataset.json records."""
    info = read_dataset_info(path, dataset_id, root)
    st = os.stat(path)
    return st.st_dev, st.st_ino, info.get("created_at")


def check_identity(
    path: Path, dataset_id: str, root: Path, identity: Identity | None, pending_episodes: int
) -> None:
    """DatasetError when the dataset was deleted, moved or replaced since a writer read its ``identity``
    (None: nothing to check); ``pending_episodes`` is what the message says that writer keeps in memory."""
    if identity is None:
        return
    try:
        same = read_identity(path, dataset_id, root) == identity
    except (DatasetError, OSError):
        same = False
    if not same:
        raise DatasetError(
            f"dataset {dataset_id!r} at {str(path)!r} was deleted, moved or replaced since this "
            f"writer opened it: nothing was committed, and the {pending_episodes} pending episodes "
            "stay in memory only (open the dataset again with a new writer to store new episodes)"
        )
