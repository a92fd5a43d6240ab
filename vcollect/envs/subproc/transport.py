"""How SubprocVectorEnv's parent and worker processes talk: framed pipe messages, semaphores, shared rows.

Protocol (one message each way per worker per command):
- the parent writes the actions of the env ids it steps into shared action rows, then sends each worker
  holding some of them one pickled command naming its local env indices;
- the worker steps those envs one by one, writes observations, rewards and flags into the env ids'
  shared rows and replies once: an empty message when every info is empty and nothing failed, else
  pickled (infos, failures, reset infos);
- a step-and-reset command (``step_reset``) also resets each env that ended, right after its step,
  with the seed the parent put in the env's shared row; its first observation goes to the shared
  reset rows and its flag ``restarted`` is set;
- the parent copies the rows out (fancy indexing gives fresh arrays), so a later step never changes
  what an earlier call returned.
Each worker has a FIFO of outstanding commands, so async sends, resets and replies stay matched.
Messages are length-prefixed frames on two plain pipes per worker, written and read with os.write /
os.read: that is several times cheaper per round trip than multiprocessing.Connection over a socket.
Every command is also announced on the worker's command semaphore, which is what the worker waits on.
The collector's usual call, a synchronous ``step_reset`` of every env with a seed for each and nothing
else in flight, skips the pipes: the parent sets the worker's ``fast`` control word and posts the
semaphore; the worker answers by setting its ``reply`` control word and posting its done semaphore, and
sends a pickled reply on its pipe only when there is something to say (infos, failures). Semaphores
(futexes) order the shared-memory writes on every platform and cost no system call while the other side
is polling, which halves the round trip against pipes.
Shared memory is one anonymous file (memfd) handed to the workers at start and sized once they have
reported their spaces, so no env has to be built in the parent. A worker that dies is seen at once on
the pipes (its reply pipe reads end-of-file) and within LIVENESS_POLL_S on a semaphore (its process is
checked whenever a wait times out); a worker whose parent is gone sees its command pipe hang up.
Both sides poll a short while for the other's answer before sleeping on it (Spinner), for as long as
recent answers took: on a machine whose cores are all busy, or with slow envs, they sleep at once.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import tempfile
import time
from collections.abc import Callable
from multiprocessing import reduction
from typing import Any

import numpy as np

from vcollect.envs.layout import FixedLayout

__all__ = ["Channel", "InheritedFd", "Part", "SharedRows", "Spinner", "command_parts", "poll_ready", "shared_file"]

STEP, RESET, RENDER, CLOSE, STEP_RESET, ATTR = 0, 1, 2, 3, 4, 5  # command codes
# ATTR: payload (name, write, value); the reply is a pickled list of env_attrs.AttrReply, one per local env
NO_RESET, SEEDED, UNSEEDED = 0, 1, 2  # what a step-and-reset command does with an env that ends
LIVENESS_POLL_S = 0.5
_ALIGN = 64
# Each worker's control row (one cache line of int64 words in shared memory):
CTRL_FAST = 0  # parent -> worker: 1 when the announced command is a full step-and-reset without a message
CTRL_REPLY = 1  # worker -> parent: REPLY_* bits of the answer to that command
CTRL_CURRENT = 2  # the env id the worker is calling right now (-1 when idle): names the env if it dies
_CTRL_WORDS = _ALIGN // 8
REPLY_RESTARTED, REPLY_MESSAGE = 1, 2  # some env was restarted; a pickled reply follows on the pipe
_HEADER = struct.Struct("<I")
PROTOCOL = pickle.HIGHEST_PROTOCOL


# --------------------------------------------------------------------------------------------------
# transport


class Channel:
    """Length-prefixed messages over a read fd and a write fd (plain pipes), without Connection overhead.

    Reads are buffered, so several queued messages arriving in one read are all kept.
    """

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._buffer = b""

    def send(self, payload: bytes) -> None:
        """Write one message (blocks only if the pipe is full); OSError if the reader is gone."""
        data = memoryview(_HEADER.pack(len(payload)) + payload)
        while data:
            data = data[os.write(self.write_fd, data) :]

    def has_message(self) -> bool:
        """Whether a whole message is already buffered."""
        buffer = self._buffer
        return len(buffer) >= 4 and len(buffer) >= 4 + _HEADER.unpack_from(buffer)[0]

    def fill(self) -> None:
        """Read what is available (blocking until something is); EOFError when the writer is gone."""
        chunk = os.read(self.read_fd, 1 << 16)
        if not chunk:
            raise EOFError("pipe closed")
        self._buffer += chunk

    def pop(self) -> bytes:
        """Remove and return the first buffered message (has_message() must be true)."""
        (size,) = _HEADER.unpack_from(self._buffer)
        message = self._buffer[4 : 4 + size]
        self._buffer = self._buffer[4 + size :]
        return message

    def recv(self) -> bytes:
        """Block until a message arrives and return it."""
        while not self.has_message():
            self.fill()
        return self.pop()


class InheritedFd:
    """An fd for a worker: duplicated into it at process start by multiprocessing (spawn, forkserver)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _rebuild_fd, (reduction.DupFd(self.fd),)


def _rebuild_fd(dup: Any) -> InheritedFd:
    return InheritedFd(dup.detach())


def shared_file() -> int:
    """An anonymous, resizable file to map in several processes (memfd on Linux)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("vcollect-vector-env")
    with tempfile.TemporaryFile() as handle:  # pragma: no cover - non-Linux
        return os.dup(handle.fileno())


class Spinner:
    """How long one waiting side polls for the other's answer before it sleeps, adapted to the answers.

    Polling (yielding the CPU between tries) keeps a steady step loop off the slow wake-up of a process
    whose CPU went idle (tens of microseconds on virtual machines, more than a fast env step). But it
    burns CPU: on a machine whose cores are all busy the poller takes time from the very process it
    waits for, and an answer that takes long is not caught anyway. So a spinner polls for twice the
    typical wait of its recent answers, at most ``limit`` seconds, and not at all while that typical
    wait exceeds ``limit``; sleeping waits keep measuring, so polling resumes once answers come quickly.

    Args:
        limit: The longest poll, in seconds; 0 never polls.
    """

    __slots__ = ("limit", "typical", "_start")

    def __init__(self, limit: float) -> None:
        self.limit = float(limit)
        self.typical = self.limit / 2  # start polling; the first answers set the pace
        self._start = 0.0

    def wait_for(self, ready: Callable[[], bool]) -> bool:
        """Whether ``ready()`` came true within this spinner's poll (tried at once, then between yields
        of the CPU). False: the caller sleeps until the answer comes, then calls :meth:`slept`."""
        if ready():
            self.typical *= 0.75  # an answer already there: a wait of 0
            return True
        start = time.perf_counter()
        self._start = start
        typical = self.typical
        if typical > self.limit or self.limit <= 0:
            return False
        deadline = start + min(self.limit, 2 * typical)
        while True:
            os.sched_yield()
            if ready():
                self.typical = 0.75 * typical + 0.25 * (time.perf_counter() - start)
                return True
            if time.perf_counter() > deadline:
                return False

    def slept(self) -> None:
        """The answer came after the caller slept: count the whole wait since :meth:`wait_for` began."""
        self.typical += 0.25 * (time.perf_counter() - self._start - self.typical)


def poll_ready(poller: select.poll) -> Callable[[], bool]:
    """A ``ready`` test for :meth:`Spinner.wait_for`: whether ``poller`` has something readable now."""

    def ready() -> bool:
        return bool(poller.poll(0))

    return ready


# --------------------------------------------------------------------------------------------------
# shared rows, laid out identically in the parent and in every worker


class SharedRows:
    """Views of the shared file: observation and action rows per env id, rewards, flags, markers, and
    the rows of step-and-reset commands (reset plan in, first observations and ``restarted`` out)."""

    def __init__(
        self, buffer: Any, obs: FixedLayout, act: FixedLayout, num_envs: int, num_workers: int
    ) -> None:
        offset = 0

        def take(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            nonlocal offset
            count = int(np.prod(shape, dtype=np.int64))
            array = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape)
            offset += _aligned(count * dtype.itemsize)
            return array

        self.obs = [take((num_envs,) + s, d) for s, d in zip(obs.shapes, obs.dtypes)]
        self.act = [take((num_envs,) + s, d) for s, d in zip(act.shapes, act.dtypes)]
        self.rewards = take((num_envs,), np.dtype(np.float64))
        self.terminations = take((num_envs,), np.dtype(bool))
        self.truncations = take((num_envs,), np.dtype(bool))
        # one cache line of control words per worker (_CTRL_*), so workers never write each other's line
        self.control = take((num_workers, _CTRL_WORDS), np.dtype(np.int64))
        self.current = self.control[:, CTRL_CURRENT]
        self.reset_obs = [take((num_envs,) + s, d) for s, d in zip(obs.shapes, obs.dtypes)]
        self.reset_seed = take((num_envs,), np.dtype(np.int64))
        self.reset_mode = take((num_envs,), np.dtype(np.int8))
        self.restarted = take((num_envs,), np.dtype(bool))

    @staticmethod
    def size(obs: FixedLayout, act: FixedLayout, num_envs: int, num_workers: int) -> int:
        """Bytes the rows need (each array starts on an _ALIGN boundary)."""
        sizes = obs.nbytes(num_envs) + act.nbytes(num_envs)
        sizes += [8 * num_envs, num_envs, num_envs, _ALIGN * num_workers]
        sizes += obs.nbytes(num_envs) + [8 * num_envs, num_envs, num_envs]
        return sum(_aligned(s) for s in sizes)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


Part = tuple[int, bytes, np.ndarray]  # (worker, command message, the env ids it covers)


def command_parts(op: int, ids: np.ndarray, payload: Any, worker_of: np.ndarray, starts: np.ndarray) -> list[Part]:
    """The command message for each worker holding some of ids, in worker order, naming the worker's local
    env indices (``worker_of[i]``: the worker of env id i; ``starts[w]``: worker w's first env id). A reset
    payload (seeds in ids order, options) is cut down to each worker's seeds."""
    owners = worker_of[ids]
    if owners.size and (owners == owners[0]).all():
        groups = [(int(owners[0]), ids)]
    else:
        groups = [(w, ids[owners == w]) for w in np.unique(owners).tolist()]
    parts = []
    for w, group in groups:
        local = tuple((group - starts[w]).tolist())
        if op == RESET:
            seed_of = dict(zip(ids.tolist(), payload[0]))
            worker_payload = ([seed_of[g] for g in group.tolist()], payload[1])
        else:
            worker_payload = payload
        parts.append((w, pickle.dumps((op, local, worker_payload), protocol=PROTOCOL), group))
    return parts
