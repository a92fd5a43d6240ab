"""The datasets under a root: list them with their totals, delete one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import h5py

from vcollect.errors import DatasetError, DatasetNotFoundError
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_dir import nested_datasets
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR, dataset_files, read_dataset_info
from vcollect.store.layout.durable import folder_lock, fsync_dir
from vcollect.store.layout.manifest import read_manifest
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.publish_journal import recover_publishes
from vcollect.store.layout.shard_format import SHARD_FORMAT_NAME
from vcollect.store.layout.staging import hidden_dir, is_replaced_leftover, remove_stale_staging

__all__ = ["delete_dataset", "list_datasets", "symlinked_folder"]


def _shard_totals(file: Path) -> tuple[int, int]:
    with h5py.File(file, "r") as f:
        if f.attrs.get("format") != SHARD_FORMAT_NAME:
            raise ValueError("not a vcollect shard")
        return int(f.attrs["num_episodes"]), int(f.attrs["num_steps"])


def list_datasets(root: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """All datasets under the root, broken ones included, with their totals and any problem files.

    A broken dataset (its dataset.json cannot be read or checked, or its folder, or a folder below the
    root named like a dataset, cannot be listed) is listed, never left out and never a reason to fail
    the others: ``broken`` says why, its
    ``total_episodes``, ``total_steps``, ``num_shards`` and ``created_at`` are None, ``size_bytes``
    counts the files there without opening them. Folders whose path below the root is no valid dataset
    id (hidden staging folders, ...) are not datasets and are not listed.

    Args:
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        Id -> the dataset metadata (author, ...), ``dataset_id``, ``total_episodes``, ``total_steps``,
        ``num_shards``, ``size_bytes`` (dataset.json plus readable shards), ``created_at``,
        ``temporary_files`` (half-written ``.tmp`` files, e.g. left by a crash), ``corrupt_shards``
        (committed files that cannot be opened; not counted in the totals) and ``broken``: None for a
        readable dataset, else a message naming the file and what is wrong with it.
    """
    root_path = resolve_root(root)
    recover_publishes(root_path)  # finish what a killed split or overwrite committed (store/layout/publish_journal.py)
    out: dict[str, dict[str, Any]] = {}
    if not root_path.is_dir():
        return out
    unreadable: list[OSError] = []
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
        entry = _listing_entry(path, dataset_id, root_path)
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


def _committed_totals(file: Path, entry: dict[str, Any] | None) -> tuple[int, int]:
    """A shard's (episodes, steps): from its manifest line when the file is as committed (same size and
    mtime: no file opened, so listing thousands of shards stays fast), else from the file."""
    if entry is not None:
        st = file.stat()
        if st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns"):
            return int(entry["episodes"]), int(entry["steps"])
    return _shard_totals(file)


def _listing_entry(path: Path, dataset_id: str, root_path: Path) -> dict[str, Any] | None:
    """The ``list_datasets`` value of one dataset directory; None when it vanished while listing."""
    try:
        info = read_dataset_info(path, dataset_id, root_path)
        committed, temporary = dataset_files(path)
        size = (path / DATASET_FILE).stat().st_size
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
    episodes = steps = 0
    corrupt: list[str] = []
    manifest = read_manifest(path).by_shard
    for file in committed:
        try:
            n_eps, n_steps = _committed_totals(file, manifest.get(file.name))
            size += file.stat().st_size
        except Exception:
            corrupt.append(str(file))
            continue
        episodes += n_eps
        steps += n_steps
    return {
        **info.get("metadata", {}),
        "dataset_id": dataset_id,
        "total_episodes": episodes,
        "total_steps": steps,
        "num_shards": len(committed) - len(corrupt),
        "size_bytes": size,
        "temporary_files": [str(p) for p in temporary],
        "corrupt_shards": corrupt,
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
        "corrupt_shards": [],
        "created_at": None,
        "broken": message,
    }


def _size_or_zero(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


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
