"""File and folder changes that survive a crash and never interleave: a folder's fsync, a lock on a folder, the
suffix of a file written under a temporary name before it is renamed into place, the process-id space that
tells a dead writer's leftovers from a live one's, and a whole file published at its name by one rename.

Neutral ground below the episode store and the rings' checkpoints, which both write this way.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TMP_SUFFIX", "folder_lock", "fsync_dir", "pid_space", "process_alive", "published_file"]

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


@functools.cache
def pid_space() -> str:
    """8 hex digits naming this process-id space: the same for processes that can see each other's pids."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # no /proc: the host name (pids are then only compared on one machine)
        boot, namespace = socket.gethostname(), ""
    return hashlib.sha1(f"{boot}|{namespace}".encode(), usedforsecurity=False).hexdigest()[:8]


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (in this process-id space)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no pid is that large
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return True
    return True


def _tmp_name_re(final: Path) -> re.Pattern[str]:
    """<final name>.<space>-<pid>-<hex>.tmp: :func:`published_file`'s temporary names for ``final``."""
    return re.compile(re.escape(final.name) + r"\.(?P<space>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}" + re.escape(TMP_SUFFIX))


def _remove_dead_tmps(final: Path) -> None:
    """Remove the temporary files of ``final`` left by writers of this process-id space that died mid-write."""
    pattern = _tmp_name_re(final)
    try:
        entries = list(os.scandir(final.parent))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or match["space"] != pid_space() or process_alive(int(match["pid"])):
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            os.unlink(entry.path)


@contextlib.contextmanager
def published_file(final: Path, *, overwrite: bool) -> Iterator[Path]:
    """Write a file under a temporary name beside ``final`` and publish it whole: on leaving the block the file
    is fsynced and renamed to ``final`` (or, without ``overwrite``, linked there, so that of two writers racing
    for a free name exactly one wins), then the folder is fsynced. Until that rename ``final`` keeps what it
    held, whatever happens to the writer; a block left by an exception removes the temporary file, and
    temporary files of ``final`` whose writers died (a kill mid-write) are removed when the next one starts.

    Args:
        final: Where the file is published; its folder must exist.
        overwrite: Replace a file already at ``final`` (else FileExistsError, before anything is written).

    Yields:
        The temporary path to write the file at.

    Raises:
        FileExistsError: ``final`` exists and ``overwrite`` is false.
    """
    final = Path(final)
    if not overwrite and os.path.lexists(final):
        raise FileExistsError(final)
    _remove_dead_tmps(final)
    tmp = final.with_name(f"{final.name}.{pid_space()}-{os.getpid()}-{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, final)
        else:
            os.link(tmp, final)  # atomic "create if absent"
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(final.parent)
