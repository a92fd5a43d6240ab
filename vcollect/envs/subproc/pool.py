"""WorkerPool: SubprocVectorEnv's worker processes as one object it holds.

A pool starts the workers (vcollect.envs.subproc.launch), maps the shared rows once they have reported
their spaces, sends each worker its commands and waits for the replies while checking that the worker
is alive and that the synchronous call under way is within its deadline. It keeps each worker's queue
of outstanding commands, so async sends and replies stay matched, and finishes the fast commands (shared
rows and semaphores, no pipe) that an interrupted call left unread. A dead worker, or a call past its
deadline, closes the pool's owner (``on_fatal``) and raises EnvWorkerError.
vcollect.envs.subproc.transport describes the protocol.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import mmap
import os
import pickle
import select
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from vcollect.envs.base import EnvFailure, timeout_message
from vcollect.envs.layout import FixedLayout
from vcollect.envs.subproc.launch import (
    CLOSE_JOIN_S,
    NO_MAIN_GUARD_EXIT,
    WorkerHandle,
    end_process,
    factories_need_main,
    mp_context,
    start_worker,
    stop_workers,
)
from vcollect.envs.subproc.transport import (
    CTRL_FAST,
    CTRL_REPLY,
    LIVENESS_POLL_S,
    REPLY_MESSAGE,
    STEP,
    Channel,
    Part,
    SharedRows,
    Spinner,
    command_parts,
    poll_ready,
    shared_file,
)
from vcollect.errors import EnvWorkerError

__all__ = ["PendingCommand", "WorkerPool"]

# what the pool still owes to read from a worker after an interrupted fast command
_OWE_NOTHING, _OWE_DONE, _OWE_MESSAGE = 0, 1, 2


@dataclass(slots=True)
class PendingCommand:
    """A command sent to a worker whose reply has not been read yet.

    Attributes:
        op: The command code (vcollect.envs.subproc.transport).
        ids: The env ids it covers, in the order of the reply's entries.
        live: Per env id, False once the caller discarded that env's result.
    """

    op: int
    ids: np.ndarray
    live: np.ndarray


class WorkerPool:
    """Worker processes holding contiguous groups of env ids, their pipes, semaphores and shared rows.

    Args:
        env_fns: One env factory per env id (sent with cloudpickle).
        num_workers: Processes to start, each holding a contiguous group of env ids.
        context: A multiprocessing start method name or context (None: forkserver where available).
        spin_s: The longest poll of either side for the other's answer before sleeping (see Spinner).
        import_main: Whether the workers import the program's main module (None: only when the env
            factories need it; see SubprocVectorEnv).
        timeout: Seconds a synchronous call (between ``begin`` and ``finish``) may wait; None: forever.
        on_fatal: Called when a worker died or a call timed out, before EnvWorkerError is raised: the owner
            closes itself (and so this pool). None: the pool closes itself.
        replaceable: Whether workers may be replaced (``replace``): the shared file stays open for new ones.

    Raises:
        EnvWorkerError: A worker could not build its envs (or died doing so).
        ValueError: The envs do not all share their spaces.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int,
        *,
        context: str | BaseContext | None,
        spin_s: float,
        import_main: bool | None,
        timeout: float | None,
        on_fatal: Callable[[], None] | None = None,
        replaceable: bool = False,
    ) -> None:
        num_envs = len(env_fns)
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.spin_s = spin_s
        self.timeout = timeout
        self.closed = False
        self._on_fatal = self.close if on_fatal is None else on_fatal
        self.procs: list[Any] = []
        self.pipes: list[Any] = []  # the parent's Connection ends, kept to close them
        self.channels: list[Channel] = []
        self.pollers: list[select.poll] = []
        self.command_sems: list[Any] = []  # posted once per command (what the worker waits on)
        self.done_sems: list[Any] = []  # posted by the worker when it has answered a fast command
        self._answered: list[Callable[[], bool]] = []  # per worker: take its done semaphore if posted
        self._replied: list[Callable[[], bool]] = []  # per worker: whether its reply pipe is readable
        # how long to poll for each worker's answer, and for any reply of an async wait (see Spinner)
        self._spinners = [Spinner(spin_s) for _ in range(num_workers)]
        self._any_spinner = Spinner(spin_s)
        self.rows: SharedRows | None = None
        self._buffer: mmap.mmap | None = None
        groups = [g.tolist() for g in np.array_split(np.arange(num_envs), num_workers)]
        self.group_ids = [np.asarray(g, np.int64) for g in groups]
        self.group_sizes = [len(g) for g in groups]
        self.starts = np.array([g[0] for g in groups], np.int64)
        self.worker_of = np.repeat(np.arange(num_workers), self.group_sizes)
        self.commands: list[collections.deque[PendingCommand]] = [collections.deque() for _ in groups]
        self.owed = [_OWE_NOTHING] * num_workers  # answers of interrupted fast commands, read before others
        # the end of the synchronous call under way (time.monotonic()), None when it may wait forever
        self.deadline: float | None = None
        self._call_what = "step or reset"
        self.lost: dict[int, str] = {}
        """Workers found dead during a synchronous call that may lose them (``lose_budget``): why, by worker."""
        self.lose_budget = 0
        """How many workers a synchronous call may lose (not raise for) while ``catch_deaths`` is set."""
        self.catch_deaths = False
        self.death_note = ""
        """Added to the message of a death raised while ``catch_deaths`` is set (the restart budget is spent)."""

        ctx = mp_context(context)
        needs_main, specs = factories_need_main(env_fns)
        self.imports_main = needs_main if import_main is None else import_main
        self._env_fns = list(env_fns)
        self._ctx = ctx
        self._specs = specs
        self._size = 0
        self._shared_fd: int | None = None
        shared_fd = shared_file()
        try:
            for w in range(num_workers):
                self._install(w, self._start(w, shared_fd))
            reports = [self._handshake(w) for w in range(num_workers)]
            obs_space, act_space, spec, metadata = reports[0]
            for w, (o, a, _, _) in enumerate(reports[1:], start=1):
                if o != obs_space or a != act_space:
                    raise ValueError(
                        f"env {groups[w][0]} has spaces {o}, {a}; env 0 has {obs_space}, {act_space}: "
                        "all envs must share their spaces"
                    )
            self.observation_space: gym.Space = obs_space
            self.action_space: gym.Space = act_space
            self.env_spec = spec
            self.metadata: dict[str, Any] = metadata
            obs_layout, act_layout = FixedLayout(obs_space), FixedLayout(act_space)
            size = SharedRows.size(obs_layout, act_layout, num_envs, num_workers)
            os.ftruncate(shared_fd, size)
            self._buffer = mmap.mmap(shared_fd, size)
            self._size = size
            for w in range(num_workers):  # read before the worker waits for commands: no semaphore post
                self.channels[w].send(pickle.dumps(size))
        except BaseException:
            os.close(shared_fd)
            self.close()
            raise
        if replaceable:
            self._shared_fd = shared_fd  # for the workers that replace failed ones
        else:
            os.close(shared_fd)
        self.rows = SharedRows(self._buffer, obs_layout, act_layout, num_envs, num_workers)
        self.rows.current[:] = -1

    def _start(self, w: int, shared_fd: int) -> WorkerHandle:
        """Start worker w (its env ids' factories, the shared file)."""
        group = self.group_ids[w].tolist()
        return start_worker(
            self._ctx, w, group, [self._env_fns[i] for i in group], shared_fd, self.num_envs, self.num_workers,
            self.spin_s, import_main=self.imports_main, specs=self._specs,
        )  # fmt: skip

    def _install(self, w: int, worker: WorkerHandle) -> None:
        """Make ``worker`` worker w (appended at start, put in place of a replaced one later)."""
        parts: list[list[Any]] = [
            self.command_sems, self.done_sems, self.channels, self.pollers, self.procs, self._answered, self._replied,
        ]  # fmt: skip
        values = [
            worker.commands, worker.done, worker.channel, worker.poller, worker.proc,
            functools.partial(worker.done.acquire, False), poll_ready(worker.poller),
        ]  # fmt: skip
        for part, value in zip(parts, values):
            if w < len(part):
                part[w] = value
            else:
                part.append(value)
        self.pipes[2 * w : 2 * w + 2] = worker.pipes

    def replace(self, w: int) -> None:
        """Stop worker w (dead, or alive after one of its envs raised) and start a new one for its env ids,
        with new envs (built, not reset); its outstanding commands are forgotten.

        Raises:
            EnvWorkerError: the new worker could not build its envs, or they have other spaces.
        """
        assert self._shared_fd is not None and self.rows is not None, "a pool made without replaceable=True"
        stop_workers([self.procs[w]], [self.channels[w]], [self.command_sems[w]])
        for pipe in self.pipes[2 * w : 2 * w + 2]:
            pipe.close()
        self.commands[w].clear()
        self.owed[w] = _OWE_NOTHING
        self.rows.control[w] = 0
        self.rows.current[w] = -1
        self.lost.pop(w, None)
        deadline, self.deadline = self.deadline, None  # starting a worker is not the call's env step
        catching, self.catch_deaths = self.catch_deaths, False  # a new worker that dies at once is fatal
        try:
            self._install(w, self._start(w, self._shared_fd))
            obs_space, act_space, _, _ = self._handshake(w)
            if obs_space != self.observation_space or act_space != self.action_space:
                raise EnvWorkerError(
                    int(self.group_ids[w][0]),
                    f"the worker started in place of worker process {w} built envs with spaces {obs_space}, "
                    f"{act_space}, not {self.observation_space}, {self.action_space}",
                )
            self.channels[w].send(pickle.dumps(self._size))
        except BaseException:
            self._fatal()
            raise
        finally:
            self.deadline = deadline
            self.catch_deaths = catching

    def _handshake(self, w: int) -> tuple[gym.Space, gym.Space, Any, dict]:
        """Wait for worker w to report its spaces (or the error that stopped it)."""
        try:
            message = pickle.loads(self.recv(w, None, spin=False))
        except EnvWorkerError as exc:
            if self.procs[w].exitcode == NO_MAIN_GUARD_EXIT:
                main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main module"
                raise EnvWorkerError(
                    int(self.group_ids[w][0]),
                    f"worker process {w} could not start: it imports {main}, which has no "
                    '`if __name__ == "__main__":` guard and so builds the envs again; put the code that '
                    "starts collecting under that guard",
                ) from None
            raise EnvWorkerError(
                int(self.group_ids[w][0]),
                f"worker process {w} died while creating its envs (exit code {self.procs[w].exitcode})",
            ) from exc
        if message[0] == "error":
            _, env_id, text, trace, kind = message
            raise EnvFailure(env_id, kind, text, trace).to_exception()
        _, obs_space, act_space, spec, metadata = message
        return obs_space, act_space, spec, metadata

    # -- synchronous calls ----------------------------------------------------------------------
    def begin(self, what: str) -> None:
        """Start the deadline of a synchronous call (when there is a timeout); ``what`` names it in the
        timeout's error."""
        if self.timeout is not None:
            self.deadline = time.monotonic() + self.timeout
            self._call_what = what

    def finish(self) -> None:
        """End the synchronous call under way: later waits have no deadline."""
        self.deadline = None

    def parts(self, op: int, ids: np.ndarray, payload: Any) -> list[Part]:
        """The command for each worker holding some of ids (see command_parts)."""
        return command_parts(op, ids, payload, self.worker_of, self.starts)

    def roundtrip(self, parts: list[Part]) -> list[bytes]:
        """Send each worker its command, then read the replies, in parts order. If interrupted, the
        replies still owed are read (and dropped) by later waits."""
        replies: list[bytes] = []
        owed = [w for w, _, _ in parts]
        try:
            for w, message, _ in parts:
                self.send(w, message)
            for w, _, group in parts:
                replies.append(self.recv(w, group))
                owed.pop(0)
        except BaseException:
            self.expect_unread(owed, STEP)
            raise
        return replies

    def step_reset_all(self) -> tuple[list[bytes | None], int]:
        """The fast command (a step-and-reset of every env, its plan already in the shared rows): each
        worker's pickled reply (None where it had nothing to say) and the REPLY_* bits of all replies."""
        self.post_step_reset_all()
        return self.settle_step_reset_all()

    def post_step_reset_all(self) -> None:
        """Announce the fast command to every worker without waiting; ``settle_step_reset_all`` takes the
        answers (until then the shared rows are the workers': nothing may write them)."""
        rows = self.rows
        assert rows is not None
        control = rows.control
        owed = self.owed
        for w, sem in enumerate(self.command_sems):
            control[w, CTRL_FAST] = 1
            owed[w] = _OWE_DONE
            sem.release()

    def settle_step_reset_all(self) -> tuple[list[bytes | None], int]:
        """Wait for every worker's answer to the fast command ``post_step_reset_all`` announced: each worker's
        pickled reply (None where it had nothing to say) and the REPLY_* bits of all replies."""
        control = self.rows.control  # type: ignore[union-attr]
        replies = []
        flags = 0
        for w in range(self.num_workers):
            replies.append(self.settle(w))
            flags |= int(control[w, CTRL_REPLY])
        return replies, flags

    def settle_owed(self) -> None:
        """Finish the fast commands whose answers an interrupted call left unread (and drop the answers):
        the workers may still be reading the shared rows the next command is about to write."""
        for w in range(self.num_workers):
            if self.owed[w] and not self.closed:
                self.settle(w)

    def settle(self, w: int) -> bytes | None:
        """Wait for worker w's answer to its fast command: its pickled reply, or None if it had nothing
        to say. What is still owed is tracked (``owed``), so an interrupted wait is finished later."""
        if self.owed[w] == _OWE_DONE:
            self._await_done(w)
            if w in self.lost or not self.rows.control[w, CTRL_REPLY] & REPLY_MESSAGE:  # type: ignore[union-attr]
                self.owed[w] = _OWE_NOTHING
                return None
            self.owed[w] = _OWE_MESSAGE
        reply = self.recv(w, self.group_ids[w], spin=False)
        self.owed[w] = _OWE_NOTHING
        return reply

    def _await_done(self, w: int) -> None:
        """Take worker w's done semaphore, checking every LIVENESS_POLL_S that the worker is alive."""
        spinner = self._spinners[w]
        if spinner.wait_for(self._answered[w]):
            return
        done = self.done_sems[w]
        while not done.acquire(True, self._poll_s(w)):
            if not self.procs[w].is_alive():
                if done.acquire(False):  # answered, then died: the next command finds out
                    break
                self._dead(w, self.group_ids[w])
                return
        spinner.slept()

    def send(self, w: int, message: bytes) -> None:
        """Send worker w a command and announce it (after reading what an interrupted fast command owes)."""
        if self.owed[w]:
            self.settle(w)
        if w in self.lost:
            return
        try:
            self.channels[w].send(message)
        except OSError:
            self._dead(w, None)
            return
        self.command_sems[w].release()

    def recv(self, w: int, ids: np.ndarray | None, spin: bool = True) -> bytes:
        """The next message of worker w, checking it is alive while waiting (its dead pipe reads EOF);
        ``ids``: the env ids it is answering for (to name one if it died). A worker lost in this call
        (``lost``) answers an empty message."""
        if w in self.lost:
            return b""
        channel = self.channels[w]
        try:
            slept = False
            if spin and not channel.has_message():
                if self._spinners[w].wait_for(self._replied[w]):
                    channel.fill()
                else:
                    slept = True
            while not channel.has_message():
                if self.pollers[w].poll(self._poll_s(w) * 1000):
                    channel.fill()
                elif not self.procs[w].is_alive():
                    raise EOFError("worker exited")
            if slept:
                self._spinners[w].slept()
            return channel.pop()
        except (EOFError, OSError):
            self._dead(w, ids)
            return b""

    def _poll_s(self, w: int) -> float:
        """How long to wait for worker w before checking on it again: LIVENESS_POLL_S, or less near the
        deadline of the synchronous call under way; past it, `timed_out` raises."""
        if self.deadline is None:
            return LIVENESS_POLL_S
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            rows = self.rows
            running = [] if rows is None else [int(c) for c in rows.current if c >= 0]
            self.timed_out(running or self.group_ids[w].tolist(), self._call_what)
        return min(remaining, LIVENESS_POLL_S)

    def timed_out(self, running: list[int], what: str) -> NoReturn:
        """A synchronous call ran past ``timeout``: stop the workers of the env ids still running (at once:
        they are not listening), close the owner and raise EnvWorkerError naming those env ids."""
        hung = sorted({int(self.worker_of[i]) for i in running})
        pids = ", ".join(str(self.procs[w].pid) for w in hung)
        for w in hung:
            end_process(self.procs[w])
        self._fatal()
        message = timeout_message(self.timeout, running, what, f" in worker processes with pids {pids}")
        raise EnvWorkerError(running[0] if running else None, message)

    def _dead(self, w: int, ids: np.ndarray | None) -> None:
        """Worker w died: note it in ``lost`` while the synchronous call under way may lose it (the caller
        goes on as if it had answered nothing), else raise as ``worker_died``."""
        if w in self.lost:
            return
        if not (self.catch_deaths and len(self.lost) < self.lose_budget):
            self.worker_died(w, ids, self.death_note if self.catch_deaths else "")
        self.lost[w] = self._death_text(w)

    def _death_text(self, w: int) -> str:
        """How worker w died (waits for its exit code)."""
        proc = self.procs[w]
        proc.join(CLOSE_JOIN_S)
        group = self.group_ids[w].tolist()
        return f"worker process {w} (pid {proc.pid}, env ids {group[0]}..{group[-1]}) died with exit code {proc.exitcode}"

    def worker_died(self, w: int, ids: np.ndarray | None, note: str = "") -> NoReturn:
        """Raise EnvWorkerError for a dead worker, naming the env it was calling; closes the owner. ``note``
        is added to the message."""
        current = int(self.rows.current[w]) if self.rows is not None else -1
        env_id: int | None = current if current >= 0 else None
        if env_id is None and ids is not None and ids.size:
            env_id = int(ids[0])
        message = f"{self._death_text(w)}; the vector env has been closed{note}"
        self._fatal()
        raise EnvWorkerError(env_id, message)

    def _fatal(self) -> None:
        if not self.closed:
            self._on_fatal()
        if not self.closed:  # an owner that did not close this pool
            self.close()

    # -- async commands -------------------------------------------------------------------------
    def dispatch(self, parts: list[Part], op: int) -> None:
        """Send each worker its command without waiting; its reply goes to ``wait``'s handler."""
        for w, message, group in parts:
            self.commands[w].append(PendingCommand(op, group, np.ones(group.size, bool)))
            self.send(w, message)

    def expect_unread(self, workers: Sequence[int], op: int) -> None:
        """Note a reply owed by each of ``workers`` that nobody waits for (an interrupted call's): later
        waits read it and hand it to their handler as a command covering no env ids."""
        if not self.closed:
            for w in workers:
                self.commands[w].append(PendingCommand(op, np.zeros(0, np.int64), np.zeros(0, bool)))

    def discard(self, ids: np.ndarray) -> None:
        """Forget the results of ids in the outstanding commands (their replies still come, unused)."""
        for queue in self.commands:
            for command in queue:
                command.live &= ~np.isin(command.ids, ids)

    def wait(
        self, timeout: float | None, on_reply: Callable[[int, PendingCommand, bytes], None], *, lose: bool = False
    ) -> None:
        """Hand the replies that arrive within ``timeout`` seconds (None: at least one, however long that
        takes) to ``on_reply``, each with its worker and that worker's oldest outstanding command; a worker that died
        with commands outstanding raises EnvWorkerError, or with ``lose`` is noted in ``lost`` while
        ``catch_deaths`` and ``lose_budget`` allow (its commands stay outstanding until ``replace``)."""
        active = [w for w in range(self.num_workers) if self.commands[w]]
        if not active:
            return
        buffered = [w for w in active if self.channels[w].has_message()]
        if not buffered:
            poller = select.poll()
            fd_owner: dict[int, int] = {}
            for w in active:
                for fd in (self.channels[w].read_fd, self.procs[w].sentinel):
                    fd_owner[fd] = w
                    poller.register(fd, select.POLLIN)
            spinner = self._any_spinner
            if timeout is not None and timeout < spinner.limit:
                spinner = Spinner(timeout)  # a short wait polls no longer than it may wait
            if spinner.wait_for(poll_ready(poller)):
                ready = sorted({fd_owner[fd] for fd, _ in poller.poll(0)})
            else:
                chunk = LIVENESS_POLL_S if timeout is None else min(timeout, LIVENESS_POLL_S)
                ready = sorted({fd_owner[fd] for fd, _ in poller.poll(max(0, int(chunk * 1000)))})
                if ready:
                    spinner.slept()
        else:
            ready = buffered
        for w in ready:
            channel = self.channels[w]
            try:
                if not channel.has_message() and select.select([channel.read_fd], [], [], 0)[0]:
                    channel.fill()
                while self.commands[w] and channel.has_message():
                    on_reply(w, self.commands[w].popleft(), channel.pop())
            except (EOFError, OSError):
                pass
            if self.commands[w] and not channel.has_message() and not self.procs[w].is_alive():
                if lose:
                    self._dead(w, self.commands[w][0].ids)
                else:
                    self.worker_died(w, self.commands[w][0].ids)

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the workers (politely, then by force) and release the shared memory; idempotent. The
        owner drops its views of the shared rows first (a view still held keeps the mapping alive)."""
        if self.closed:
            return
        self.closed = True
        stop_workers(self.procs, self.channels, self.command_sems)
        for pipe in self.pipes:
            pipe.close()
        for queue in self.commands:
            queue.clear()
        self.owed = [_OWE_NOTHING] * self.num_workers
        self.rows = None
        if self._shared_fd is not None:
            os.close(self._shared_fd)
            self._shared_fd = None
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            # BufferError: a view is still referenced somewhere; the mapping then goes with it
            with contextlib.suppress(BufferError):
                buffer.close()
