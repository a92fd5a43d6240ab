"""Folder changes that survive a crash and never interleave: a folder's fsync, a lock on a folder, and the
suffix of a file written under a temporary name before it is renamed into place."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TMP_SUFFIX", "folder_lock", "fsync_dir"]

#: Suffix of a file written under a temporary name (shards, dataset.json, journals) before its rename.
TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path, dir_fd: int | None = None) -> None:
    """fsync a directory so a rename inside it survives a crash (no-op where unsupported).

    Args:
        path: The directory whose entries were just changed.
        dir_fd: An open directory that a relative ``path`` is taken from (None: the working directory).
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder ``folder`` (flock on the folder itself: no file is made, and the
    kernel releases it when the holder dies, so a crash leaves no stale lock). Blocks while another holds it.

    Args:
        folder: An existing folder.

    Yields:
        None, while the lock is held.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
