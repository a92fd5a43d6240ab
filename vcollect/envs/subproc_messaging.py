"""The parent's messaging with its env worker processes, under SubprocVectorEnv's API.

WorkerMessaging sends each worker its commands, waits for the replies while checking that the worker is
alive, finishes the fast commands (shared rows and semaphores, no pipe) an interrupted call left unread,
and turns a dead worker into EnvWorkerError. vcollect.envs.subproc_transport describes the protocol.
"""

from __future__ import annotations

import collections
import pickle
import select
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from vcollect.envs.base import BaseVectorEnv, _Failure, timeout_message
from vcollect.envs.subproc_transport import (
    CTRL_REPLY,
    LIVENESS_POLL_S,
    REPLY_MESSAGE,
    STEP,
    Channel,
    Part,
    SharedRows,
    command_parts,
    spin_acquire,
    spin_poll,
)
from vcollect.envs.subproc_worker import CLOSE_JOIN_S, end_process
from vcollect.errors import EnvWorkerError

__all__ = ["WorkerMessaging"]

# what the parent still owes to read from a worker after an interrupted fast command
_OWE_NOTHING, _OWE_DONE, _OWE_MESSAGE = 0, 1, 2


@dataclass
class _Command:
    """An outstanding command of one worker; `live` is False for env ids whose result was discarded."""

    op: int
    ids: np.ndarray
    live: np.ndarray


class WorkerMessaging(BaseVectorEnv):
    """SubprocVectorEnv's half that talks to the workers; SubprocVectorEnv sets these up and closes."""

    num_workers: int
    _procs: list[Any]
    _channels: list[Channel]
    _pollers: list[select.poll]
    _command_sems: list[Any]
    _done_sems: list[Any]
    _owed: list[int]
    _rows: SharedRows | None
    _group_ids: list[np.ndarray]
    _starts: np.ndarray
    _worker_of: np.ndarray
    _commands: list[collections.deque[_Command]]
    _spin_s: float
    # the end of the synchronous call under way (time.monotonic()), None when it may wait forever
    _deadline: float | None = None
    _call_what = "step or reset"

    def close(self) -> None:  # SubprocVectorEnv's: stop the workers, release shared memory
        raise NotImplementedError

    def _settle_owed(self) -> None:
        """Finish the fast commands whose answers an interrupted call left unread (and drop the answers):
        the workers may still be reading the shared rows the next command is about to write."""
        for w in range(self.num_workers):
            if self._owed[w] and not self.closed:
                self._settle(w)

    def _settle(self, w: int) -> bytes | None:
        """Wait for worker w's answer to its fast command: its pickled reply, or None if it had nothing
        to say. What is still owed is tracked (self._owed), so an interrupted wait is finished later."""
        if self._owed[w] == _OWE_DONE:
            self._await_done(w)
            if not self._rows.control[w, CTRL_REPLY] & REPLY_MESSAGE:  # type: ignore[union-attr]
                self._owed[w] = _OWE_NOTHING
                return None
            self._owed[w] = _OWE_MESSAGE
        reply = self._recv_from(w, self._group_ids[w], spin=False)
        self._owed[w] = _OWE_NOTHING
        return reply

    def _await_done(self, w: int) -> None:
        """Take worker w's done semaphore, checking every LIVENESS_POLL_S that the worker is alive."""
        done = self._done_sems[w]
        if spin_acquire(done, self._spin_s):
            return
        while not done.acquire(True, self._poll_s(w)):
            if not self._procs[w].is_alive():
                if done.acquire(False):  # answered, then died: the next command finds out
                    return
                self._worker_died(w, self._group_ids[w])

    def _parts(self, op: int, ids: np.ndarray, payload: Any) -> list[Part]:
        """The command for each worker holding some of ids (see command_parts)."""
        return command_parts(op, ids, payload, self._worker_of, self._starts)

    def _roundtrip(
        self,
        parts: list[Part],
        store_infos: bool = True,
        reset_infos: dict[int, dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """Send each worker its command, then collect the replies in order: rows land in shared memory,
        infos are returned in parts order (and stored per env id if store_infos), failures recorded, the
        infos of step-and-reset restarts put in ``reset_infos`` by env id."""
        infos: list[dict[str, Any]] = []
        owed = [w for w, _, _ in parts]
        try:
            for w, message, _ in parts:
                self._send_to(w, message)
            for w, _, group in parts:
                reply = self._recv_from(w, group)
                owed.pop(0)
                infos += self._unpack(reply, reset_infos) if reply else [{} for _ in range(group.size)]
        except BaseException:
            # interrupted: the replies still owed are drained (and ignored) by later waits
            if not self.closed:
                for w in owed:
                    self._commands[w].append(_Command(STEP, np.zeros(0, np.int64), np.zeros(0, bool)))
            raise
        if store_infos:
            for env_id, info in zip(np.concatenate([g for _, _, g in parts]).tolist(), infos):
                self._infos[env_id] = info
        return infos

    def _unpack(self, reply: bytes, reset_infos: dict[int, dict[str, Any]] | None) -> list[dict[str, Any]]:
        infos, failures, restart_infos = pickle.loads(reply)
        for env_id, kind, message, trace in failures:
            self._failures.append(_Failure(env_id, kind, message, trace))
        if reset_infos is not None:
            reset_infos.update(restart_infos)
        return infos

    # -- messaging -------------------------------------------------------------------------------
    def _send_to(self, w: int, message: bytes) -> None:
        """Send worker w a command and announce it (after reading what an interrupted fast command owes)."""
        if self._owed[w]:
            self._settle(w)
        try:
            self._channels[w].send(message)
        except OSError:
            self._worker_died(w, None)
        self._command_sems[w].release()

    def _recv_from(self, w: int, ids: np.ndarray | None, spin: bool = True) -> bytes:
        """The next message of worker w, checking it is alive while waiting (its dead pipe reads EOF)."""
        channel = self._channels[w]
        try:
            if spin and self._spin_s > 0 and not channel.has_message():
                spin_poll(self._pollers[w], self._spin_s)
            while not channel.has_message():
                if self._pollers[w].poll(self._poll_s(w) * 1000):
                    channel.fill()
                elif not self._procs[w].is_alive():
                    raise EOFError("worker exited")
            return channel.pop()
        except (EOFError, OSError):
            self._worker_died(w, ids)

    def _poll_s(self, w: int) -> float:
        """How long to wait for worker w before checking on it again: LIVENESS_POLL_S, or less near the
        deadline of the synchronous call under way; past it, `_timed_out` raises."""
        if self._deadline is None:
            return LIVENESS_POLL_S
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            rows = self._rows
            running = [] if rows is None else [int(c) for c in rows.current if c >= 0]
            self._timed_out(running or self._group_ids[w].tolist(), self._call_what)
        return min(remaining, LIVENESS_POLL_S)

    def _timed_out(self, running: list[int], what: str) -> NoReturn:
        """A synchronous call ran past self.timeout: stop the workers of the env ids still running (at once:
        they are not listening), close this vector env and raise EnvWorkerError naming those env ids."""
        hung = sorted({int(self._worker_of[i]) for i in running})
        pids = ", ".join(str(self._procs[w].pid) for w in hung)
        for w in hung:
            end_process(self._procs[w])
        if not self.closed:
            self.close()
        message = timeout_message(self.timeout, running, what, f" in worker processes with pids {pids}")
        raise EnvWorkerError(running[0] if running else None, message)

    def _worker_died(self, w: int, ids: np.ndarray | None) -> NoReturn:
        """Raise EnvWorkerError for a dead worker, naming the env it was calling; closes this vector env."""
        proc = self._procs[w]
        proc.join(CLOSE_JOIN_S)
        current = int(self._rows.current[w]) if self._rows is not None else -1
        env_id: int | None = current if current >= 0 else None
        if env_id is None and ids is not None and ids.size:
            env_id = int(ids[0])
        group = self._group_ids[w].tolist()
        message = (
            f"worker process {w} (pid {proc.pid}, env ids {group[0]}..{group[-1]}) died with exit code "
            f"{proc.exitcode}; the vector env has been closed"
        )
        if not self.closed:
            self.close()
        raise EnvWorkerError(env_id, message)
