"""Exit commits: what a never-closed EpisodeStore or Collector holds still reaches the disk.

A collector queues finished episodes for its store, and a store keeps episodes pending until it commits a
shard; ``close()`` commits both. For a program that never closes them, each one registers here when it is
made (by weak reference: the registry never keeps an object alive and makes no reference cycle), and:

- at interpreter exit one ``atexit`` handler closes the ones still alive, collectors first (so the
  episodes they queued reach their stores), then stores;
- an object dropped while the program runs (garbage-collected) closes itself from its ``__del__``.

Either way the object's own ``close_unclosed(why)`` does the work: it commits (waiting at most
:data:`EXIT_WAIT_S` for a commit in flight) and, where that fails, warns with an
:class:`~vcollect.errors.EpisodesLostWarning` counting the episodes and steps lost and saying why. An
object made in another process (a forked child's copy of its parent's) is left alone: its parent commits.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import warnings
import weakref
from enum import IntEnum
from typing import Protocol

from vcollect.errors import EpisodesLostWarning

__all__ = ["EXIT_WAIT_S", "ClosesUnclosed", "ExitStage", "close_all_unclosed", "register_exit_close"]

EXIT_WAIT_S = 60.0
"""Seconds a store closed at exit or when dropped waits for a background commit in flight (then warns)."""


class ExitStage(IntEnum):
    """The order in which objects still open at exit are closed (lowest first)."""

    COLLECTOR = 0
    """Collectors: they hand their queued episodes to their stores."""
    STORE = 1
    """Stores: they commit what is pending."""


class ClosesUnclosed(Protocol):
    """An object that commits what it holds when nobody closed it."""

    def close_unclosed(self, why: str) -> None:
        """Commit what is pending and close; warn (EpisodesLostWarning) about what could not be committed.

        Args:
            why: How the object was left, for the warning ("alive at interpreter exit", ...).
        """
        ...


_lock = threading.Lock()
_order = itertools.count()
#: key -> (stage, weak reference, pid of the process that registered it)
_live: dict[int, tuple[ExitStage, weakref.ref[ClosesUnclosed], int]] = {}


def register_exit_close(obj: ClosesUnclosed, stage: ExitStage) -> None:
    """Close ``obj`` (``obj.close_unclosed``) at interpreter exit if it is still alive then.

    Args:
        obj: The object; held by weak reference only.
        stage: When it is closed relative to the others (collectors before stores).
    """
    key = next(_order)

    def forget(_: object, key: int = key) -> None:
        _live.pop(key, None)

    with _lock:
        _live[key] = (stage, weakref.ref(obj, forget), os.getpid())
        # (re)registered last, after the modules the objects use (h5py, multiprocessing) registered theirs:
        # atexit runs the last registered first, so this runs while they still work
        atexit.unregister(close_all_unclosed)
        atexit.register(close_all_unclosed)


def close_all_unclosed(why: str = "alive at interpreter exit") -> None:
    """Close every registered object still alive and not closed: collectors first, then stores.

    Called at interpreter exit; an error in one object is reported as a warning and the others still close.

    Args:
        why: How the objects were left, for their warnings.
    """
    with _lock:
        entries = sorted(_live.items(), key=lambda item: (item[1][0], item[0]))
    pid = os.getpid()
    for key, (_, ref, owner) in entries:
        obj = ref()
        _live.pop(key, None)
        if obj is None or owner != pid:
            continue
        try:
            obj.close_unclosed(why)
        except Exception as exc:  # one object's failure must not keep the others from closing
            warnings.warn(f"{type(obj).__name__} {why} could not be closed: {type(exc).__name__}: {exc}",
                          EpisodesLostWarning, stacklevel=2)
