"""SubprocVectorEnv: envs in worker processes, several per worker, rows in shared memory.

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
the pipes (its reply pipe reads end-of-file) and within _LIVENESS_POLL_S on a semaphore (its process is
checked whenever a wait times out); a worker whose parent is gone sees its command pipe hang up.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import multiprocessing as mp
import os
import pickle
import select
import struct
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.context import BaseContext
from typing import Any, NoReturn, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import CloudpickleWrapper

from vcollect.envs.base import (
    BaseVectorEnv,
    EnvIds,
    ResetResult,
    Seeds,
    StepResetResult,
    StepResult,
    _Failure,
    check_reset_options,
    normalize_seeds,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.layout import FixedLayout
from vcollect.errors import EnvWorkerError

__all__ = ["SubprocVectorEnv"]

_STEP, _RESET, _RENDER, _CLOSE, _STEP_RESET = 0, 1, 2, 3, 4
_NO_RESET, _SEEDED, _UNSEEDED = 0, 1, 2  # what a step-and-reset command does with an env that ends
_LIVENESS_POLL_S = 0.5
_CLOSE_JOIN_S = 2.0
_SPIN_S = 300e-6
_ALIGN = 64
# Each worker's control row (one cache line of int64 words in shared memory):
_CTRL_FAST = 0  # parent -> worker: 1 when the announced command is a full step-and-reset without a message
_CTRL_REPLY = 1  # worker -> parent: _REPLY_* bits of the answer to that command
_CTRL_CURRENT = 2  # the env id the worker is calling right now (-1 when idle): names the env if it dies
_CTRL_WORDS = _ALIGN // 8
_REPLY_RESTARTED, _REPLY_MESSAGE = 1, 2  # some env was restarted; a pickled reply follows on the pipe
# what the parent still owes to read from a worker after an interrupted fast command
_OWE_NOTHING, _OWE_DONE, _OWE_MESSAGE = 0, 1, 2
_HEADER = struct.Struct("<I")
_PROTOCOL = pickle.HIGHEST_PROTOCOL


# --------------------------------------------------------------------------------------------------
# transport


class _Channel:
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


class _InheritedFd:
    """An fd for a worker: duplicated into it at process start by multiprocessing (spawn, forkserver)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _rebuild_fd, (reduction.DupFd(self.fd),)


def _rebuild_fd(dup: Any) -> _InheritedFd:
    return _InheritedFd(dup.detach())


def _shared_file() -> int:
    """An anonymous, resizable file to map in several processes (memfd on Linux)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("vcollect-vector-env")
    with tempfile.TemporaryFile() as handle:  # pragma: no cover - non-Linux
        return os.dup(handle.fileno())


def _spin(poller: select.poll, seconds: float) -> None:
    """Poll without sleeping (yielding the CPU between polls) until something is readable or time is up.

    On virtual machines waking a process whose CPU went idle is slow (tens of microseconds), more than
    a fast env step; polling a short while first keeps a steady step loop off that path.
    """
    deadline = time.perf_counter() + seconds
    while not poller.poll(0) and time.perf_counter() < deadline:
        os.sched_yield()


def _spin_acquire(semaphore: Any, seconds: float) -> bool:
    """Try to take semaphore without sleeping (yielding the CPU between tries) for up to seconds.

    Like _spin: a waiting side that polls a short while is not put to sleep, so the other side's post
    costs no system call and this side needs no slow wake-up.
    """
    if semaphore.acquire(False):
        return True
    if seconds <= 0:
        return False
    deadline = time.perf_counter() + seconds
    while True:
        os.sched_yield()
        if semaphore.acquire(False):
            return True
        if time.perf_counter() > deadline:
            return False


# --------------------------------------------------------------------------------------------------
# shared rows, laid out identically in the parent and in every worker


class _SharedRows:
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
        self.current = self.control[:, _CTRL_CURRENT]
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


# --------------------------------------------------------------------------------------------------
# worker process


_FailureTuple = tuple[int, str, str, str]  # (env id, kind, message, traceback) of a failed env call


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _worker(
    index: int,
    env_ids: list[int],
    env_fns: list[CloudpickleWrapper],
    cmd_reader: Any,
    reply_writer: Any,
    shared: _InheritedFd,
    num_envs: int,
    num_workers: int,
    spin_s: float,
    commands: Any,
    done: Any,
) -> None:
    channel = _Channel(cmd_reader.fileno(), reply_writer.fileno())
    envs: list[gym.Env] = []
    try:
        for env_id, fn in zip(env_ids, env_fns):
            try:
                envs.append(fn())
            except Exception as exc:
                message = ("error", env_id, f"env factory raised {_describe(exc)}", traceback.format_exc())
                channel.send(pickle.dumps(message))
                return
        first = envs[0]
        for env_id, env in zip(env_ids[1:], envs[1:]):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                text = f"spaces {env.observation_space}, {env.action_space} differ from env {env_ids[0]}'s"
                channel.send(pickle.dumps(("error", env_id, text, "")))
                return
        try:
            spec = pickle.loads(pickle.dumps(first.spec))
        except Exception:
            spec = None
        channel.send(
            pickle.dumps(("spaces", first.observation_space, first.action_space, spec, dict(first.metadata)))
        )
        size = pickle.loads(channel.recv())
        if not isinstance(size, int):  # closed before start-up finished
            return
        buffer = mmap.mmap(shared.fd, size)
        os.close(shared.fd)
        obs_layout = FixedLayout(first.observation_space)
        act_layout = FixedLayout(first.action_space)
        rows = _SharedRows(buffer, obs_layout, act_layout, num_envs, num_workers)
        _serve(index, env_ids, envs, channel, rows, obs_layout, act_layout, spin_s, commands, done)
    except (KeyboardInterrupt, EOFError, OSError):
        pass
    finally:
        for env in envs:
            with contextlib.suppress(Exception):
                env.close()


def _serve(
    index: int,
    env_ids: list[int],
    envs: list[gym.Env],
    channel: _Channel,
    rows: _SharedRows,
    obs_layout: FixedLayout,
    act_layout: FixedLayout,
    spin_s: float,
    commands: Any,
    done: Any,
) -> None:
    """Answer commands until told to close (or the parent goes away).

    After each reply the worker polls its command semaphore for up to spin_s seconds before sleeping.
    """
    control = rows.control[index]
    obs_rows, act_rows = rows.obs, rows.act
    rewards, terminations, truncations = rows.rewards, rows.terminations, rows.truncations
    reset_mode = rows.reset_mode
    obs_flat = obs_rows[0] if obs_layout.flat else None
    # a single scalar action leaf (Discrete and the like): the row's numpy scalar is what read_row gives
    act_scalar = act_rows[0] if act_layout.flat and not act_layout.shapes[0] else None
    everything = tuple(range(len(envs)))
    poller = select.poll()
    poller.register(channel.read_fd, select.POLLIN)

    def run(op: int, local: Sequence[int], payload: Any) -> tuple[list[Any], list[_FailureTuple], dict, int]:
        """Step (or reset) the envs at local indices: (infos, failures, restart infos, restarts)."""
        infos: list[Any] = []
        failures: list[_FailureTuple] = []
        reset_infos: dict[int, Any] = {}
        restarts = 0
        stepping = op != _RESET
        for k, li in enumerate(local):
            g = env_ids[li]
            control[_CTRL_CURRENT] = g
            try:
                if not stepping:
                    obs, info = envs[li].reset(seed=payload[0][k], options=payload[1])
                elif act_scalar is not None:
                    obs, reward, terminated, truncated, info = envs[li].step(act_scalar[g])
                else:
                    obs, reward, terminated, truncated, info = envs[li].step(act_layout.read_row(act_rows, g))
            except Exception as exc:
                what = "step" if stepping else "reset"
                failures.append((g, "env", f"{what} raised {exc!r}", traceback.format_exc()))
                infos.append({})
                continue
            try:
                if obs_flat is not None:
                    obs_flat[g] = obs
                else:
                    obs_layout.write_row(obs_rows, g, obs)
            except Exception as exc:
                message = f"observation does not fit {obs_layout.space}: {exc!r}"
                failures.append((g, "obs", message, traceback.format_exc()))
                infos.append({})
                continue
            if stepping:
                rewards[g] = reward
                terminations[g] = terminated
                truncations[g] = truncated
            infos.append(info)
            if op == _STEP_RESET and (terminated or truncated) and reset_mode[g] != _NO_RESET:
                failure = _restart(envs[li], g, rows, obs_layout, payload, reset_infos)
                if failure is None:
                    restarts += 1
                else:
                    failures.append(failure)
        control[_CTRL_CURRENT] = -1
        return infos, failures, reset_infos, restarts

    def encode(local: Sequence[int], infos: list[Any], failures: list[_FailureTuple], reset_infos: dict) -> bytes:
        """The pickled reply; an env whose info cannot be pickled becomes a failure."""
        try:
            return pickle.dumps((infos, failures, reset_infos), protocol=_PROTOCOL)
        except Exception as exc:
            trace = traceback.format_exc()
            failed = {f[0] for f in failures}
            failures = failures + [
                (env_ids[li], "env", f"info is not picklable: {exc!r}", trace)
                for li in local
                if env_ids[li] not in failed
            ]
            return pickle.dumps(([{} for _ in local], failures, {}), protocol=_PROTOCOL)

    while True:
        _await_command(commands, poller, spin_s)
        if control[_CTRL_FAST]:
            control[_CTRL_FAST] = 0
            infos, failures, reset_infos, restarts = run(_STEP_RESET, everything, None)
            flags = _REPLY_RESTARTED if restarts else 0
            if not failures and not reset_infos and not any(infos):
                control[_CTRL_REPLY] = flags
                done.release()
                continue
            reply = encode(everything, infos, failures, reset_infos)
            control[_CTRL_REPLY] = flags | _REPLY_MESSAGE
            done.release()  # before sending: a reply bigger than the pipe is read while it is written
            channel.send(reply)
            continue
        op, local, payload = pickle.loads(channel.recv())
        if op == _CLOSE:
            return
        if op == _RENDER:
            channel.send(pickle.dumps([env.render() for env in envs], protocol=_PROTOCOL))
            continue
        infos, failures, reset_infos, _ = run(op, local, payload)
        if not failures and not any(infos) and not reset_infos:
            channel.send(b"")
        else:
            channel.send(encode(local, infos, failures, reset_infos))


def _await_command(commands: Any, poller: select.poll, spin_s: float) -> None:
    """Return once the parent has announced a command; EOFError once the parent is gone (its end of the
    command pipe hung up), checked whenever a wait of _LIVENESS_POLL_S times out."""
    if _spin_acquire(commands, spin_s):
        return
    while not commands.acquire(True, _LIVENESS_POLL_S):
        if any(events & select.POLLHUP for _, events in poller.poll(0)):
            raise EOFError("the parent process is gone")


def _restart(
    env: gym.Env, g: int, rows: _SharedRows, obs_layout: FixedLayout, options: Any, reset_infos: dict[int, Any]
) -> _FailureTuple | None:
    """Reset env g (which just ended) for a step-and-reset command; a failure tuple if that failed."""
    seed = int(rows.reset_seed[g]) if rows.reset_mode[g] == _SEEDED else None
    try:
        obs, info = env.reset(seed=seed, options=options)
    except Exception as exc:
        return (g, "env", f"reset raised {exc!r}", traceback.format_exc())
    try:
        obs_layout.write_row(rows.reset_obs, g, obs)
    except Exception as exc:
        return (g, "obs", f"observation does not fit {obs_layout.space}: {exc!r}", traceback.format_exc())
    rows.restarted[g] = True
    if info:
        reset_infos[g] = info
    return None


# --------------------------------------------------------------------------------------------------
# parent side


@dataclass
class _Command:
    """An outstanding command of one worker; `live` is False for env ids whose result was discarded."""

    op: int
    ids: np.ndarray
    live: np.ndarray


_Part = tuple[int, bytes, np.ndarray]  # (worker, command message, the env ids it covers)


class SubprocVectorEnv(BaseVectorEnv):
    """Envs in `num_workers` processes (contiguous groups of env ids), observations in shared memory.

    Stepping or resetting a subset only messages the workers that hold those env ids, with one message
    per worker. `context` is a multiprocessing start method name or context (default "forkserver" where
    available, else "spawn"); factories are sent with cloudpickle, so lambdas work as well.
    `spin_s`: how long a worker waiting for its next command, and the parent waiting for a reply, poll
    (yielding the CPU) before they sleep; 0 sleeps at once. Polling avoids a slow wake-up per command when
    steps follow each other quickly, at the price of at most spin_s of CPU per wait.
    A worker process that dies raises EnvWorkerError and closes the vector env.
    """

    capabilities = EnvCapabilities(step_reset=True)

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        *,
        context: str | BaseContext | None = None,
        spin_s: float = _SPIN_S,
    ) -> None:
        num_envs = len(env_fns)
        if num_envs == 0:
            raise ValueError("SubprocVectorEnv needs at least one env factory")
        if num_workers is None:
            num_workers = min(num_envs, os.cpu_count() or 1)
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in 1..{num_envs} (the number of envs), got {num_workers}")
        self.num_workers = num_workers
        self.closed = False
        self._procs: list[Any] = []
        self._pipes: list[Any] = []  # the parent's Connection ends, kept to close them
        self._channels: list[_Channel] = []
        self._pollers: list[select.poll] = []
        self._buffer: mmap.mmap | None = None
        self._rows: _SharedRows | None = None
        groups = [g.tolist() for g in np.array_split(np.arange(num_envs), num_workers)]
        self._group_ids = [np.asarray(g, np.int64) for g in groups]
        self._starts = np.array([g[0] for g in groups], np.int64)
        self._worker_of = np.repeat(np.arange(num_workers), [len(g) for g in groups])
        self._commands: list[collections.deque[_Command]] = [collections.deque() for _ in range(num_workers)]
        self._render_results: dict[int, list[Any]] = {}
        self._spin_s = spin_s
        self._command_sems: list[Any] = []  # posted once per command (what the worker waits on)
        self._done_sems: list[Any] = []  # posted by the worker when it has answered a fast command
        self._owed = [_OWE_NOTHING] * num_workers  # answers of interrupted fast commands, read before others
        self._rows_mode: int | None = None  # the reset_mode of every shared row (None: not one for all)
        self._restarted_dirty = True  # some shared restarted row may be True

        ctx = _context(context)
        shared_fd = _shared_file()
        try:
            for w, group in enumerate(groups):
                cmd_reader, cmd_writer = ctx.Pipe(duplex=False)
                reply_reader, reply_writer = ctx.Pipe(duplex=False)
                fns = [CloudpickleWrapper(env_fns[i]) for i in group]
                commands, done = ctx.Semaphore(0), ctx.Semaphore(0)  # type: ignore[attr-defined]
                proc = ctx.Process(  # type: ignore[attr-defined]
                    target=_worker,
                    args=(
                        w,
                        group,
                        fns,
                        cmd_reader,
                        reply_writer,
                        _InheritedFd(shared_fd),
                        num_envs,
                        num_workers,
                        spin_s,
                        commands,
                        done,
                    ),
                    name=f"vcollect-env-worker-{w}",
                    daemon=True,
                )
                self._pipes += [cmd_writer, reply_reader]
                self._command_sems.append(commands)
                self._done_sems.append(done)
                self._channels.append(_Channel(reply_reader.fileno(), cmd_writer.fileno()))
                poller = select.poll()
                poller.register(reply_reader.fileno(), select.POLLIN)
                self._pollers.append(poller)
                proc.start()
                cmd_reader.close()
                reply_writer.close()
                self._procs.append(proc)
            spaces = [self._handshake(w) for w in range(num_workers)]
            obs_space, act_space, spec, metadata = spaces[0]
            for w, (o, a, _, _) in enumerate(spaces[1:], start=1):
                if o != obs_space or a != act_space:
                    raise ValueError(
                        f"env {groups[w][0]} has spaces {o}, {a}; env 0 has {obs_space}, {act_space}: "
                        "all envs must share their spaces"
                    )
            super().__init__(num_envs, obs_space, act_space)
            self.env_spec = spec
            self.metadata = metadata
            size = _SharedRows.size(self.obs_layout, self.act_layout, num_envs, num_workers)
            os.ftruncate(shared_fd, size)
            self._buffer = mmap.mmap(shared_fd, size)
            for w in range(num_workers):  # read before the worker waits for commands: no semaphore post
                self._channels[w].send(pickle.dumps(size))
        except BaseException:
            self.closed = True
            self._shutdown()
            raise
        finally:
            os.close(shared_fd)
        rows = _SharedRows(self._buffer, self.obs_layout, self.act_layout, num_envs, num_workers)
        self._rows = rows
        self._obs_rows = rows.obs
        self._act_rows = rows.act
        self._rewards = rows.rewards
        self._terminations = rows.terminations
        self._truncations = rows.truncations
        rows.current[:] = -1
        self._worker_sizes = [g.size for g in self._group_ids]
        self._full_parts = self._parts(_STEP, np.arange(num_envs), None)
        self._full_step_reset_parts = self._parts(_STEP_RESET, np.arange(num_envs), None)

    def _handshake(self, w: int) -> tuple[gym.Space, gym.Space, Any, dict]:
        """Wait for worker w to report its spaces (or the error that stopped it)."""
        try:
            message = pickle.loads(self._recv_from(w, None, spin=False))
        except EnvWorkerError as exc:
            raise EnvWorkerError(
                int(self._group_ids[w][0]),
                f"worker process {w} died while creating its envs (exit code {self._procs[w].exitcode})",
            ) from exc
        if message[0] == "error":
            _, env_id, text, trace = message
            raise EnvWorkerError(env_id, text, trace)
        _, obs_space, act_space, spec, metadata = message
        return obs_space, act_space, spec, metadata

    # -- the hot paths: synchronous calls while nothing else is in flight ---------------------------
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None): one message per worker holding them; results in env_ids order."""
        if any(self._owed):
            self._settle_owed()
        if self.closed or any(self._commands):
            return super().step(actions, env_ids)
        ids = self._ids(env_ids)
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        if env_ids is None:
            for row, leaf in zip(self._act_rows, leaves):
                row[...] = leaf
            infos = self._roundtrip(self._full_parts, store_infos=False)
            self._raise_failure()
            return (
                self.obs_layout.gather(self._obs_rows, None),
                self._rewards.copy(),
                self._terminations.copy(),
                self._truncations.copy(),
                infos,
            )
        for row, leaf in zip(self._act_rows, leaves):
            row[ids] = leaf
        self._roundtrip(self._parts(_STEP, ids, None))
        self._raise_failure()
        return self._gather_step(ids)

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None): one message per worker holding them; results in env_ids order."""
        if any(self._owed):
            self._settle_owed()
        if self.closed or any(self._commands):
            return super().reset(env_ids, seeds, options)
        ids = self._ids(env_ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        self._roundtrip(self._parts(_RESET, ids, (seed_list, options)))
        self._raise_failure()
        return self._gather_reset(ids)

    def step_reset(
        self,
        actions: Any,
        env_ids: EnvIds = None,
        *,
        reset_seeds: Sequence[int | None],
        may_reset: np.ndarray | None = None,
        options: dict | None = None,
    ) -> StepResetResult:
        """Step env_ids (all when None); each worker resets its envs that end right after their step, so
        an ended episode costs no second round trip. Results in env_ids order."""
        if env_ids is None and may_reset is None and options is None and not self.closed and not any(self._commands):
            result = self._step_reset_all(actions, reset_seeds)
            if result is not None:
                return result
        if any(self._owed):
            self._settle_owed()
        seed_list = list(reset_seeds)
        given = [s for s in seed_list if s is not None]
        if self.closed or any(self._commands) or (given and not 0 <= min(given) <= max(given) < 2**63):
            # not in flight-free sync mode, or seeds that do not fit the shared int64 rows
            return super().step_reset(actions, env_ids, reset_seeds=seed_list, may_reset=may_reset, options=options)
        seeds = seed_list if len(given) == len(seed_list) else [-1 if s is None else s for s in seed_list]
        ids = self._ids(env_ids)
        leaves = self._step_reset_leaves(actions, ids, seeds, options)
        rows = self._rows
        assert rows is not None
        seed_array = np.array(seeds, dtype=np.int64)
        if len(given) == len(seeds) and may_reset is None:
            modes: np.ndarray | int = _SEEDED  # the usual case: one value for every row
        else:
            modes = np.where(seed_array >= 0, _SEEDED, _UNSEEDED).astype(np.int8)
            if may_reset is not None:
                modes[~may_reset] = _NO_RESET
        # one mode for every row only when every row was just written with one value
        self._rows_mode = modes if env_ids is None and isinstance(modes, int) else None
        self._restarted_dirty = True
        if env_ids is None:
            for row, leaf in zip(self._act_rows, leaves):
                row[...] = leaf
            rows.reset_seed[...] = seed_array
            rows.reset_mode[...] = modes
            rows.restarted[...] = False
        else:
            for row, leaf in zip(self._act_rows, leaves):
                row[ids] = leaf
            rows.reset_seed[ids] = seed_array
            rows.reset_mode[ids] = modes
            rows.restarted[ids] = False
        if env_ids is None and options is None:
            parts = self._full_step_reset_parts
        else:
            parts = self._parts(_STEP_RESET, ids, options)
        reset_infos: dict[int, dict[str, Any]] = {}
        infos = self._roundtrip(parts, store_infos=False, reset_infos=reset_infos)
        self._raise_failure()
        if env_ids is None:
            obs = self.obs_layout.gather(self._obs_rows, None)
            step = (obs, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos)
        else:
            step = (
                self.obs_layout.gather(self._obs_rows, ids),
                self._rewards[ids],
                self._terminations[ids],
                self._truncations[ids],
                infos,
            )
        restarted = ids[rows.restarted[ids]]
        if not restarted.size:
            return StepResetResult(*step, restarted, None, [])
        reset_obs = self.obs_layout.gather(rows.reset_obs, restarted)
        return StepResetResult(
            *step, restarted, reset_obs, [reset_infos.get(i, {}) for i in restarted.tolist()]
        )

    def _step_reset_all(self, actions: Any, reset_seeds: Sequence[int | None]) -> StepResetResult | None:
        """step_reset of every env with nothing in flight, each env with a seed or each without: the
        collector's call, made without pipes (see the module docstring). None when the seeds are not one
        int in [0, 2**63) per env, nor all None: the general path handles (or rejects) those."""
        seeds = list(reset_seeds)
        rows = self._rows
        assert rows is not None
        if any(self._owed):
            self._settle_owed()
        if len(seeds) != self.num_envs:  # (one seed would broadcast to every row)
            return None
        if seeds.count(None) == len(seeds):
            mode = _UNSEEDED
        else:
            mode = _SEEDED
            try:
                rows.reset_seed[:] = seeds  # raises for None and seeds from 2**63 on
            except (TypeError, ValueError, OverflowError):
                return None
            if min(cast("list[int]", seeds)) < 0:
                return None
        leaves = self.act_layout.batch_leaves(actions, self.num_envs)
        for row, leaf in zip(self._act_rows, leaves):
            row[...] = leaf
        if self._rows_mode != mode:
            rows.reset_mode[...] = mode
            self._rows_mode = mode
        if self._restarted_dirty:
            rows.restarted[...] = False
            self._restarted_dirty = False
        control = rows.control
        owed = self._owed
        for w, commands in enumerate(self._command_sems):
            control[w, _CTRL_FAST] = 1
            owed[w] = _OWE_DONE
            commands.release()
        infos: list[dict[str, Any]] = []
        reset_infos: dict[int, dict[str, Any]] = {}
        flags = 0
        for w, size in enumerate(self._worker_sizes):
            reply = self._settle(w)
            if reply is None:
                infos += [{} for _ in range(size)]
            else:
                infos += self._unpack(reply, reset_infos)
            flags |= int(control[w, _CTRL_REPLY])
        if flags & _REPLY_RESTARTED:
            self._restarted_dirty = True
        self._raise_failure()
        obs = self.obs_layout.gather(self._obs_rows, None)
        step = (obs, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos)
        if not flags & _REPLY_RESTARTED:
            return StepResetResult(*step, self._all_ids[:0], None, [])
        restarted = np.flatnonzero(rows.restarted)
        reset_obs = self.obs_layout.gather(rows.reset_obs, restarted)
        return StepResetResult(*step, restarted, reset_obs, [reset_infos.get(i, {}) for i in restarted.tolist()])

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
            if not self._rows.control[w, _CTRL_REPLY] & _REPLY_MESSAGE:  # type: ignore[union-attr]
                self._owed[w] = _OWE_NOTHING
                return None
            self._owed[w] = _OWE_MESSAGE
        reply = self._recv_from(w, self._group_ids[w], spin=False)
        self._owed[w] = _OWE_NOTHING
        return reply

    def _await_done(self, w: int) -> None:
        """Take worker w's done semaphore, checking every _LIVENESS_POLL_S that the worker is alive."""
        done = self._done_sems[w]
        if _spin_acquire(done, self._spin_s):
            return
        while not done.acquire(True, _LIVENESS_POLL_S):
            if not self._procs[w].is_alive():
                if done.acquire(False):  # answered, then died: the next command finds out
                    return
                self._worker_died(w, self._group_ids[w])

    def _split(self, ids: np.ndarray) -> list[tuple[int, tuple[int, ...], np.ndarray]]:
        """(worker, local indices, env ids) for each worker holding some of ids, in worker order."""
        owners = self._worker_of[ids]
        if owners.size and (owners == owners[0]).all():
            w = int(owners[0])
            return [(w, tuple((ids - self._starts[w]).tolist()), ids)]
        out = []
        for w in np.unique(owners).tolist():
            group = ids[owners == w]
            out.append((w, tuple((group - self._starts[w]).tolist()), group))
        return out

    def _parts(self, op: int, ids: np.ndarray, payload: Any) -> list[_Part]:
        """The command for each worker holding some of ids; a reset payload (seeds in ids order,
        options) is cut down to each worker's seeds."""
        parts = []
        for w, local, group in self._split(ids):
            if op == _RESET:
                seed_of = dict(zip(ids.tolist(), payload[0]))
                worker_payload = ([seed_of[g] for g in group.tolist()], payload[1])
            else:
                worker_payload = payload
            parts.append((w, pickle.dumps((op, local, worker_payload), protocol=_PROTOCOL), group))
        return parts

    def _roundtrip(
        self, parts: list[_Part], store_infos: bool = True, reset_infos: dict[int, dict[str, Any]] | None = None
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
                    self._commands[w].append(_Command(_STEP, np.zeros(0, np.int64), np.zeros(0, bool)))
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
                _spin(self._pollers[w], self._spin_s)
            while not channel.has_message():
                if self._pollers[w].poll(_LIVENESS_POLL_S * 1000):
                    channel.fill()
                elif not self._procs[w].is_alive():
                    raise EOFError("worker exited")
            return channel.pop()
        except (EOFError, OSError):
            self._worker_died(w, ids)

    def _worker_died(self, w: int, ids: np.ndarray | None) -> NoReturn:
        """Raise EnvWorkerError for a dead worker, naming the env it was calling; closes this vector env."""
        proc = self._procs[w]
        proc.join(_CLOSE_JOIN_S)
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

    # -- async half ------------------------------------------------------------------------------
    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        if any(self._owed):
            self._settle_owed()
        for row, leaf in zip(self._act_rows, action_leaves):
            row[ids] = leaf
        self._dispatch(self._parts(_STEP, ids, None), _STEP)

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        self._dispatch(self._parts(_RESET, ids, (seeds, options)), _RESET)

    def _dispatch(self, parts: list[_Part], op: int) -> None:
        for w, message, group in parts:
            self._commands[w].append(_Command(op, group, np.ones(group.size, bool)))
            self._send_to(w, message)

    def _handle_reply(self, w: int, reply: bytes) -> None:
        """Match a reply to the worker's oldest outstanding command and record its results."""
        command = self._commands[w].popleft()
        if command.op == _RENDER:
            self._render_results[w] = pickle.loads(reply)
            return
        infos, failures, _ = pickle.loads(reply) if reply else (None, [], None)
        live = command.ids[command.live].tolist()
        failed = set()
        for env_id, kind, message, trace in failures:
            if env_id in live:
                failed.add(env_id)
                self._failures.append(_Failure(env_id, kind, message, trace))
                self._flight[env_id] = 0
        for pos, env_id in enumerate(command.ids.tolist()):
            if command.live[pos] and env_id not in failed:
                self._done[env_id] = True
                self._infos[env_id] = {} if infos is None else infos[pos]

    def _wait(self, timeout: float | None) -> None:
        active = [w for w in range(self.num_workers) if self._commands[w]]
        if not active:
            return
        buffered = [w for w in active if self._channels[w].has_message()]
        if not buffered:
            poller = select.poll()
            fd_owner: dict[int, int] = {}
            for w in active:
                for fd in (self._channels[w].read_fd, self._procs[w].sentinel):
                    fd_owner[fd] = w
                    poller.register(fd, select.POLLIN)
            if self._spin_s > 0:
                _spin(poller, self._spin_s if timeout is None else min(timeout, self._spin_s))
            chunk = _LIVENESS_POLL_S if timeout is None else min(timeout, _LIVENESS_POLL_S)
            ready = sorted({fd_owner[fd] for fd, _ in poller.poll(max(0, int(chunk * 1000)))})
        else:
            ready = buffered
        for w in ready:
            channel = self._channels[w]
            try:
                if not channel.has_message() and select.select([channel.read_fd], [], [], 0)[0]:
                    channel.fill()
                while self._commands[w] and channel.has_message():
                    self._handle_reply(w, channel.pop())
            except (EOFError, OSError):
                pass
            if self._commands[w] and not channel.has_message() and not self._procs[w].is_alive():
                self._worker_died(w, self._commands[w][0].ids)

    def _discard(self, ids: np.ndarray) -> None:
        super()._discard(ids)
        for queue in self._commands:
            for command in queue:
                command.live &= ~np.isin(command.ids, ids)

    # -- rest of the API ------------------------------------------------------------------------
    def render(self) -> list[Any] | None:
        """Each env's render() result (env id order), or None when every env returned None."""
        self._check_open()
        self._render_results = {}
        message = pickle.dumps((_RENDER, (), None))
        self._dispatch([(w, message, np.zeros(0, np.int64)) for w in range(self.num_workers)], _RENDER)
        while len(self._render_results) < self.num_workers:
            self._wait(None)
        frames = [f for w in range(self.num_workers) for f in self._render_results[w]]
        self._render_results = {}
        return None if all(f is None for f in frames) else frames

    def close(self) -> None:
        """Stop the workers (politely, then by force) and release shared memory; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        close_message = pickle.dumps((_CLOSE, (), None))
        for channel, proc, commands in zip(self._channels, self._procs, self._command_sems):
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    channel.send(close_message)
                    commands.release()
        deadline = time.monotonic() + _CLOSE_JOIN_S
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.terminate()
                proc.join(_CLOSE_JOIN_S)
            if proc.is_alive():  # pragma: no cover - ignores SIGTERM
                proc.kill()
                proc.join()
        for pipe in self._pipes:
            pipe.close()
        for queue in self._commands:
            queue.clear()
        self._owed = [_OWE_NOTHING] * self.num_workers
        self._release_buffer()

    def _release_buffer(self) -> None:
        if self._buffer is None:
            return
        buffer, self._buffer = self._buffer, None
        self._obs_rows, self._act_rows = [], []
        self._rewards = np.zeros(self.num_envs, np.float64)
        self._terminations = np.zeros(self.num_envs, bool)
        self._truncations = np.zeros(self.num_envs, bool)
        self._rows = None
        # BufferError: a view is still referenced somewhere; the mapping then goes with it
        with contextlib.suppress(BufferError):
            buffer.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _context(context: str | BaseContext | None) -> BaseContext:
    if isinstance(context, BaseContext):
        return context
    if context is None:
        context = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(context)
    if context == "forkserver":
        # workers fork from a server that has imported this module (numpy, gymnasium) once
        from multiprocessing import forkserver

        current = list(getattr(forkserver._forkserver, "_preload_modules", []))
        if __name__ not in current:
            ctx.set_forkserver_preload(current + [__name__])
    return ctx
