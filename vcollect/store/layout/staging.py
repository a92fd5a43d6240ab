"""Temporary files and folders named after the process that made them, and removing those a crash left behind.

A shard is written to ``<shard>.<space>.tmp`` and a new dataset (combine, import, export) is built in a hidden
sibling folder ``.<name>.staging-<space>-<pid>-<uuid>`` and published with one rename. ``<space>`` names the
process-id space of the writer (boot id + pid namespace), so a leftover is known to be stale when it comes
from this process-id space and its process is dead. Leftovers of other machines or containers sharing the
filesystem cannot be checked that way: they are stale once untouched for :data:`STALE_AFTER_S` seconds.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from vcollect.durable import TMP_SUFFIX, folder_lock, fsync_dir, pid_space, process_alive
from vcollect.errors import DatasetError, DatasetExistsError, UnsafePathError
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.shard_format import SHARD_SUFFIX

__all__ = [
    "JOURNAL_NAME_FILE",
    "STALE_AFTER_S",
    "discard_staging",
    "exchange_paths",
    "fsync_tree",
    "hidden_dir",
    "is_replaced_leftover",
    "is_stale",
    "new_staging_dir",
    "pid_space",
    "process_alive",
    "publish_dir",
    "remove_stale_json_tmps",
    "remove_stale_shard_tmps",
    "remove_stale_staging",
    "shard_tmp_path",
]

#: A leftover whose owner cannot be checked (another machine or container) is stale after this long untouched.
STALE_AFTER_S = 3600.0
#: In a staging folder that is part of a journaled publish (store/layout/publish_journal.py): the journal's path.
JOURNAL_NAME_FILE = ".publish-journal"

# <20-digit time>-w<pid>x<hex>-<seq>.h5.<space>.tmp (shard.write_shard's temporary name; without
# .<space> from vcollect versions before it: those are removed by age only)
_SHARD_TMP_RE = re.compile(
    r"\d+-w(?P<pid>\d+)x[0-9a-f]+-\d+" + re.escape(SHARD_SUFFIX) + r"(?:\.(?P<space>[0-9a-f]{8}))?"
    + re.escape(TMP_SUFFIX)
)
# dataset.json.<pid>.<hex>.tmp (dataset_info.write_json_atomic's temporary name: removed by age only)
_JSON_TMP_RE = re.compile(r"dataset\.json\.\d+\.[0-9a-f]+" + re.escape(TMP_SUFFIX))
# .<name>.<kind>-<space>-<pid>-<uuid>: a dataset being built (staging), replaced or deleted
_HIDDEN_DIR_RE = re.compile(
    r"\.(?P<name>.+)\.(?P<kind>staging|replaced|deleting)-(?P<space>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{12}"
)


def is_stale(space: str, pid: int, path: Path) -> bool:
    """Dead owner in this process-id space, or (any owner) nothing under ``path`` touched for STALE_AFTER_S."""
    if space == pid_space() and not process_alive(pid):
        return True
    return time.time() - _newest_mtime(path) > STALE_AFTER_S


def shard_tmp_path(final: Path) -> Path:
    """The temporary name a shard is written under before it is renamed to ``final``."""
    return final.with_name(f"{final.name}.{pid_space()}{TMP_SUFFIX}")


def remove_stale_shard_tmps(shards_dir: Path) -> list[Path]:
    """Remove temporary shard files of dead writers (or untouched for STALE_AFTER_S); returns those removed.

    A live writer's file (one in the middle of a commit) is never removed.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(shards_dir))
    except OSError:
        return removed
    for entry in entries:
        match = _SHARD_TMP_RE.fullmatch(entry.name)
        if match is None:
            continue
        try:
            if not is_stale(match["space"] or "", int(match["pid"]), Path(entry.path)):
                continue
            os.unlink(entry.path)
        except OSError:  # gone meanwhile, or not ours to remove
            continue
        removed.append(Path(entry.path))
    return removed


def remove_stale_json_tmps(dataset_dir: Path) -> list[Path]:
    """Remove temporary dataset.json files untouched for STALE_AFTER_S (their names carry no process-id
    space, so a dead writer's is only known by its age); returns those removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(dataset_dir))
    except OSError:
        return removed
    for entry in entries:
        if _JSON_TMP_RE.fullmatch(entry.name) is None:
            continue
        try:
            if time.time() - entry.stat(follow_symlinks=False).st_mtime <= STALE_AFTER_S:
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _newest_mtime(path: Path) -> float:
    """Latest modification time of a file, or of a folder and everything in it."""
    try:
        newest = os.stat(path, follow_symlinks=False).st_mtime
    except OSError:  # gone meanwhile: nothing to remove
        return time.time()
    for dirpath, _, filenames in os.walk(path):
        for name in [".", *filenames]:
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, name), follow_symlinks=False).st_mtime)
            except OSError:
                continue
    return newest


def hidden_dir(final: Path, kind: str) -> Path:
    """A new hidden sibling name of ``final`` for this process (``kind``: staging, replaced, deleting); the
    next operation in that folder removes it once this process is dead (:func:`remove_stale_staging`)."""
    return final.with_name(f".{final.name}.{kind}-{pid_space()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def new_staging_dir(final: Path, root: Path) -> Path:
    """A fresh hidden sibling of ``final`` (created, with its parents) to build a dataset in; ``final`` must
    lie inside ``root`` with no symbolic link on the way (UnsafePathError)."""
    check_contained(final, root, action="build a dataset at")
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(final.parent, root)
    staging = hidden_dir(final, "staging")
    staging.mkdir()
    return staging


def remove_stale_staging(parent: Path, root: Path) -> list[Path]:
    """Remove the staging/replaced/deleting folders under ``parent`` that dead processes left; returns those removed.

    A "replaced" folder whose dataset place is empty is an overwrite killed between its two renames (the old
    dataset aside, the new one not yet in): it is renamed back, so the old dataset is there again. Nothing is
    touched when ``parent`` is not a real folder inside ``root`` (reached through a link).
    """
    removed: list[Path] = []
    try:
        check_contained(parent / "entry", root, action="clean up")  # parent itself and every folder above it
    except UnsafePathError:
        return removed
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        match = _HIDDEN_DIR_RE.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if not is_stale(match["space"], int(match["pid"]), path) or _journaled(path):
            continue
        final = path.with_name(match["name"])
        if match["kind"] == "replaced" and not os.path.lexists(final):
            try:
                os.rename(path, final)
                continue
            except OSError:
                if not os.path.lexists(final):
                    continue  # keep the only copy of that dataset
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed


def is_replaced_leftover(name: str) -> bool:
    """Whether ``name`` is the hidden folder an overwrite moves the old dataset to (see remove_stale_staging)."""
    match = _HIDDEN_DIR_RE.fullmatch(name)
    return match is not None and match["kind"] == "replaced"


def _journaled(staging: Path) -> bool:
    """A staging folder whose journaled publish was committed: the journal's next reader publishes it."""
    try:
        journal = (staging / JOURNAL_NAME_FILE).read_text(encoding="utf-8")
    except OSError:
        return False
    return os.path.isfile(journal)


def _remove_empty_tree(folder: Path) -> None:
    """Remove ``folder`` if it holds nothing but empty folders (e.g. what a failed create left); else keep it."""
    for dirpath, _, _ in os.walk(folder, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            return


def publish_dir(
    staging: Path, final: Path, *, root: Path, marker: str, overwrite: bool, exists_message: str
) -> None:
    """Move the finished ``staging`` folder to ``final`` with one rename.

    ``marker`` (``dataset.json``, Minari's ``data``) tells a dataset at ``final``: then DatasetExistsError
    (``exists_message``) unless ``overwrite``, which moves the old one aside first (a hidden sibling removed
    right after; if a crash comes between the two renames, the next load or operation there puts it back).
    Empty folders at ``final`` are replaced; anything else there is kept, with DatasetError. Both folders
    must lie inside ``root`` with no symbolic link on the way (UnsafePathError, nothing moved).
    """
    check_contained(staging, root, action="publish from")
    check_contained(final, root, action="publish to")
    if staging.parent != final.parent or staging.is_symlink():
        raise UnsafePathError(f"refusing to publish {str(staging)!r}: not a staging folder beside {str(final)!r}")
    try:
        os.rename(staging, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
        if not os.path.lexists(final / marker):
            if not final.is_symlink():  # a link is never walked: its empty folders lie outside the root
                _remove_empty_tree(final)
            try:
                os.rename(staging, final)
            except OSError:
                raise DatasetError(
                    f"cannot put the new dataset at {str(final)!r}: something that is not a dataset is there"
                ) from exc
        elif not overwrite:
            raise DatasetExistsError(exists_message) from None
        else:
            old = hidden_dir(final, "replaced")
            with folder_lock(final.parent):  # one replacement at a time: the two renames never interleave
                if not os.path.lexists(final / marker):
                    raise DatasetError(
                        f"the dataset at {str(final)!r} was deleted by someone else meanwhile; it was not overwritten"
                    ) from exc
                if exchange_paths(staging, final):  # one atomic step: the old dataset is now at the staging name
                    old = staging
                else:
                    os.rename(final, old)
                    os.rename(staging, final)
            if old.is_symlink():  # a dataset linked in from elsewhere: drop the link, not what it points to
                old.unlink()
            else:
                shutil.rmtree(old, ignore_errors=True)
    fsync_dir(final.parent)


def exchange_paths(a: Path, b: Path) -> bool:
    """Swap the two existing paths ``a`` and ``b`` in one atomic step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``), so a reader of either name sees the old entry or the new one, never none.

    Returns:
        True when swapped; False where the kernel, libc or filesystem cannot (the caller then renames twice).
    """
    func = _renameat2()
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    """libc's renameat2, or None where libc has none (not Linux, or glibc before 2.28)."""
    try:
        func = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


def fsync_tree(folder: Path) -> None:
    """fsync every file and folder under ``folder`` (before publishing files written without fsync)."""
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def discard_staging(staging: Path, root: Path) -> None:
    """Remove an unfinished staging folder, and the folders between it and ``root`` left empty (UnsafePathError
    when it does not lie inside ``root``)."""
    check_contained(staging, root, action="discard")
    shutil.rmtree(staging, ignore_errors=True)
    parent = staging.parent
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent
