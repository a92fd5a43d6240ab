"""The resume folders of downloads: where a download keeps what it fetched until it publishes, held while it
runs, and removed once abandoned.

A download keeps the shards it fetched (and the ``.part`` of each one being fetched) in
``<root>/.downloads/<the dataset's path below the root>`` until it publishes the dataset; one that stops
(an error, a kill) leaves them there for the next download of that dataset to resume from. While it runs, a
download holds a shared flock on its resume folder (:func:`held_resume`: several downloads of one dataset
share it; the kernel releases it when the process dies). A download that has published removes its resume
folder only when no other download holds it (its lock taken exclusive without waiting,
:meth:`ResumeHold.remove`): the last one to finish removes it. Before it fetches anything, a download removes the
resume folders of its root that no running download holds and that nothing touched for
:data:`RESUME_KEPT_S` seconds (:func:`remove_stale_resumes`), so what killed downloads left is not kept
forever, while a download still running, or one stopped lately (the one a user is about to resume), is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from vcollect.errors import UnsafePathError
from vcollect.store.layout.containment import check_contained

__all__ = ["RESUME_DIR", "RESUME_KEPT_S", "ResumeHold", "held_resume", "remove_stale_resumes", "resume_dir"]

#: The hidden folder under the root where downloads keep what they fetched until it is published.
RESUME_DIR = ".downloads"
#: A resume folder no running download holds is removed once nothing in it was touched for this long.
RESUME_KEPT_S = 24 * 3600.0
_ATTEMPTS = 100  # folders made again when a clean-up removed them before they were held


def resume_dir(final: Path, root: Path) -> Path:
    """Where the download of the dataset at ``final`` (inside ``root``) keeps what it fetched until it is
    published: its path below the root, under the root's ``.downloads``."""
    return root / RESUME_DIR / final.relative_to(root)


class ResumeHold:
    """A download's shared flock on its resume folder (:func:`held_resume`).

    Args:
        resume: The resume folder.
        fd: The descriptor of the folder the lock is held on (closed by :func:`held_resume`).
    """

    def __init__(self, resume: Path, fd: int) -> None:
        self.resume = resume
        self._fd = fd

    def remove(self, root: Path) -> bool:
        """Remove the resume folder, and the folders above it inside ``.downloads`` left empty, unless another
        download holds it too: the lock is taken exclusive without waiting, and where that fails the folder
        stays for the downloads still using it (the last of them removes it). Either way this download holds
        it no longer afterwards.

        Args:
            root: The datasets' root.

        Returns:
            Whether the folder was removed.
        """
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another download holds it
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            return False
        shutil.rmtree(self.resume, ignore_errors=True)
        top = root / RESUME_DIR
        folder = self.resume.parent
        while folder == top or top in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                break
            folder = folder.parent
        return True


@contextlib.contextmanager
def held_resume(resume: Path) -> Iterator[ResumeHold]:
    """Make the resume folder ``resume`` (with its parents) and hold a shared flock on it while the download
    runs, so :func:`remove_stale_resumes` and other downloads' :meth:`ResumeHold.remove` leave it alone.

    Raises:
        OSError: The folder cannot be made or opened (a clean-up removing it each time is retried).
    """
    for attempt in range(_ATTEMPTS):
        try:
            resume.mkdir(parents=True, exist_ok=True)
            fd = os.open(resume, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:  # a clean-up removed a folder on the way meanwhile
            if attempt == _ATTEMPTS - 1:
                raise
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(resume, follow_symlinks=False))
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if not same:  # removed by a clean-up while this waited for the lock: make it again
            os.close(fd)
            continue
        try:
            yield ResumeHold(resume, fd)
        finally:
            os.close(fd)  # releases the lock
        return
    raise FileNotFoundError(f"the resume folder {str(resume)!r} kept being removed while it was made")


def remove_stale_resumes(root: Path, *, kept_s: float = RESUME_KEPT_S) -> list[Path]:
    """Remove what downloads that no longer run left in the root's ``.downloads``: the files of each folder
    no download holds (:func:`held_resume`) and in which nothing was touched for ``kept_s`` seconds, then the
    folders left empty. Nothing is touched when ``.downloads`` is not a real folder inside ``root``.

    Args:
        root: The datasets' root.
        kept_s: How long a folder nothing touched is kept for a resume.

    Returns:
        The folders whose files were removed.
    """
    top = root / RESUME_DIR
    removed: list[Path] = []
    try:
        check_contained(top / "entry", root, action="clean up")  # .downloads and every folder above it
    except UnsafePathError:
        return removed
    if not top.is_dir():
        return removed
    now = time.time()
    for dirpath, _, filenames in os.walk(top, topdown=False):
        folder = Path(dirpath)
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a running download holds it
            os.close(fd)
            continue
        try:
            if filenames and now - _newest_mtime(folder, filenames) > kept_s:
                for name in filenames:
                    with contextlib.suppress(OSError):
                        os.unlink(folder / name)
                removed.append(folder)
            if folder != top:
                with contextlib.suppress(OSError):  # not empty: a folder of a running or recent download
                    folder.rmdir()
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        top.rmdir()
    return removed


def _newest_mtime(folder: Path, names: list[str]) -> float:
    """The latest modification time of ``folder`` and its files ``names`` (a file gone meanwhile: now)."""
    try:
        newest = os.stat(folder, follow_symlinks=False).st_mtime
        for name in names:
            newest = max(newest, os.stat(folder / name, follow_symlinks=False).st_mtime)
    except OSError:
        return time.time()
    return newest
