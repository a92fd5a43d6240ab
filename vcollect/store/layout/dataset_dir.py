"""A dataset's directory on disk: making it, opening it to append, moving it, and telling it from a replacement.

EpisodeStore's classmethods and ``move_to`` call these; what goes into ``dataset.json`` is ``dataset_info``'s,
and the shard files inside ``shards/`` are ``shard``'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from vcollect.durable import folder_lock, fsync_dir
from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DiskFullError,
    InvalidDatasetIdError,
    SpaceMismatchError,
)
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_info import (
    DATASET_FILE,
    SHARDS_DIR,
    dataset_spaces,
    read_dataset_info,
    write_json_atomic,
)
from vcollect.store.layout.manifest import MANIFEST_DIR
from vcollect.store.layout.staging import (
    exchange_paths,
    hidden_dir,
    new_staging_dir,
    remove_stale_json_tmps,
    remove_stale_shard_tmps,
    remove_stale_staging,
)

__all__ = [
    "APPEND_HINT",
    "NO_SPACE",
    "OVERWRITE_HINT",
    "HeldDir",
    "Identity",
    "check_identity",
    "check_not_nested",
    "create_dataset_dir",
    "drop_dir",
    "hold_dataset_dir",
    "move_dataset_dir",
    "nested_datasets",
    "open_dataset_dir",
    "read_identity",
    "replace_dataset_dir",
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


def nested_datasets(path: Path) -> list[Path]:
    """The datasets inside the folder ``path`` (its own dataset.json and shards/ aside), outermost only."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(path):
        if dirpath == str(path):
            if SHARDS_DIR in dirnames and DATASET_FILE in filenames:
                dirnames.remove(SHARDS_DIR)
            continue
        if DATASET_FILE in filenames:
            found.append(Path(dirpath))
            dirnames.clear()
    return found


def _root_of(path: Path, dataset_id: str) -> Path:
    return path.parents[len(dataset_id.split("/")) - 1]


def check_not_nested(path: Path, dataset_id: str, *, inside: bool = True) -> None:
    """InvalidDatasetIdError when ``dataset_id`` (at ``path``, or a staging folder beside its place) lies
    inside another dataset's folder, or (``inside``) when datasets lie inside the folder it would take."""
    root = _root_of(path, dataset_id)
    folder = root
    for part in dataset_id.split("/")[:-1]:
        folder = folder / part
        if (folder / DATASET_FILE).exists():
            raise InvalidDatasetIdError(
                f"dataset id {dataset_id!r} lies inside dataset {folder.relative_to(root).as_posix()!r} "
                f"(at {str(folder)!r}): a dataset cannot hold datasets or namespaces; pick another id"
            )
    if not inside:
        return
    inner = nested_datasets(root.joinpath(*dataset_id.split("/")))
    if inner:
        raise InvalidDatasetIdError(
            f"dataset id {dataset_id!r} names a folder that holds datasets ("
            + ", ".join(repr(p.relative_to(root).as_posix()) for p in inner[:3])
            + (", ..." if len(inner) > 3 else "") + "): a dataset cannot hold datasets; pick another id"
        )


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """The device and inode of the dataset folder at ``path``, or None when no dataset is there."""
    if not (path / DATASET_FILE).exists():
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def drop_dir(path: Path, root: Path) -> None:
    """Remove a folder renamed aside (a link to a dataset elsewhere: the link only); UnsafePathError when it
    does not lie inside ``root``."""
    check_contained(path, root, action="delete")
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def replace_dataset_dir(
    new: Path, final: Path, dataset_id: str, seen: tuple[int, int] | None, *, new_root: Path | None = None
) -> None:
    """Put the complete dataset folder ``new`` at ``final`` in place of the dataset ``seen`` there (its
    :func:`_folder_identity`) when the caller began.

    Under a lock on the namespace folder, so of two processes replacing one dataset at once exactly one wins;
    the other gets DatasetError (the dataset was replaced, deleted or made by someone else meanwhile) and
    ``new`` is left to it. The old dataset is renamed aside (one rename), the new one renamed in (one
    rename), and only then is the old one removed: a crash in between leaves the new dataset at ``final``, or
    the old one aside under a hidden name, which the next load, listing or operation there renames back
    (staging.remove_stale_staging); never a half-deleted one. UnsafePathError (nothing changed) when a folder
    between the datasets root and ``final`` is a symbolic link, or between ``new_root`` (the root ``new`` lies
    in, when not ``final``'s: a dataset brought in from another root) and ``new``.
    """
    root = _root_of(final, dataset_id)
    new_root = root if new_root is None else new_root
    check_contained(new, new_root, action="move")
    check_contained(final, root, action="replace")
    with folder_lock(final.parent):
        now = _folder_identity(final)
        if now != seen:
            what = "deleted" if now is None else ("made" if seen is None else "replaced")
            raise DatasetError(
                f"dataset {dataset_id!r} at {str(final)!r} was {what} by someone else meanwhile; it was not "
                "overwritten (try again to replace what is there now)"
            )
        old: Path | None = None
        if seen is not None:
            inner = nested_datasets(final)
            if inner:
                raise DatasetError(
                    f"refusing to overwrite dataset {dataset_id!r}: its folder holds other datasets ("
                    + ", ".join(repr(str(p)) for p in inner[:3]) + "), which overwriting would delete"
                )
            if exchange_paths(new, final):  # one atomic step: the old dataset is now at the staging name
                old = new
            else:
                old = hidden_dir(final, "replaced")
                os.rename(final, old)
        if old != new:
            try:
                os.rename(new, final)
            except OSError:
                if old is not None:  # put the old one back
                    os.rename(old, final)
                raise
        fsync_dir(final.parent)
    if old is not None:
        drop_dir(old, new_root if old == new else root)  # exchanged: the old dataset lies where ``new`` was


def create_dataset_dir(path: Path, dataset_id: str, info: Mapping[str, Any], *, overwrite: bool) -> None:
    """Make the directory ``path`` of a new dataset: its ``shards/``, ``manifest/`` and ``dataset.json`` (``info``).

    DatasetExistsError when a dataset is there unless ``overwrite`` (which builds the new one in a hidden
    folder and swaps it in with :func:`replace_dataset_dir`), or when someone else creates one there
    meanwhile; InvalidDatasetIdError when the id lies inside another dataset (or, created in place, its folder
    holds datasets); DiskFullError for want of space. A failed call removes the directories it made (only
    those, and only while empty).
    """
    check_not_nested(path, dataset_id, inside=path == _root_of(path, dataset_id).joinpath(*dataset_id.split("/")))
    root = _root_of(path, dataset_id)
    if path.parent.is_dir():
        remove_stale_staging(path.parent, root)
    seen = _folder_identity(path)
    if seen is not None and not overwrite:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {str(path)!r}; {OVERWRITE_HINT} or {APPEND_HINT}"
        )
    if seen is not None:
        staging = new_staging_dir(path, root)
        try:
            (staging / SHARDS_DIR).mkdir()
            (staging / MANIFEST_DIR).mkdir()
            write_json_atomic(staging / DATASET_FILE, info, exclusive=True)
            replace_dataset_dir(staging, path, dataset_id, seen)
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in NO_SPACE:
                raise DiskFullError(
                    f"no space left on device while overwriting dataset {dataset_id!r} at {str(path)!r}; "
                    "the old dataset is kept"
                ) from exc
            raise
        return
    made: list[Path] = []
    try:
        _make_dirs(path / SHARDS_DIR, made)
        _make_dirs(path / MANIFEST_DIR, made)
        write_json_atomic(path / DATASET_FILE, info, exclusive=True)
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
    the temporary files and hidden folders (beside it) that crashed writers left behind (never those of a
    process still running).
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
    remove_stale_staging(path.parent, root_path)  # what a killed delete or overwrite of a neighbour left
    remove_stale_shard_tmps(path / SHARDS_DIR)
    remove_stale_json_tmps(path)
    return stored_obs, stored_act


def move_dataset_dir(path: Path, new_path: Path, dataset_id: str, *, source_root: Path, overwrite: bool) -> None:
    """Rename the dataset directory ``path`` to ``new_path`` (``dataset_id``'s place).

    DatasetExistsError if a dataset is there unless ``overwrite``, which renames the old one aside and drops
    it only once the moved one is in place (:func:`replace_dataset_dir`). InvalidDatasetIdError when the new
    id lies inside another dataset. Across filesystems the directory is copied, then deleted (not atomic, but
    nothing is lost). Both places must lie inside their roots (``source_root`` for ``path``) with no symbolic
    link on the way (UnsafePathError, nothing moved).
    """
    check_contained(path, source_root, action="move")
    check_not_nested(new_path, dataset_id, inside=False)
    seen = _folder_identity(new_path)
    if seen is not None and not overwrite:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {str(new_path)!r}; {OVERWRITE_HINT}"
        )
    root = _root_of(new_path, dataset_id)
    check_contained(new_path, root, action="move a dataset to")
    new_path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(new_path.parent, root)
    path_root = source_root
    if os.stat(path).st_dev != os.stat(new_path.parent).st_dev:  # another filesystem: copy beside it first
        staging = hidden_dir(new_path, "staging")
        try:
            shutil.copytree(path, staging, symlinks=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        path, moved_from, path_root = staging, path, root
    else:
        moved_from = None
    if seen is None:
        try:
            os.rename(path, new_path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if (new_path / DATASET_FILE).exists():
                raise DatasetExistsError(
                    f"dataset {dataset_id!r} was created at {str(new_path)!r} by someone else meanwhile"
                ) from None
            check_not_nested(new_path, dataset_id)
            raise DatasetError(
                f"cannot move the dataset to {str(new_path)!r}: something that is not a dataset is there"
            ) from exc
        fsync_dir(new_path.parent)
    else:
        replace_dataset_dir(path, new_path, dataset_id, seen, new_root=path_root)
    if moved_from is not None:
        shutil.rmtree(check_contained(moved_from, source_root, action="delete"))


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


class HeldDir:
    """An open descriptor of a dataset's directory, held by its writer: files written relative to ``fd``
    land in the directory the writer opened, whatever is at its path now.

    The descriptor is not inherited by programs a subprocess runs (close-on-exec). :meth:`close` closes it
    (once, from any thread; later calls do nothing), and so does garbage collection of the handle; a writer
    closes it only when no commit uses it any more.
    """

    def __init__(self, path: Path) -> None:
        """Open the directory ``path``.

        Args:
            path: The dataset's directory.

        Raises:
            OSError: It cannot be opened as a directory.
        """
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._close = weakref.finalize(self, os.close, self.fd)
        self._close.atexit = False  # the store's own exit close commits through it first; the OS closes the rest

    def replaced(self) -> bool:
        """Whether the directory now at ``path`` is another one (or none): the dataset was deleted, moved
        or replaced since the descriptor was opened.

        Returns:
            True when the path no longer names the held directory.
        """
        held = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        self._close()


def hold_dataset_dir(path: Path, dataset_id: str, root: Path) -> tuple[HeldDir, Identity]:
    """Open the directory of the dataset at ``path`` for a writer, with its :func:`read_identity`.

    Args:
        path: The dataset's directory.
        dataset_id: Its id (for messages).
        root: The datasets root it lies in.

    Returns:
        The held directory and the dataset's identity, both of the same directory.

    Raises:
        DatasetError: The dataset at ``path`` was replaced while it was being opened.
        DatasetNotFoundError: No dataset is at ``path``.
    """
    identity = read_identity(path, dataset_id, root)
    held = HeldDir(path)
    st = os.fstat(held.fd)
    if identity[:2] != (st.st_dev, st.st_ino):
        held.close()
        raise DatasetError(
            f"dataset {dataset_id!r} at {str(path)!r} was replaced by someone else while this writer "
            "opened it; open it again"
        )
    return held, identity
