"""Committing a pending shard: in the caller's thread, or in one background thread off the collect loop.

A commit builds the shard file in memory (h5py encodes and compresses the columns), writes and fsyncs it
under a temporary name, renames it and appends its manifest line; for frames that is tens of
milliseconds a shard, paid inside ``collect`` when done inline. ``ShardCommits(background=True)`` runs
commits in one thread instead, in the order they were handed over, at most ``max_in_flight`` at a time
(the next hand-over waits for the oldest: back-pressure, so memory stays bounded when the disk is
slower than the envs). A failed commit keeps its episodes (the writer retries them on the next
``flush``) and its error is raised by the writer's next call. The file protocol is the same either way,
so a SIGKILL never leaves a partial shard; in the background it may lose up to ``max_in_flight``
shards' worth of episodes that were handed over but not yet committed. Once the interpreter is exiting
(its threads are gone and no new one starts) a hand-over is committed inline, after the ones in flight.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vcollect.durable import fsync_dir
from vcollect.errors import DatasetError, DiskFullError
from vcollect.store.layout.dataset_dir import NO_SPACE, HeldDir, Identity, check_identity
from vcollect.store.layout.manifest import ShardFactsRecorder, record_commit
from vcollect.store.write.compression import Compression
from vcollect.store.write.shard import PendingShard, write_shard

COMMIT_TIMEOUT = 600.0
"""Seconds a writer waits for one background commit before giving up with DatasetError (a hung disk)."""


@dataclass
class ShardJob:
    """One shard to commit: its episodes and everything its file needs, fixed when it was handed over."""

    final: Path
    pending: PendingShard
    rows: dict[str, dict[str, str]]
    attrs: dict[str, Any]
    compression: Compression
    dataset_path: Path
    dataset_id: str
    root: Path
    identity: Identity | None
    writer: str
    held: HeldDir | None = None
    """The writer's open descriptor of its dataset directory: the shard and its manifest line are written
    through it (None: by path)."""


#: What a DiskFullError tells Python callers to do (the CLI says what a command can do instead).
FLUSH_AGAIN_HINT = "free space and call flush() again"


def commit_shard(job: ShardJob) -> None:
    """Write, fsync and record one shard (in the caller's thread, or the background commit thread); a
    DiskFullError or DatasetError that says the episodes are kept when it cannot.

    With ``job.held`` the shard's file and manifest line go through the writer's descriptor of its dataset
    directory, so they land in the dataset the writer opened even when an overwrite swaps another one in
    at its path meanwhile; that is then a DatasetError saying the episodes went with the old dataset.
    """
    pending, final = job.pending, job.final
    check_identity(job.dataset_path, job.dataset_id, job.root, job.identity, pending.episodes)
    dir_fd = None if job.held is None else job.held.fd
    where = final if dir_fd is None else final.relative_to(job.dataset_path)
    facts = ShardFactsRecorder()
    try:
        digest = write_shard(where, pending.columns(job.rows), job.attrs, job.compression, dir_fd, facts)
    except Exception as exc:
        if job.held is not None and job.held.replaced():  # the failure may be its deleted directory's
            check_identity(job.dataset_path, job.dataset_id, job.root, job.identity, pending.episodes)
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            raise DiskFullError(
                f"no space left on device while committing shard {str(final)!r} of dataset "
                f"{job.dataset_id!r} ({exc}); committed shards are intact, {pending.episodes} pending "
                f"episodes are kept in memory; {FLUSH_AGAIN_HINT}"
            ) from exc
        raise DatasetError(
            f"could not commit shard {str(final)!r} of dataset {job.dataset_id!r}: {exc}. "
            f"Committed shards are intact; the {pending.episodes} pending episodes are kept "
            "in memory and flush() can be retried"
        ) from exc
    # manifest entry (store/layout/manifest.py); never raises
    record_commit(job.dataset_path, where, job.writer, digest, dir_fd, facts.facts(job.attrs))
    fsync_dir(where.parent, dir_fd)
    if job.held is not None and job.held.replaced():
        raise DatasetError(
            f"dataset {job.dataset_id!r} at {str(job.dataset_path)!r} was replaced since this writer opened it: "
            f"shard {final.name!r} ({pending.episodes} episodes) was committed to the old dataset and went "
            "with it, not into the dataset now at that place (open the dataset again with a new writer to "
            "store new episodes)"
        )


class ShardCommits:
    """Runs ``commit(job)`` for each job handed over, inline or in one background thread (see module doc)."""

    def __init__(self, commit: Callable[[ShardJob], None], *, background: bool = False, max_in_flight: int = 2,
                 timeout: float = COMMIT_TIMEOUT) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._commit = commit
        self.background = background
        self.max_in_flight = max_in_flight
        self.timeout = timeout
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._in_flight: collections.deque[tuple[ShardJob, concurrent.futures.Future[None]]] = collections.deque()
        self.failed: list[ShardJob] = []
        """Jobs whose commit failed, oldest first: their episodes are kept for the next retry."""
        self._error: Exception | None = None

    @property
    def in_flight(self) -> list[ShardJob]:
        """Jobs handed over and not yet settled, oldest first."""
        return [job for job, _ in self._in_flight]

    def submit(self, job: ShardJob) -> list[ShardJob]:
        """Commit ``job`` (inline, or queued behind the others); return the jobs that finished meanwhile, in
        order. A failure is kept for :meth:`pop_error` (inline ones too), its job in ``failed``."""
        if not self.background:
            try:
                self._commit(job)
            except Exception as exc:
                self._fail(job, exc)
                return []
            return [job]
        done = self.settle(block=False)
        try:
            while len(self._in_flight) >= self.max_in_flight:  # back-pressure: wait for the oldest
                done += self._settle_oldest()
        except DatasetError:
            self.failed.append(job)  # kept for the next retry, as a failed commit's
            raise
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vcollect-commit")
        try:
            future = self._executor.submit(self._commit, job)
        except RuntimeError:  # the interpreter is exiting: no thread takes work any more, commit it here, in order
            try:
                done += self.settle(block=True)
                self._commit(job)
            except Exception as exc:
                self._fail(job, exc)
                return done
            return [*done, job]
        self._in_flight.append((job, future))
        return done

    def settle(self, block: bool) -> list[ShardJob]:
        """Collect finished commits (all of them, waiting, when ``block``): return those that succeeded, in
        order; a failed one moves to ``failed`` and its error waits for :meth:`pop_error`."""
        done: list[ShardJob] = []
        while self._in_flight and (block or self._in_flight[0][1].done()):
            done += self._settle_oldest()
        return done

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the commits in flight to finish (they are settled later)."""
        futures = [future for _, future in list(self._in_flight)]
        if futures:
            concurrent.futures.wait(futures, timeout=timeout)

    def pop_error(self) -> Exception | None:
        """The first error of a commit that failed since the last call (None if none), cleared."""
        error, self._error = self._error, None
        return error

    def _settle_oldest(self) -> list[ShardJob]:
        job, future = self._in_flight[0]
        try:
            future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError as exc:
            raise DatasetError(
                f"a background shard commit ({job.final.name}) has not finished after {self.timeout:.0f} s; "
                "the disk or filesystem may be hung. Its episodes are still in memory."
            ) from exc
        except Exception as exc:
            self._in_flight.popleft()
            self._fail(job, exc)
            return []
        self._in_flight.popleft()
        return [job]

    def _fail(self, job: ShardJob, exc: Exception) -> None:
        self.failed.append(job)
        if self._error is None:
            self._error = exc

    def close(self) -> None:
        """Stop the thread (after the commits in flight finish); no error is raised here."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def forget(self) -> None:
        """Drop every job and the thread without waiting: for a forked child, whose parent commits them."""
        self._in_flight.clear()
        self.failed.clear()
        self._error = None
        self._executor = None
