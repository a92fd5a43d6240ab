"""SubprocVectorEnv: envs in worker processes, several per worker, rows in shared memory.

The vector env the collectors see: it checks the calls, writes actions and reset plans into the shared
rows, hands the commands to its WorkerPool (vcollect.envs.subproc.pool: the processes, their pipes,
semaphores and waits) and turns the replies into results. vcollect.envs.subproc.transport describes the
protocol, vcollect.envs.subproc.worker what a worker does.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.context import BaseContext
from typing import Any, NoReturn, cast

import gymnasium as gym
import numpy as np

from vcollect.envs.base import (
    BaseVectorEnv,
    EnvFailure,
    EnvIds,
    ResetResult,
    Seeds,
    StepResetResult,
    StepResult,
    check_reset_options,
    check_timeout,
    normalize_seeds,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.env_attrs import AttrReply
from vcollect.envs.restarts import RestartBudget
from vcollect.envs.subproc.launch import exit_if_importing_main
from vcollect.envs.subproc.pool import PendingCommand, WorkerPool
from vcollect.envs.subproc.transport import (
    ATTR,
    LIVENESS_POLL_S,
    NO_RESET,
    RENDER,
    REPLY_RESTARTED,
    RESET,
    SEEDED,
    STEP,
    STEP_RESET,
    UNSEEDED,
    Part,
)

__all__ = ["SubprocVectorEnv"]

_SPIN_S = 300e-6
_POSTED = "posted"  # SubprocVectorEnv._split: a fast step_reset of every env announced to the workers


class SubprocVectorEnv(BaseVectorEnv):
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
    None (the default) waits forever: a step's normal duration depends on the env (a physics
    simulator or a game emulator can take seconds to reset), so no default would be right for every env;
    pick one several times the slowest call you expect. Building the envs and render() are not bounded.
    The async half (send/recv) takes its own ``recv(timeout=)``, and no step or reset in flight may take
    longer than ``timeout`` either: past it ``recv`` raises as a synchronous call does.
    ``send_step_reset``/``recv_step_reset`` split a step_reset of every env in two, so that a collector can record
    one step while the workers take the next. `overlap_steps`: whether the vector env declares that
    (``capabilities.split_step_reset``): it pays only where this process has a CPU beside the workers' (with as
    many workers as CPUs, the recording has to share a CPU with a worker that is stepping, and the step takes
    as long as recording first and stepping after); None (the default) declares it where more CPUs are usable
    than there are workers.

    `max_restarts` (default 0): how many times a worker process that died, or one of whose envs raised in
    a synchronous step, reset or step_reset, is replaced by a new process holding the same env ids (new
    envs, built but not reset) instead of raising. The call then returns as usual; the replaced env ids are
    listed by ``take_restarts()`` (vcollect.envs.restarts: their rows of the result mean nothing, and they
    must be reset before they step again), and a Collector abandons their episodes and carries on. The
    budget counts replacements over the vector env's life; past it the failure raises EnvWorkerError as
    with 0, saying the budget is spent (workers lost in one call or wait beyond the replacements left
    raise at once, none of them replaced). A timeout, a bad observation (ObservationError) or a reward of
    the wrong type (EnvOutputError) is not restarted. The async half restarts the same way while
    ``recv``/``recv_reset`` wait: a worker that died with a step or reset in flight, or whose env raised in
    one, is replaced; the steps and resets in flight of its env ids are dropped (never returned), and they
    are listed by ``take_restarts()`` (an AsyncCollector abandons their episodes and resets them).

    `import_main`: whether spawn and forkserver workers import the program's main module when they start,
    as multiprocessing does by default (they run the script again as ``__mp_main__``: seconds when it
    imports torch). None (the default) imports it only when the env factories need it: a factory, or
    anything it holds, defined in ``__main__`` (a lambda or function of the script), or a ``gym.make`` id
    with an entry point in ``__main__`` or not registered in this process. Other ids registered here (by
    ``gym.register_envs(ale_py)`` in the script, say) are registered in the workers from this process's
    registry (an id registered under the script's ``__main__`` guard works too). Pass True if the
    factories rely on other side effects of running the script.
    (multiprocessing has no option for this: the worker is started without the main module's path in
    its preparation data, see ``vcollect.envs.subproc.launch``.) A script without an
    ``if __name__ == "__main__":`` guard that workers do import gets a one-line EnvWorkerError saying so.

    Args:
        env_fns: One zero-argument factory per env.
        num_workers: Worker processes (default: as many as CPUs, at most one per env).
        context: A multiprocessing start method name or context.
        spin_s: Seconds a waiting worker or parent polls before it sleeps.
        import_main: Whether workers import the program's main module (None: only where needed).
        timeout: Seconds each synchronous call may take (None: no limit).
        max_restarts: Worker replacements allowed over the vector env's life.
        overlap_steps: Whether to declare ``split_step_reset`` (None: where a CPU is free beside the workers).

    Raises:
        ValueError: No factory, a ``num_workers`` outside 1..len(env_fns), or a bad ``timeout``.
        EnvWorkerError: A worker failed to start or build its envs.
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
        max_restarts: int = 0,
        overlap_steps: bool | None = None,
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
        budget = RestartBudget(max_restarts)
        if overlap_steps is None:
            usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            overlap_steps = usable > num_workers
        self.capabilities = EnvCapabilities(
            step_reset=True, split_step_reset=bool(overlap_steps), restarts_envs=budget.max_restarts > 0
        )
        self.closed = True  # until the workers are up (a failed start leaves nothing to close)
        pool = WorkerPool(
            env_fns, num_workers, context=context, spin_s=spin_s, import_main=import_main, timeout=self.timeout,
            on_fatal=_closer(weakref.ref(self)), replaceable=budget.max_restarts > 0,
        )  # fmt: skip
        pool.death_note = budget.spent_note()
        self._pool = pool
        self.imports_main = pool.imports_main
        super().__init__(num_envs, pool.observation_space, pool.action_space)
        self.restarts = budget
        self._restarting = budget.max_restarts > 0
        self.env_spec = pool.env_spec
        self.metadata = pool.metadata
        rows = pool.rows
        assert rows is not None
        self._rows = rows
        self._obs_rows = rows.obs
        self._act_rows = rows.act
        self._rewards = rows.rewards
        self._terminations = rows.terminations
        self._truncations = rows.truncations
        self._render_results: dict[int, list[Any]] = {}
        self._rows_mode: int | None = None  # the reset_mode of every shared row (None: not one for all)
        self._restarted_dirty = True  # some shared restarted row may be True
        self._seeds_written: list[int | None] | None = None  # the reset seeds in every shared row, as given
        self._full_parts = pool.parts(STEP, self._all_ids, None)
        self._full_step_reset_parts = pool.parts(STEP_RESET, self._all_ids, None)
        # the step_reset of every env send_step_reset started: _POSTED (announced to the workers), the
        # arguments of a synchronous call for recv_step_reset to make, or None when none is under way
        self._split: Any = None

    # -- the hot paths: synchronous calls while nothing else is in flight ---------------------------
    def step(self, actions: Any, env_ids: EnvIds = None) -> StepResult:
        """Step env_ids (all when None): one message per worker holding them.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).

        Returns:
            (observations, rewards, terminations, truncations, infos), fresh arrays in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised, its worker died, or the call ran past ``timeout`` (the vector env is then
                closed) (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        if self._split is not None:
            self._refuse_split()
        self._pool.begin("step")
        self._catch_deaths()
        try:
            return self._step(actions, env_ids)
        finally:
            self._pool.deadline = None
            self._pool.catch_deaths = False

    def reset(self, env_ids: EnvIds = None, seeds: Seeds = None, options: dict | None = None) -> ResetResult:
        """Reset env_ids (all when None): one message per worker holding them.

        Args:
            env_ids: The env ids to reset (None: all).
            seeds: One seed (or None) per env id, or an int s seeding the j-th listed env with s + j
                (None: unseeded).
            options: Passed to the reset of every listed env.

        Returns:
            (batched observations, one info dict per env id), fresh, in ``env_ids`` order.

        Raises:
            EnvWorkerError: An env raised, its worker died, or the call ran past ``timeout`` (the vector env is then
                closed) (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        if self._split is not None:
            self._refuse_split()
        self._pool.begin("reset")
        self._catch_deaths()
        try:
            return self._reset(env_ids, seeds, options)
        finally:
            self._pool.deadline = None
            self._pool.catch_deaths = False

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
        an ended episode costs no second round trip.

        Args:
            actions: A batch of actions, one row per env id.
            env_ids: The env ids to step (None: all).
            reset_seeds: The seed of each env id's reset, should it end.
            may_reset: A bool per env id; False leaves an ended env ended (None: all True).
            options: Passed to every reset.

        Returns:
            The step's results, and the env ids reset with their first observations and infos.

        Raises:
            EnvWorkerError: An env raised, its worker died, or the call ran past ``timeout`` (the vector env is then
                closed) (EnvOutputError: it returned a reward or flag of the wrong
                type).
            ObservationError: An observation does not fit the observation space.
            CollectorStateError: The vector env is closed.
            ValueError: Bad env ids, seeds or options, or an env id with a step or reset in flight.
        """
        if self._split is not None:
            self._refuse_split()
        pool = self._pool
        if self.timeout is not None:
            pool.begin("step")
        if self._restarting:
            self._catch_deaths()
        try:
            if env_ids is None and may_reset is None and options is None and not self.closed and not any(pool.commands):
                result = self._step_reset_all(actions, reset_seeds)
                if result is not None:
                    return result
            return self._step_reset(actions, env_ids, reset_seeds, may_reset, options)
        finally:
            pool.deadline = None
            pool.catch_deaths = False

    def send_step_reset(
        self, actions: Any, *, reset_seeds: Sequence[int | None], options: dict | None = None
    ) -> None:
        """Start ``step_reset(actions, reset_seeds=reset_seeds, options=options)`` of every env and return at
        once; ``recv_step_reset`` waits for it and returns its result. Meanwhile the workers step while this
        process does other work; the vector env takes no other call until the result is taken. ``timeout``
        bounds the step from this call to the end of its wait.

        Args:
            actions: A batch of actions, one row per env.
            reset_seeds: The seed of each env's reset, should it end.
            options: Passed to every reset.

        Raises:
            ValueError: A step_reset started this way is still under way, or bad seeds or options (raised here
                or by ``recv_step_reset``).
            CollectorStateError: The vector env is closed.
        """
        if self._split is not None:
            self._refuse_split()
        pool = self._pool
        if options is None and not self.closed and not any(pool.commands):
            if self.timeout is not None:
                pool.begin("step")
            if self._restarting:
                self._catch_deaths()
            try:
                posted = self._post_step_reset_all(actions, reset_seeds)
            except BaseException:
                pool.deadline = None
                pool.catch_deaths = False
                raise
            if posted:
                self._split = _POSTED
                return
            pool.deadline = None
            pool.catch_deaths = False
        self._split = (actions, list(reset_seeds), options)  # made by recv_step_reset, synchronously

    def recv_step_reset(self) -> StepResetResult:
        """Wait for the step_reset ``send_step_reset`` started and return its result.

        Returns:
            What ``step_reset`` of every env returns.

        Raises:
            ValueError: No step_reset was started with ``send_step_reset``.
            CollectorStateError: The vector env was closed meanwhile.
            EnvWorkerError, ObservationError, EnvOutputError: As ``step_reset`` raises them.
        """
        split, self._split = self._split, None
        if split is None:
            raise ValueError("no step_reset is under way: start one with send_step_reset()")
        if split is not _POSTED:
            actions, seeds, options = split
            return self.step_reset(actions, reset_seeds=seeds, options=options)
        self._check_open()
        pool = self._pool
        try:
            return self._settle_step_reset_all()
        finally:
            pool.deadline = None
            pool.catch_deaths = False

    def _refuse_split(self) -> NoReturn:
        raise ValueError(
            "a step_reset of every env started with send_step_reset() is under way: take its result with "
            "recv_step_reset() before calling the vector env again"
        )

    def _catch_deaths(self) -> None:
        """Let the synchronous call under way lose as many workers as the restart budget still allows."""
        if self._restarting:
            budget = self.restarts
            self._pool.lose_budget = budget.max_restarts - budget.used
            self._pool.catch_deaths = True

    def _replace_failed(self) -> None:
        """After a synchronous call's replies, or an async wait's: replace the workers it lost and those whose
        envs raised, while the restart budget allows, zeroing their env ids' step rows and dropping their steps
        and resets in flight (vcollect.envs.restarts); the failures past the budget, and the others
        (observations, values), stay to be raised."""
        pool = self._pool
        if not self._restarting or not (pool.lost or self._failures):
            return
        budget = self.restarts
        reasons: dict[int, tuple[str, str]] = {w: (text, "") for w, text in pool.lost.items()}
        kept = []
        for failure in self._failures:
            w = int(pool.worker_of[failure.env_id])
            if failure.kind == "env" and (w in reasons or budget.allows(len(reasons) + 1)):
                reasons.setdefault(w, (f"env {failure.env_id}: {failure.message}", failure.traceback_text))
                continue
            if failure.kind == "env":
                failure.message += budget.spent_note()
            kept.append(failure)
        self._failures = kept
        rows = self._rows
        for w, (text, trace) in sorted(reasons.items()):
            group = pool.group_ids[w]
            pool.replace(w)
            budget.spend(group.tolist(), text, trace)
            rows.rewards[group] = 0.0
            rows.terminations[group] = False
            rows.truncations[group] = False
            rows.restarted[group] = False
            self._restarted_dirty = True
            self._flight[group] = 0  # their async steps and resets went with the worker
            self._done[group] = False

    def _settled(self) -> bool:
        """Finish what interrupted fast commands owe; whether the synchronous paths may run (open, and
        nothing in flight: else the generic paths of BaseVectorEnv take the call)."""
        pool = self._pool
        if any(pool.owed):
            pool.settle_owed()
        return not self.closed and not any(pool.commands)

    def _step(self, actions: Any, env_ids: EnvIds) -> StepResult:
        if not self._settled():
            return super().step(actions, env_ids)
        ids = self._ids(env_ids)
        leaves = self.act_layout.batch_leaves(actions, ids.size)
        if env_ids is None:
            for row, leaf in zip(self._act_rows, leaves):
                row[...] = leaf
            infos = self._infos_of(self._pool.roundtrip(self._full_parts), None, self._pool.group_sizes)
            self._replace_failed()
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
        parts = self._pool.parts(STEP, ids, None)
        self._store_infos(parts, self._pool.roundtrip(parts))
        self._replace_failed()
        self._raise_failure()
        return self._gather_step(ids)

    def _reset(self, env_ids: EnvIds, seeds: Seeds, options: dict | None) -> ResetResult:
        if not self._settled():
            return super().reset(env_ids, seeds, options)
        ids = self._ids(env_ids)
        seed_list = normalize_seeds(seeds, ids.size)
        check_reset_options(options)
        parts = self._pool.parts(RESET, ids, (seed_list, options))
        self._store_infos(parts, self._pool.roundtrip(parts))
        self._replace_failed()
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
        seed_list = list(reset_seeds)
        given = [s for s in seed_list if s is not None]
        if not self._settled() or (given and not 0 <= min(given) <= max(given) < 2**63):
            # not in flight-free sync mode, or seeds that do not fit the shared int64 rows
            return super().step_reset(
                actions, env_ids, reset_seeds=seed_list, may_reset=may_reset, options=options
            )
        seeds = seed_list if len(given) == len(seed_list) else [-1 if s is None else s for s in seed_list]
        ids = self._ids(env_ids)
        leaves = self._step_reset_leaves(actions, ids, seeds, options)
        rows = self._rows
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
        self._seeds_written = None
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
            parts = self._pool.parts(STEP_RESET, ids, options)
        reset_infos: dict[int, dict[str, Any]] = {}
        infos = self._infos_of(self._pool.roundtrip(parts), reset_infos, [p[2].size for p in parts])
        self._replace_failed()
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
        collector's call, made without pipes (see vcollect.envs.subproc.transport). None when the seeds
        are not one int in [0, 2**63) per env, nor all None: the general path handles (or rejects) those."""
        if not self._post_step_reset_all(actions, reset_seeds):
            return None
        return self._settle_step_reset_all()

    def _post_step_reset_all(self, actions: Any, reset_seeds: Sequence[int | None]) -> bool:
        """Write the actions and reset plan of every env into the shared rows and announce the fast command;
        False (nothing sent) when the seeds are not one int in [0, 2**63) per env, nor all None."""
        pool = self._pool
        if any(pool.owed):
            pool.settle_owed()  # before any shared row is written: a worker may still be reading them
        seeds = reset_seeds if type(reset_seeds) is list else list(reset_seeds)
        if len(seeds) != self.num_envs:  # (one seed would broadcast to every row)
            return False
        rows = self._rows
        if seeds != self._seeds_written:  # the plan changes only when an episode ends
            if seeds.count(None) == len(seeds):
                mode = UNSEEDED
            else:
                mode = SEEDED
                try:
                    rows.reset_seed[:] = seeds  # raises for None and seeds from 2**63 on
                except (TypeError, ValueError, OverflowError):
                    self._seeds_written = None
                    return False
                if min(cast("list[int]", seeds)) < 0:
                    self._seeds_written = None
                    return False
            if self._rows_mode != mode:
                rows.reset_mode[...] = mode
                self._rows_mode = mode
            self._seeds_written = seeds.copy() if seeds is reset_seeds else seeds
        leaves = self.act_layout.batch_leaves(actions, self.num_envs)
        for row, leaf in zip(self._act_rows, leaves):
            row[...] = leaf
        if self._restarted_dirty:
            rows.restarted[...] = False
            self._restarted_dirty = False
        pool.post_step_reset_all()
        return True

    def _settle_step_reset_all(self) -> StepResetResult:
        """The result of the fast command ``_post_step_reset_all`` announced, once every worker answered."""
        pool = self._pool
        rows = self._rows
        replies, flags = pool.settle_step_reset_all()
        reset_infos: dict[int, dict[str, Any]] = {}
        if any(replies):
            infos = self._infos_of(replies, reset_infos, pool.group_sizes)
        else:
            infos = [{} for _ in range(self.num_envs)]
        if flags & REPLY_RESTARTED:
            self._restarted_dirty = True
        if self._restarting:
            self._replace_failed()
        if self._failures:
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

    def _infos_of(
        self, replies: Sequence[bytes | None], reset_infos: dict[int, dict[str, Any]] | None, sizes: Sequence[int]
    ) -> list[dict[str, Any]]:
        """The step or reset infos of synchronous replies covering ``sizes`` env ids each, in order (an
        empty reply: each of its envs' is {}); the failures they report are recorded, the infos of
        step-and-reset restarts put in ``reset_infos`` by env id."""
        if not any(replies):
            return [{} for _ in range(sum(sizes))]
        infos: list[dict[str, Any]] = []
        for reply, size in zip(replies, sizes):
            if not reply:
                infos += [{} for _ in range(size)]
                continue
            step_infos, failures, restart_infos = pickle.loads(reply)
            for env_id, kind, message, trace in failures:
                self._failures.append(EnvFailure(env_id, kind, message, trace))
            if reset_infos is not None:
                reset_infos.update(restart_infos)
            infos += step_infos
        return infos

    def _store_infos(self, parts: Sequence[tuple[int, bytes, np.ndarray]], replies: list[bytes]) -> None:
        """Keep the infos of the replies to parts as their env ids' infos."""
        groups = [group for _, _, group in parts]
        infos = self._infos_of(replies, None, [group.size for group in groups])
        for env_id, info in zip(np.concatenate(groups).tolist(), infos):
            self._infos[env_id] = info

    # -- async half ------------------------------------------------------------------------------
    def _check_idle(self, ids: np.ndarray) -> None:
        """Refuse an asynchronous call while a ``send_step_reset`` is under way, then the base class's check."""
        if self._split is not None:
            self._refuse_split()
        super()._check_idle(ids)

    def _dispatch_step(self, ids: np.ndarray, action_leaves: list[np.ndarray]) -> None:
        pool = self._pool
        if any(pool.owed):
            pool.settle_owed()
        for row, leaf in zip(self._act_rows, action_leaves):
            row[ids] = leaf
        if self._restarting:
            self._dispatch_losing(pool.parts(STEP, ids, None), STEP)
        else:
            pool.dispatch(pool.parts(STEP, ids, None), STEP)

    def _dispatch_reset(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> None:
        parts = self._pool.parts(RESET, ids, (seeds, options))
        if self._restarting:
            self._dispatch_losing(parts, RESET)
        else:
            self._pool.dispatch(parts, RESET)

    def _dispatch_losing(self, parts: list[Part], op: int) -> None:
        """Dispatch, a worker found dead on the way noted as lost (within the restart budget) rather than
        raised: its commands stay outstanding until the next wait replaces it."""
        pool = self._pool
        catching, budget = pool.catch_deaths, pool.lose_budget
        self._catch_deaths()
        try:
            pool.dispatch(parts, op)
        finally:
            pool.catch_deaths, pool.lose_budget = catching, budget

    def _handle_reply(self, w: int, command: PendingCommand, reply: bytes) -> None:
        """Record the results of worker w's reply to an async command (its oldest outstanding one)."""
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
                self._failures.append(EnvFailure(env_id, kind, message, trace))
                self._flight[env_id] = 0
        for pos, env_id in enumerate(command.ids.tolist()):
            if command.live[pos] and env_id not in failed:
                self._done[env_id] = True
                self._infos[env_id] = {} if infos is None else infos[pos]

    def _wait(self, timeout: float | None) -> None:
        self._pool.wait(timeout, self._handle_reply)

    def _wait_received(self, timeout: float | None) -> None:
        """``_wait`` for recv/recv_reset; with restarts, the workers that died or whose envs raised meanwhile are
        replaced (within the budget) and their env ids' steps and resets in flight dropped."""
        if not self._restarting:
            self._pool.wait(timeout, self._handle_reply)
            return
        pool = self._pool
        self._catch_deaths()
        try:
            pool.wait(timeout, self._handle_reply, lose=True)
        finally:
            pool.catch_deaths = False
        self._replace_failed()

    def _discard(self, ids: np.ndarray) -> None:
        super()._discard(ids)
        self._pool.discard(ids)

    def _timed_out(self, running: list[int], what: str) -> NoReturn:
        self._pool.timed_out(running, what)

    # -- rest of the API ------------------------------------------------------------------------
    def render(self) -> list[Any] | None:
        """Render every env.

        Returns:
            One render() result per env; None when every env returned None.

        Raises:
            CollectorStateError: The vector env is closed.
        """
        self._check_open()
        if self._split is not None:
            self._refuse_split()
        pool = self._pool
        self._render_results = {}
        message = pickle.dumps((RENDER, (), None))
        pool.dispatch([(w, message, np.zeros(0, np.int64)) for w in range(self.num_workers)], RENDER)
        while len(self._render_results) < self.num_workers:
            self._wait(None)
        frames = [f for w in range(self.num_workers) for f in self._render_results[w]]
        self._render_results = {}
        return None if all(f is None for f in frames) else frames

    def _attr_replies(self, ids: list[int], name: str, write: bool, value: Any) -> list[AttrReply]:
        """One ATTR command per worker holding some of ids; bounded by ``timeout`` like a step."""
        if self._split is not None:
            self._refuse_split()
        pool = self._pool
        if any(pool.owed):
            pool.settle_owed()
        parts = pool.parts(ATTR, np.asarray(ids, np.int64), (name, write, value))
        by_id: dict[int, AttrReply] = {}
        owed: list[int] = []  # workers sent the command whose replies are not read yet
        what = "set_env_attr" if write else "get_env_attr"
        pool.begin(what)
        try:
            while any(pool.commands):  # answers an interrupted call left unread (nothing is in flight)
                if pool.deadline is not None and time.monotonic() > pool.deadline:
                    running = [int(g[0]) for g, q in zip(pool.group_ids, pool.commands) if q]
                    pool.timed_out(running, what)
                self._wait(LIVENESS_POLL_S)
            for w, message, _ in parts:
                pool.send(w, message)
                owed.append(w)
            for w, _, group in parts:
                replies = pickle.loads(pool.recv(w, group))
                owed.pop(0)
                by_id.update(zip(group.tolist(), replies))
        except BaseException:
            pool.expect_unread(owed, ATTR)  # later waits read (and drop) the replies still owed
            raise
        finally:
            pool.finish()
        return [by_id[i] for i in ids]

    def close(self) -> None:
        """Stop the workers (politely, then by force) and release shared memory; idempotent."""
        if self.closed:
            return
        self.closed = True
        # drop the views of the shared rows before the pool unmaps them
        self._obs_rows, self._act_rows = [], []
        self._rewards = np.zeros(self.num_envs, np.float64)
        self._terminations = np.zeros(self.num_envs, bool)
        self._truncations = np.zeros(self.num_envs, bool)
        self._rows = None  # type: ignore[assignment]
        self._pool.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _closer(ref: weakref.ref[SubprocVectorEnv]) -> Callable[[], None]:
    """What the pool calls to close its vector env (by weak reference: the env's lifetime stays its own)."""

    def close() -> None:
        envs = ref()
        if envs is not None:
            envs.close()

    return close
