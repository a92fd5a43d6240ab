"""SubprocVectorEnv: envs in worker processes, several per worker, rows in shared memory.

The parent side: commands are dispatched to the workers (vcollect.envs.subproc_worker) and their replies
matched; vcollect.envs.subproc_messaging sends, waits and settles them (the base class WorkerMessaging);
vcollect.envs.subproc_transport describes the protocol and holds the pipes and shared rows.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import pickle
import select
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.context import BaseContext
from typing import Any, cast

import gymnasium as gym
import numpy as np

from vcollect.envs.base import (
    EnvIds,
    ResetResult,
    Seeds,
    StepResetResult,
    StepResult,
    _Failure,
    check_reset_options,
    check_timeout,
    normalize_seeds,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply
from vcollect.envs.subproc_messaging import _OWE_DONE, _OWE_NOTHING, WorkerMessaging, _Command
from vcollect.envs.subproc_transport import (
    ATTR,
    CTRL_FAST,
    CTRL_REPLY,
    LIVENESS_POLL_S,
    NO_RESET,
    RENDER,
    REPLY_RESTARTED,
    RESET,
    SEEDED,
    STEP,
    STEP_RESET,
    UNSEEDED,
    Channel,
    Part,
    SharedRows,
    shared_file,
    spin_poll,
)
from vcollect.envs.subproc_worker import (
    NO_MAIN_GUARD_EXIT,
    exit_if_importing_main,
    factories_need_main,
    mp_context,
    start_worker,
    stop_workers,
)
from vcollect.errors import EnvWorkerError

__all__ = ["SubprocVectorEnv"]

_SPIN_S = 300e-6


class SubprocVectorEnv(WorkerMessaging):
    """Envs in `num_workers` processes (contiguous groups of env ids), observations in shared memory.

    Stepping or resetting a subset only messages the workers that hold those env ids, with one message
    per worker. `context` is a multiprocessing start method name or context (default "forkserver" where
    available, else "spawn"); factories are sent with cloudpickle, so lambdas work as well.
    `spin_s`: how long a worker waiting for its next command, and the parent waiting for a reply, poll
    (yielding the CPU) before they sleep; 0 sleeps at once. Polling avoids a slow wake-up per command when
    steps follow each other quickly, at the price of at most spin_s of CPU per wait.
    A worker process that dies raises EnvWorkerError and closes the vector env.

    `timeout`: seconds each synchronous call (step, reset, step_reset) may take; past it the call raises
    EnvWorkerError naming the env ids still running, kills their worker processes and closes the vector
    env, as a dead worker does (the collected data so far stays valid; a hung env cannot be resumed).
    None (the default) waits forever, as before: a step's normal duration depends on the env (a physics
    simulator or a game emulator can take seconds to reset), so no default would be right for every env;
    pick one several times the slowest call you expect. Building the envs and render() are not bounded.
    The async half (send/recv) takes its own ``recv(timeout=)``.

    `import_main`: whether spawn and forkserver workers import the program's main module when they start,
    as multiprocessing does by default (they run the script again as ``__mp_main__``: seconds when it
    imports torch). None (the default) imports it only when the env factories need it: a factory, or
    anything it holds, defined in ``__main__`` (a lambda or function of the script), or a ``gym.make`` id
    with an entry point in ``__main__`` or not registered in this process. Other ids registered here (by
    ``gym.register_envs(ale_py)`` in the script, say) are registered in the workers from this process's
    registry (an id registered under the script's ``__main__`` guard works too). Pass True if the
    factories rely on other side effects of running the script.
    (multiprocessing has no option for this: the worker is started without the main module's path in
    its preparation data, see ``subproc_worker._install_preparation_filter``.) A script without an
    ``if __name__ == "__main__":`` guard that workers do import gets a one-line EnvWorkerError saying so.
    """

    capabilities = EnvCapabilities(step_reset=True)

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        *,
        context: str | BaseContext | None = None,
        spin_s: float = _SPIN_S,
        import_main: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        exit_if_importing_main()  # a worker running an unguarded script: the parent explains
        num_envs = len(env_fns)
        if num_envs == 0:
            raise ValueError("SubprocVectorEnv needs at least one env factory")
        if num_workers is None:
            num_workers = min(num_envs, os.cpu_count() or 1)
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in 1..{num_envs} (the number of envs), got {num_workers}")
        self.num_workers = num_workers
        self.timeout = check_timeout(timeout)
        self.closed = False
        self._procs: list[Any] = []
        self._pipes: list[Any] = []  # the parent's Connection ends, kept to close them
        self._channels: list[Channel] = []
        self._pollers: list[select.poll] = []
        self._buffer: mmap.mmap | None = None
        self._rows: SharedRows | None = None
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

        ctx = mp_context(context)
        needs_main, specs = factories_need_main(env_fns)
        if import_main is None:
            import_main = needs_main
        self.imports_main = import_main
        shared_fd = shared_file()
        try:
            for w, group in enumerate(groups):
                worker = start_worker(
                    ctx, w, group, [env_fns[i] for i in group], shared_fd, num_envs, num_workers, spin_s,
                    import_main=import_main, specs=specs,
                )  # fmt: skip
                self._pipes += worker.pipes
                self._command_sems.append(worker.commands)
                self._done_sems.append(worker.done)
                self._channels.append(worker.channel)
                self._pollers.append(worker.poller)
                self._procs.append(worker.proc)
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
            size = SharedRows.size(self.obs_layout, self.act_layout, num_envs, num_workers)
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
        rows = SharedRows(self._buffer, self.obs_layout, self.act_layout, num_envs, num_workers)
        self._rows = rows
        self._obs_rows = rows.obs
        self._act_rows = rows.act
        self._rewards = rows.rewards
        self._terminations = rows.terminations
        self._truncations = rows.truncations
        rows.current[:] = -1
        self._worker_sizes = [g.size for g in self._group_ids]
        self._full_parts = self._parts(STEP, np.arange(num_envs), None)
        self._full_step_reset_parts = self._parts(STEP_RESET, np.arange(num_envs), None)

    def _handshake(self, w: int) -> tuple[gym.Space, gym.Space, Any, dict]:
        """Wait for worker w to report its spaces (or the error that stopped it)."""
        try:
            message = pickle.loads(self._recv_from(w, None, spin=False))
        except EnvWorkerError as exc:
            if self._procs[w].exitcode == NO_MAIN_GUARD_EXIT:
                main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main module"
                raise EnvWorkerError(
                    int(self._group_ids[w][0]),
                    f"worker process {w} could not start: it imports {main}, which has no "
                    '`if __name__ == "__main__":` guard and so builds the envs again; put the code that '
                    "starts collecting under that guard",
                ) from None
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
    def _begin(self, what: str) -> None:
        """Start the deadline of a synchronous call (when there is a timeout)."""
        if self.timeout is not None:
            self._deadline = time.monotonic() + self.timeout
            self._call_what = what

    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None): one message per worker holding them; results in env_ids order."""
        self._begin("step")
        try:
            return self._step(actions, env_ids)
        finally:
            self._deadline = None

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None): one message per worker holding them; results in env_ids order."""
        self._begin("reset")
        try:
            return self._reset(env_ids, seeds, options)
        finally:
            self._deadline = None

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
        self._begin("step")
        try:
            return self._step_reset(actions, env_ids, reset_seeds, may_reset, options)
        finally:
            self._deadline = None

    def _step(self, actions: Any, env_ids: EnvIds) -> StepResult:
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
        self._roundtrip(self._parts(STEP, ids, None))
        self._raise_failure()
        return self._gather_step(ids)

    def _reset(self, env_ids: EnvIds, seeds: Seeds, options: dict | None) -> ResetResult:
        if any(self._owed):
            self._settle_owed()
        if self.closed or any(self._commands):
            return super().reset(env_ids, seeds, options)
        ids = self._ids(env_ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        self._roundtrip(self._parts(RESET, ids, (seed_list, options)))
        self._raise_failure()
        return self._gather_reset(ids)

    def _step_reset(
        self,
        actions: Any,
        env_ids: EnvIds,
        reset_seeds: Sequence[int | None],
        may_reset: np.ndarray | None,
        options: dict | None,
    ) -> StepResetResult:
        if (
            env_ids is None
            and may_reset is None
            and options is None
            and not self.closed
            and not any(self._commands)
        ):
            result = self._step_reset_all(actions, reset_seeds)
            if result is not None:
                return result
        if any(self._owed):
            self._settle_owed()
        seed_list = list(reset_seeds)
        given = [s for s in seed_list if s is not None]
        if self.closed or any(self._commands) or (given and not 0 <= min(given) <= max(given) < 2**63):
            # not in flight-free sync mode, or seeds that do not fit the shared int64 rows
            return super().step_reset(
                actions, env_ids, reset_seeds=seed_list, may_reset=may_reset, options=options
            )
        seeds = seed_list if len(given) == len(seed_list) else [-1 if s is None else s for s in seed_list]
        ids = self._ids(env_ids)
        leaves = self._step_reset_leaves(actions, ids, seeds, options)
        rows = self._rows
        assert rows is not None
        seed_array = np.array(seeds, dtype=np.int64)
        if len(given) == len(seeds) and may_reset is None:
            modes: np.ndarray | int = SEEDED  # the usual case: one value for every row
        else:
            modes = np.where(seed_array >= 0, SEEDED, UNSEEDED).astype(np.int8)
            if may_reset is not None:
                modes[~may_reset] = NO_RESET
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
            parts = self._parts(STEP_RESET, ids, options)
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
            mode = UNSEEDED
        else:
            mode = SEEDED
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
            control[w, CTRL_FAST] = 1
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
            flags |= int(control[w, CTRL_REPLY])
        if flags & REPLY_RESTARTED:
            self._restarted_dirty = True
        self._raise_failure()
        obs = self.obs_layout.gather(self._obs_rows, None)
        step = (obs, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos)
        if not flags & REPLY_RESTARTED:
            return StepResetResult(*step, self._all_ids[:0], None, [])
        restarted = np.flatnonzero(rows.restarted)
        reset_obs = self.obs_layout.gather(rows.reset_obs, restarted)
        return StepResetResult(
            *step, restarted, reset_obs, [reset_infos.get(i, {}) for i in restarted.tolist()]
        )

    # -- async half ------------------------------------------------------------------------------
    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        if any(self._owed):
            self._settle_owed()
        for row, leaf in zip(self._act_rows, action_leaves):
            row[ids] = leaf
        self._dispatch(self._parts(STEP, ids, None), STEP)

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        self._dispatch(self._parts(RESET, ids, (seeds, options)), RESET)

    def _dispatch(self, parts: list[Part], op: int) -> None:
        for w, message, group in parts:
            self._commands[w].append(_Command(op, group, np.ones(group.size, bool)))
            self._send_to(w, message)

    def _handle_reply(self, w: int, reply: bytes) -> None:
        """Match a reply to the worker's oldest outstanding command and record its results."""
        command = self._commands[w].popleft()
        if command.op == RENDER:
            self._render_results[w] = pickle.loads(reply)
            return
        if command.op == ATTR:  # the answer to an interrupted attribute call: nobody waits for it
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
                spin_poll(poller, self._spin_s if timeout is None else min(timeout, self._spin_s))
            chunk = LIVENESS_POLL_S if timeout is None else min(timeout, LIVENESS_POLL_S)
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
        message = pickle.dumps((RENDER, (), None))
        self._dispatch([(w, message, np.zeros(0, np.int64)) for w in range(self.num_workers)], RENDER)
        while len(self._render_results) < self.num_workers:
            self._wait(None)
        frames = [f for w in range(self.num_workers) for f in self._render_results[w]]
        self._render_results = {}
        return None if all(f is None for f in frames) else frames

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        """One ATTR command per worker holding some of ids; bounded by ``timeout`` like a step."""
        if any(self._owed):
            self._settle_owed()
        parts = self._parts(ATTR, np.asarray(ids, np.int64), (name, write, value))
        by_id: dict[int, AttrReply] = {}
        owed: list[int] = []  # workers sent the command whose replies are not read yet
        what = "set_env_attr" if write else "get_env_attr"
        self._begin(what)
        try:
            while any(self._commands):  # answers an interrupted call left unread (nothing is in flight)
                if self._deadline is not None and time.monotonic() > self._deadline:
                    self._timed_out([int(g[0]) for g, q in zip(self._group_ids, self._commands) if q], what)
                self._wait(LIVENESS_POLL_S)
            for w, message, _ in parts:
                self._send_to(w, message)
                owed.append(w)
            for w, _, group in parts:
                replies = pickle.loads(self._recv_from(w, group))
                owed.pop(0)
                by_id.update(zip(group.tolist(), replies))
        except BaseException:
            if not self.closed:  # later waits read (and drop) the replies still owed
                for w in owed:
                    self._commands[w].append(_Command(ATTR, np.zeros(0, np.int64), np.zeros(0, bool)))
            raise
        finally:
            self._deadline = None
        return [by_id[i] for i in ids]

    def close(self) -> None:
        """Stop the workers (politely, then by force) and release shared memory; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        stop_workers(self._procs, self._channels, self._command_sems)
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
