"""Deleting a dataset under a root (never through a symbolic link); listing them is store/read/listing.py's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from vcollect.durable import folder_lock, fsync_dir
from vcollect.errors import DatasetError, DatasetNotFoundError
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_dir import nested_datasets
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.staging import hidden_dir, remove_stale_staging

__all__ = ["delete_dataset", "symlinked_folder"]


def symlinked_folder(dataset_id: str, root: str | os.PathLike[str] | None = None) -> Path | None:
    """The first folder of the dataset's path below the root that is a symbolic link, or None.

    Deleting a dataset reached through a link would delete files outside the datasets root (the root
    itself may be a link: it is the user's choice of where datasets live).
    """
    parse_dataset_id(dataset_id)
    path = resolve_root(root)
    for part in dataset_id.split("/"):
        path = path / part
        if path.is_symlink():
            return path
    return None


def delete_dataset(dataset_id: str, root: str | os.PathLike[str] | None = None) -> None:
    """Delete a dataset directory (and namespace directories left empty).

    All or nothing: the folder is first renamed to a hidden name (one rename), then removed; killed part-way,
    the id is already gone and the next operation in its namespace removes the hidden rest.

    Args:
        dataset_id: The dataset's id.
        root: The datasets root (None: :func:`resolve_root`'s default).

    Raises:
        DatasetNotFoundError: No such dataset (or another process deleted it meanwhile).
        DatasetError: Datasets lie inside its folder, or a folder of its path below the root is a symbolic
            link (so a deletion never reaches outside the root); nothing is deleted.
        InvalidDatasetIdError: ``dataset_id`` is malformed.
    """
    parse_dataset_id(dataset_id)
    root_path = resolve_root(root)
    path = dataset_path(dataset_id, root_path)
    link = symlinked_folder(dataset_id, root_path)
    if link is not None:
        raise DatasetError(
            f"refusing to delete dataset {dataset_id!r}: {str(link)!r} is a symbolic link, and deleting through "
            "it would delete files outside the datasets root"
        )
    if path.parent.is_dir():
        remove_stale_staging(path.parent, root_path)  # what deletions killed part-way left
    if not (path / DATASET_FILE).is_file():
        raise DatasetNotFoundError(
            f"no dataset {dataset_id!r} under root {str(root_path)!r} (looked for {str(path / DATASET_FILE)!r})"
        )
    inner = nested_datasets(path)
    if inner:
        raise DatasetError(
            f"refusing to delete dataset {dataset_id!r}: its folder holds other datasets ("
            + ", ".join(repr(p.relative_to(root_path).as_posix()) for p in inner[:3])
            + (", ..." if len(inner) > 3 else "") + "), which deleting it would delete; nothing was deleted"
        )
    check_contained(path, root_path, action="delete")
    gone = hidden_dir(path, "deleting")
    with folder_lock(path.parent):
        try:
            os.rename(path, gone)  # all or nothing: the id is gone at once, the files follow
        except FileNotFoundError:
            raise DatasetNotFoundError(f"dataset {dataset_id!r} was deleted by someone else meanwhile") from None
        fsync_dir(path.parent)
    shutil.rmtree(gone)
    parent = path.parent
    while parent != root_path and root_path in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
