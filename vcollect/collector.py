"""Collector: drive N environments with a policy for exactly n steps or exactly n episodes.

The loop is the data flow of DESIGN.md section 3: observations of the ready envs go to the policy,
its actions to ``envs.step(actions, env_ids)``, the results into one ring per env id, and every
finished episode (one contiguous ring slice) to the store before the env is reset with the next seed
of its env id's stream (vcollect.reset_seeds). Backends that can (``step_reset``) restart an ended env
inside the step that ended it, saving a call (a round trip to a worker process) per ended episode.
Backends that step every env and restart finished ones on their next step (NEXT_STEP: gymnasium vector
entry points, EnvPool) stage up to 64 steps in a StepBlock and record them at once (``_collect_blocks``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from vcollect.buffers import EpisodeEnds, VectorRingBuffer
from vcollect.envs import (
    AllEnvStep,
    DummyVectorEnv,
    EnvPoolVectorEnv,
    GymnasiumVectorEnv,
    StepResetResult,
    VectorEnv,
    is_envpool,
)
from vcollect.envs.info_recording import InfoRecordingEnv
from vcollect.envs.steps import StepBlock
from vcollect.errors import ActionError, CollectorStateError, ObservationError
from vcollect.ledger import TransitionLedger
from vcollect.policies import Policy, RandomPolicy
from vcollect.policy_state import put_state_rows, take_state_rows
from vcollect.reset_seeds import ResetSeeds
from vcollect.spaces import BatchCheck, flatten_batch, leaves, unflatten_batch
from vcollect.stats import CollectStats

DEFAULT_BUFFER_ROWS = 20_000
"""Rows of ring buffer made when none is given, split evenly between the envs."""

WRITE_BATCH = 64
"""Finished episodes a collector gathers from its rings before handing them to a store that takes batches."""

BLOCK_STEPS = 64
"""Steps of a NEXT_STEP all-env backend staged in a StepBlock before they go to the rings, ledger and store."""

BLOCK_BYTES = 4 << 20
"""Most bytes of observations a StepBlock holds (large observations make shorter blocks)."""


def as_vector_env(envs: Any) -> VectorEnv:
    """Accept a VectorEnv, a gymnasium vector env, an EnvPool pool, one gymnasium.Env, or a list of env factories."""
    if isinstance(envs, VectorEnv):
        return envs
    if is_envpool(envs):
        return EnvPoolVectorEnv(envs)
    if isinstance(envs, gym.vector.VectorEnv):
        return GymnasiumVectorEnv(envs)
    if isinstance(envs, gym.Env):
        env = envs
        return DummyVectorEnv([lambda: env])
    if isinstance(envs, Sequence) and envs and all(callable(fn) for fn in envs):
        return DummyVectorEnv(list(envs))
    raise TypeError(
        "envs must be a vcollect VectorEnv, a gymnasium vector env, a gymnasium.Env or a non-empty "
        f"list of zero-argument env factories; got {type(envs).__name__}"
    )


@dataclass
class CollectCall:
    """What one ``collect`` call was asked for, and the episode returns/lengths it reports."""

    random: bool
    render: float | None
    reset_options: dict[str, Any] | None
    bar: tqdm
    returns: list[float] = field(default_factory=list)
    lens: list[int] = field(default_factory=list)


class Collector:
    """Collect exact numbers of steps or episodes from a vector env into per-env ring buffers.

    ``policy`` is called as ``policy(obs_batch, state) -> (actions, state)`` on the ready envs only.
    With a ``store`` (an object with ``write_episode(...)``, e.g. ``EpisodeStore``) every completed
    episode is written whole, with the seed of its reset and its env id. ``seed`` seeds the
    generator behind every reset's seed (one stream per env id) and the actions of
    ``collect(random=True)``, so the same seed gives bit-identical data on every backend.

    Backends that step every env at once (``steps_all_envs``, e.g. a gymnasium vector env) are stepped
    whole; transitions beyond the requested count are recorded and stored at once and reported by the
    next call (``pending_transitions``). Episodes an env restarts by itself, or whose reset the backend
    cannot seed (``seeded_resets`` False, e.g. EnvPool), are stored with ``seed=None``. Where such a
    backend restarts envs on their next step (``steps_in_blocks``), ``collect`` records its steps in
    blocks (vcollect.buffers.StepBlock; not while rendering): the rings lag behind the envs by up to a
    block while a call runs, never after it returns.

    ``seed_every_reset=False`` seeds only each env's first reset (after construction or ``reset(seed=...)``);
    later episodes continue the env's own generator, as Tianshou's and Minari's collectors reset, and are
    stored with ``seed=None``: the data is still reproducible from ``seed`` as a whole, but an episode can
    no longer be replayed alone by its seed. It saves gymnasium's new generator per reset (about 10 us).
    """

    #: whether this class keeps enough envs in flight for backends that return results in fixed-size batches
    handles_batched_recv = False

    def __init__(
        self,
        policy: Policy | Callable[..., Any] | None,
        envs: Any,
        buffer: VectorRingBuffer | None = None,
        store: Any | None = None,
        *,
        seed: int | None = None,
        exploration_noise: bool = False,
        validate: bool = True,
        record_infos: bool = False,
        seed_every_reset: bool = True,
    ) -> None:
        self.envs: VectorEnv = as_vector_env(envs)
        self.seed_every_reset = seed_every_reset
        self.record_infos = record_infos
        if record_infos:
            if getattr(self.envs, "steps_all_envs", False) or getattr(self.envs, "autoresets", False):
                raise ValueError(
                    f"record_infos needs a backend that steps and resets each env on request; "
                    f"{type(self.envs).__name__} steps all envs at once or resets them by itself"
                )
            self.envs = InfoRecordingEnv(self.envs)  # type: ignore[assignment]
        recv_batch = int(getattr(self.envs, "recv_batch_size", 1))
        if recv_batch > 1 and not self.handles_batched_recv:
            raise ValueError(
                f"{type(self.envs).__name__} returns results {recv_batch} at a time (async mode): collect "
                "from it with AsyncCollector, or make it in sync mode (batch_size=num_envs)"
            )
        self.policy = policy
        self.num_envs = self.envs.num_envs
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        if buffer is None:
            capacity = max(2, DEFAULT_BUFFER_ROWS // self.num_envs)
            buffer = VectorRingBuffer(
                self.num_envs,
                capacity,
                self.observation_space,
                self.action_space,
                keep_overflow=store is not None,
            )
        elif buffer.num_envs != self.num_envs:
            raise ValueError(
                f"buffer has {buffer.num_envs} env rings but the collector has {self.num_envs} envs; "
                "make the VectorRingBuffer with num_envs equal to envs.num_envs"
            )
        self.buffer = buffer
        self.store = store
        self.exploration_noise = exploration_noise
        self.validate = validate
        self._reseed(seed)
        self._action_leaves = leaves(self.action_space)
        self._obs_check = BatchCheck(self.observation_space)
        self._action_check = BatchCheck(self.action_space)
        self._state: Any = None
        self._obs_cache: list[np.ndarray] | None = None
        self._obs_cache_owned = False  # the cache's arrays are ours alone (not yet handed to the policy)
        self._needs_reset = np.ones(self.num_envs, dtype=bool)
        self._seeds: list[int | None] = [None] * self.num_envs
        self._options: list[dict[str, Any] | None] = [None] * self.num_envs
        self._described = False  # whether some env's seed or options were ever set (not None)
        self._was_reset = False
        self._closed = False
        self._next_env = 0
        self._all_ids = np.arange(self.num_envs)
        self._all_ids.flags.writeable = False
        self._steps_all = bool(getattr(self.envs, "steps_all_envs", False))
        self._autoresets = bool(getattr(self.envs, "autoresets", False))
        self._seeded_resets = bool(getattr(self.envs, "seeded_resets", True))
        self._carry = TransitionLedger(self.num_envs)
        self._trusted_actions = False  # set per collect() call: see _policy_in_space
        # Finished episodes not yet given to the store (env id, last ring row, steps, seed, options), for
        # stores with write_episodes: their rows stay in the rings until _write_queued gathers them at once.
        self._queued: list[tuple[int, int, int, int | None, dict[str, Any] | None]] = []
        self._records = 0  # calls of _record/_step_all_envs: between two, an env writes at most 2 ring rows
        self._write_by: int | None = None  # the _records count at which the queue must be written
        self._batch_writes = hasattr(store, "write_episodes") and not record_infos
        # n_step collection from a NEXT_STEP all-env backend stages its steps (see _collect_blocks); a store
        # must take batches, as episodes are queued from the rows the block wrote
        self._blocks = (
            self._steps_all
            and bool(getattr(self.envs, "steps_in_blocks", False))
            and (store is None or self._batch_writes)
        )
        self._block: StepBlock | None = None
        step_reset = getattr(self.envs, "step_reset", None)
        self._step_reset: Callable[..., StepResetResult] | None = None if self._steps_all else step_reset

    def _reseed(self, seed: int | None) -> None:
        """(Re)make the generator, the per-env reset seed streams and the random policy from ``seed``."""
        self._rng = np.random.default_rng(seed)
        self._reset_seeds = ResetSeeds(
            self.num_envs, int(self._rng.integers(0, 2**63)), every_reset=self.seed_every_reset
        )
        self._random_policy = RandomPolicy(self.action_space, seed=int(self._rng.integers(0, 2**63)))

    @property
    def pending_transitions(self) -> int:
        """Transitions already recorded (and stored) that the next collect() call will report first."""
        return len(self._carry)

    # ------------------------------------------------------------------ lifecycle

    def reset(self, seed: int | None = None, *, reset_buffer: bool = True, options: dict[str, Any] | None = None) -> None:
        """Reset every env (each with a seed from the generator) and, by default, the buffer.

        ``seed`` re-seeds the collector's generator first. Unfinished episodes are discarded.
        """
        self._check_open()
        self._write_queued()
        if seed is not None:
            self._reseed(seed)
        if reset_buffer:
            self.buffer.reset()
        self._state = None
        self._obs_cache = None
        self._reset_envs(np.arange(self.num_envs), options)
        self._was_reset = True

    def close(self) -> None:
        """Close the envs and flush the store; later calls raise CollectorStateError."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write_queued()
            if self.store is not None and hasattr(self.store, "flush"):
                self.store.flush()
        finally:
            self.envs.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ collect

    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        *,
        random: bool = False,
        reset_before_collect: bool = False,
        progress: bool = False,
        render: float | None = None,
        reset_options: dict[str, Any] | None = None,
    ) -> CollectStats:
        """Collect exactly ``n_step`` transitions or exactly ``n_episode`` whole episodes.

        ``n_step``: the last batch steps only as many envs as still needed; unfinished episodes
        carry over to the next call. ``n_episode``: each env gets a quota (n // N or one more, the
        extra ones given to randomly chosen envs), every episode started in the call is finished
        and kept, and envs that met their quota idle. ``random=True`` samples actions from the
        action space instead of calling the policy. ``render=t`` renders and sleeps t seconds
        after each step. ``reset_options`` go to every env reset in this call.
        """
        self._check_open()
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step or n_episode to collect()")
        target = n_step if n_step is not None else n_episode
        if not isinstance(target, (int, np.integer)) or isinstance(target, bool) or target < 1:
            raise ValueError(f"n_step / n_episode must be a positive integer, got {target!r}")
        if not random and self.policy is None:
            raise ValueError("this collector has no policy: pass one, or call collect(random=True)")
        if reset_before_collect:
            self.reset(options=reset_options)
        elif not self._was_reset:
            raise CollectorStateError(
                "collect() called before any reset: call collector.reset() first or pass "
                "reset_before_collect=True"
            )

        self._trusted_actions = self._policy_in_space()
        start = time.perf_counter()
        bar = tqdm(total=int(target), unit="step" if n_step is not None else "ep", disable=not progress)
        call = CollectCall(random, render, reset_options, bar)
        returns, lens = call.returns, call.lens
        try:
            if n_step is not None:
                steps = self._collect_steps(int(n_step), call)
            else:
                steps = self._collect_episodes(int(target), call)
        finally:
            try:
                bar.close()
            finally:
                self._write_queued()  # every episode finished in the call reaches the store, even on an error
        return CollectStats(
            n_collected_steps=steps,
            n_collected_episodes=len(returns),
            collect_time=time.perf_counter() - start,
            returns=np.asarray(returns, dtype=np.float64),
            lens=np.asarray(lens, dtype=np.int64),
        )

    def _collect_steps(
        self,
        n_step: int,
        call: CollectCall,
    ) -> int:
        if self._steps_all:
            return self._collect_all_env_steps(n_step, None, call)
        all_ids = self._all_ids
        self._reset_pending(all_ids, call.reset_options)
        collected = 0
        while collected < n_step:
            remaining = n_step - collected
            if remaining >= self.num_envs:
                ready = all_ids
            else:
                # Rotate which envs take the last partial batch so no env id is favoured.
                ready = np.sort((self._next_env + np.arange(remaining)) % self.num_envs)
                self._next_env = (self._next_env + remaining) % self.num_envs
            self._step(ready, call, None)
            collected += len(ready)
            call.bar.update(len(ready))
        return collected

    def _collect_episodes(
        self,
        n_episode: int,
        call: CollectCall,
    ) -> int:
        quota = self._episode_quota(n_episode)
        if self._steps_all:
            return self._collect_all_env_steps(None, quota, call)
        self._reset_pending(np.flatnonzero(quota > 0), call.reset_options)
        collected = 0
        while True:
            ready = np.flatnonzero(quota > 0)
            if ready.size == self.num_envs:
                ready = self._all_ids  # the object _record recognises as "every env, in order"
            if ready.size == 0:
                return collected
            finished = self._step(ready, call, quota[ready] > 1)
            collected += len(ready)
            if finished.size:
                call.bar.update(finished.size)
                quota[finished] -= 1

    def _episode_quota(self, n_episode: int) -> np.ndarray:
        """Episodes each env owes: n // N, plus one for n % N envs drawn at random."""
        quota = np.full(self.num_envs, n_episode // self.num_envs, dtype=np.int64)
        extra = n_episode % self.num_envs
        if extra:
            quota[self._rng.choice(self.num_envs, size=extra, replace=False)] += 1
        return quota

    def _collect_all_env_steps(
        self,
        n_step: int | None,
        quota: np.ndarray | None,
        call: CollectCall,
    ) -> int:
        """Collect from a backend that steps every env at once: every transition goes into the ledger, and
        the call reports n_step of them (or each env's transitions up to its quota-th episode end); the
        rest are reported by later calls."""
        carry = self._carry
        if not self._autoresets:
            self._reset_pending(self._all_ids, call.reset_options)
        if self._blocks and call.render is None:
            return self._collect_blocks(n_step, quota, call)
        if n_step is not None:
            held = len(carry)
            while held < n_step:
                self._step_all_envs(call.random, call.render, call.reset_options)
                now = len(carry)
                call.bar.update(min(now, n_step) - held)
                held = now
            return carry.take_steps(n_step, call.returns, call.lens)
        assert quota is not None
        shown = self._progress(0, quota)
        while (carry.episode_ends < quota).any():
            self._step_all_envs(call.random, call.render, call.reset_options)
            shown = self._progress(0, quota, call.bar, shown)
        return carry.take_episodes(quota, call.returns, call.lens)[0]

    def _collect_blocks(self, n_step: int | None, quota: np.ndarray | None, call: CollectCall) -> int:
        """_collect_all_env_steps for a backend that writes its steps into a StepBlock (``step_into``): per
        step only the env's step and a row copy of each array; the rings, the ledger, the store and (with
        random actions) the observation checks take the block at once. Stops after the same step as the
        per-step path; every staged step is recorded before this returns, also when it raises."""
        carry, all_ids, random, n = self._carry, self._all_ids, call.random, self.num_envs
        block = self._block
        if block is None:
            step_bytes = n * sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves(self.observation_space))
            size = max(1, min(BLOCK_STEPS, self.buffer.capacity - 1, BLOCK_BYTES // max(1, step_bytes)))
            block = self._block = StepBlock(n, size, self.observation_space, self.action_space)
        size = block.size
        single_action = len(block.actions) == 1
        # n_step: transitions recorded (the block's are counted only when they might be enough);
        # n_episode: episodes each env still owes, less those ending in the block
        by_steps, goal = n_step is not None, n_step or 0
        held = len(carry)
        owed = np.zeros(0, np.int64) if quota is None else quota - carry.episode_ends
        done = self._progress(goal, quota)
        room = max(1, min(size, self.buffer.steps_room()))  # steps the rings take at once (else: per step)
        try:
            while held < goal if by_steps else bool((owed > 0).any()):
                actions = self._choose_actions(all_ids, random)
                k = block.count
                self.envs.step_into(actions, block)  # type: ignore[attr-defined]
                if single_action:
                    block.actions[0][k] = actions
                else:
                    for leaf, value in zip(block.actions, flatten_batch(self.action_space, actions)):
                        leaf[k] = value
                if not random:  # the policy acts next on these observations: checked now, not with the block
                    self._block_row_for_policy(block, k)
                if not by_steps:
                    owed -= block.done[k]
                if block.count == room:
                    self._flush_block(block, random)
                    done = self._progress(goal, quota, call.bar, done)
                    held = len(carry)
                    if not by_steps:
                        owed = quota - carry.episode_ends
                    room = max(1, min(size, self.buffer.steps_room()))
                elif by_steps and held + (k + 1) * n >= goal and held + block.transitions() >= goal:
                    break  # (every row a transition would not be enough: no need to count them before)
        finally:
            self._flush_block(block, random)
        self._progress(goal, quota, call.bar, done)
        if random:  # random actions read no observations: the policy, when it acts, reads the rings' last rows
            self._obs_cache = None
        if quota is None:
            return carry.take_steps(goal, call.returns, call.lens)
        return carry.take_episodes(quota, call.returns, call.lens)[0]

    def _progress(self, n_step: int, quota: np.ndarray | None, bar: Any = None, shown: int = 0) -> int:
        """What the progress bar counts of what is recorded (steps up to n_step, or with quotas the
        episodes within them), for the all-env loops; with a bar, moves it on from ``shown``."""
        carry = self._carry
        now = min(len(carry), n_step) if quota is None else int(np.minimum(carry.episode_ends, quota).sum())
        if bar is not None:
            bar.update(now - shown)
        return now

    def _block_row_for_policy(self, block: StepBlock, k: int) -> None:
        """Check row k's observations and make them the policy's next input; restarted envs' policy state
        is reset now (their seeds are cleared when the block is recorded)."""
        if self.validate:
            self._check_obs(block.obs_row(k), self._all_ids, "an observation")
            block.checked = k + 1
        restarted = block.restart_row(k).nonzero()[0]
        if restarted.size and self._state is not None and hasattr(self.policy, "reset_state"):
            self._state = self.policy.reset_state(self._state, restarted)  # type: ignore[union-attr]
        self._obs_cache = [leaf[k] for leaf in block.obs]  # views: a policy's block is renewed, not written over
        self._obs_cache_owned = False

    def _flush_block(self, block: StepBlock, random: bool) -> None:
        """Record the block's steps (rings, ledger, store) and empty it. Observations not checked yet are
        checked first: the steps before the first bad one are recorded, then ObservationError."""
        k = block.count
        if k == 0:
            return
        bad = None
        if self.validate and block.checked < k and self._obs_check(block.obs_rows(block.checked, k)) is not None:
            bad = next(j for j in range(block.checked, k) if self._obs_check(block.obs_row(j)) is not None)
            k = bad
        bad_obs = None if bad is None else block.obs_row(bad)
        try:
            if k and self.buffer.can_add_steps(k):
                self._record_block(block, k, random)
            else:  # an episode spilled or may spill out of its ring: the per-step path handles that
                restarts = block.restarts(k)
                for j in range(k):
                    self._record_all_envs(
                        unflatten_batch(self.action_space, [leaf[j] for leaf in block.actions]),
                        _block_step(block, j, restarts[j]),
                        True,
                        None,
                        None,
                        policy_state=random,
                    )
        finally:
            if random:
                block.clear()
            else:  # the policy may still hold views of the rows
                block.renew()
        if bad_obs is not None:
            self._check_obs(bad_obs, self._all_ids, "an observation")

    def _record_block(self, block: StepBlock, k: int, random: bool) -> None:
        """The first k steps of the block into the rings (one write per array), the ledger and the store.
        With a policy (not ``random``), restarted envs' policy state was reset step by step already."""
        if self._write_by is not None and self._records + k >= self._write_by:
            self._write_queued()  # the block's rows could reach queued episodes' rows
        self._records += k
        restarts = block.restarts(k)
        ends = self.buffer.add_steps(
            [leaf[:k] for leaf in block.actions],
            block.rewards[:k],
            block.terminations[:k],
            block.truncations[:k],
            [leaf[:k] for leaf in block.obs],
            restarts,
        )
        restarted = np.flatnonzero(restarts.any(axis=0))
        self._carry.push_rows(~restarts if restarted.size else None, ends.mask, ends.returns, ends.lengths)
        if self.store is not None and ends.env_ids.size:
            self._queue_block_episodes(ends, restarts, k)
        if restarted.size:
            self._self_started(restarted, policy_state=random)

    def _queue_block_episodes(self, ends: EpisodeEnds, restarts: np.ndarray, k: int) -> None:
        """Queue the episodes that ended in a recorded block for the store, in order. All are whole in the
        rings (VectorRingBuffer.can_add_steps); those the next rounds of writes could reach are written now."""
        steps = ends.steps
        # an env's episodes after its first restart in the block were started by the env: no seed, no options
        own = ((np.cumsum(restarts, axis=0) - restarts)[steps, ends.env_ids] == 0).tolist()
        # rounds of writes (2 rows each, as in _write_episode) before an episode's first row could be reached,
        # less the rows its env wrote after it within the block
        rounds = ((self.buffer.capacity - ends.lengths - 2 - (k - 1 - steps)) // 2).tolist()
        seeds, options, queued = self._seeds, self._options, self._queued
        for env_id, last_row, length, first, left in zip(
            ends.env_ids.tolist(), ends.last_rows.tolist(), ends.lengths.tolist(), own, rounds
        ):
            queued.append((env_id, last_row, length, seeds[env_id] if first else None, options[env_id] if first else None))
            deadline = self._records + max(left, 0)
            self._write_by = deadline if self._write_by is None else min(self._write_by, deadline)
        if len(queued) >= WRITE_BATCH or self._write_by <= self._records:  # type: ignore[operator]
            self._write_queued()

    # ------------------------------------------------------------------ one vector step

    def _step(self, env_ids: np.ndarray, call: CollectCall, may_reset: np.ndarray | None) -> np.ndarray:
        """Act, step and record for ``env_ids`` (ascending); write finished episodes and restart them, except
        where ``may_reset`` (a bool per env id; None: all True) is False. Returns the finished env ids."""
        actions = self._choose_actions(env_ids, call.random)
        ids_arg = None if len(env_ids) == self.num_envs else env_ids
        if self._step_reset is None:
            next_obs, rewards, terms, truncs, _infos = self.envs.step(actions, ids_arg)
            finished = self._record(env_ids, actions, next_obs, rewards, terms, truncs, call.render, call.returns, call.lens)
            restart = finished if may_reset is None else finished[may_reset[np.searchsorted(env_ids, finished)]]
            if restart.size:
                self._reset_envs(restart, call.reset_options)
            return finished
        result = self._step_reset(
            actions,
            ids_arg,
            reset_seeds=self._reset_seeds.upcoming(env_ids.tolist()),
            may_reset=may_reset,
            options=call.reset_options,
        )
        obs = result.obs
        finished = self._record(
            env_ids, actions, obs, result.rewards, result.terminations, result.truncations, call.render,
            call.returns, call.lens, remember=False,
        )
        restarted = result.reset_ids
        if restarted.size:
            seeds = self._reset_seeds.take(restarted.tolist())
            self._start_episodes(
                restarted, result.reset_obs, seeds if self._seeded_resets else [None] * restarted.size,
                call.reset_options, remember=False,
            )
            if not call.random:
                # The policy acts next on the restarted envs' first observations: put them in the (fresh) rows.
                rows = restarted if ids_arg is None else np.searchsorted(env_ids, restarted)
                obs_leaves = flatten_batch(self.observation_space, obs)
                for leaf, first in zip(obs_leaves, flatten_batch(self.observation_space, result.reset_obs)):
                    leaf[rows] = first
        if call.random:  # random actions read no observations: the policy, when it acts, reads the rings' last rows
            self._obs_cache = None
        else:
            self._remember_obs(env_ids, obs, owned=True)
        return finished

    def _choose_actions(self, env_ids: np.ndarray, random: bool) -> Any:
        """Actions for env_ids' latest observations: the policy's (checked), or random ones."""
        if random:
            # RandomPolicy samples inside the action space by construction: nothing to check.
            return self._random_policy.sample(len(env_ids))
        obs = self._current_obs(env_ids)
        actions = self._act(obs, env_ids)
        if self.validate and not self._trusted_actions:
            actions = self._checked_actions(actions, env_ids)
        return actions

    def _policy_in_space(self) -> bool:
        """Whether the policy vouches that its actions lie in the env's action space (see
        vcollect.policies.base), so that checking them again would be wasted work."""
        policy = self.policy
        if not getattr(policy, "actions_in_space", False) or (
            self.exploration_noise and hasattr(policy, "add_exploration_noise")
        ):
            return False
        return getattr(policy, "action_space", None) == self.action_space

    def _record(
        self,
        env_ids: np.ndarray,
        actions: Any,
        next_obs: Any,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        render: float | None,
        returns: list[float],
        lens: list[int],
        *,
        check: bool = True,
        remember: bool = True,
    ) -> np.ndarray:
        """Record one step of env_ids into the rings; write finished episodes; return their env ids.

        ``remember=False``: the caller updates the latest observations itself."""
        self._before_ring_writes()
        if check and self.validate:
            self._check_obs(next_obs, env_ids, "an observation")
        if env_ids is self._all_ids:  # every env, in order: one write per array
            self.buffer.add_all(actions, rewards, terminations, truncations, next_obs)
        else:
            self.buffer.add(env_ids, actions, rewards, terminations, truncations, next_obs)
        if remember:
            self._remember_obs(env_ids, next_obs)
        if render is not None:
            self.envs.render()
            time.sleep(render)
        done = terminations | truncations
        if not np.count_nonzero(done):  # count_nonzero: a C call, several times cheaper than .any()
            return env_ids[:0]
        finished = env_ids[done]
        returns.extend(self.buffer.episode_returns[finished].tolist())
        lens.extend(self.buffer.episode_lengths[finished].tolist())
        if self.store is not None:
            for env_id in finished.tolist():
                self._write_episode(env_id)
        self._needs_reset[finished] = True
        return finished

    def _step_all_envs(self, random: bool, render: float | None, reset_options: dict[str, Any] | None) -> None:
        """One step of a backend that steps every env at once (see GymnasiumVectorEnv.step_all): every
        transition is recorded and held in the ledger; episodes the env restarted itself start with seed None.

        Every row goes to the rings in one write (VectorRingBuffer.add_all), NEXT_STEP restart rows as the
        first observations of their episodes, so no row is gathered or copied per subset of envs.
        """
        actions = self._choose_actions(self._all_ids, random)
        step = self.envs.step_all(actions)  # type: ignore[attr-defined]
        self._record_all_envs(actions, step, random, render, reset_options)

    def _record_all_envs(
        self,
        actions: Any,
        step: AllEnvStep,
        random: bool,
        render: float | None,
        reset_options: dict[str, Any] | None,
        *,
        policy_state: bool = True,
    ) -> None:
        """Record one step_all step: rings, ledger, store, restarts (see _step_all_envs); ``policy_state``
        False where the restarted envs' policy state was reset already."""
        all_ids = self._all_ids
        self._before_ring_writes()
        obs, started, transitions = step.obs, step.started, step.transitions
        if self.validate:  # once for every row (first observations of restarted episodes included)
            self._check_obs(obs, all_ids, "an observation")
            if step.next_obs is not obs:
                self._check_obs(step.next_obs, all_ids, "a final observation")
        if transitions is None:  # every row is a transition (SAME_STEP restarts are started below)
            self.buffer.add_all(actions, step.rewards, step.terminations, step.truncations, step.next_obs)
        else:  # NEXT_STEP: the other rows are the restarts of the envs in `started`
            self.buffer.add_all(
                actions, step.rewards, step.terminations, step.truncations, obs, started, transitions
            )
        if render is not None:
            self.envs.render()
            time.sleep(render)
        ended = step.ended
        finished = ended.nonzero()[0]
        if finished.size:
            if self.store is not None:
                for env_id in finished.tolist():
                    self._write_episode(env_id)
            if not self._autoresets:  # envs that restart by themselves never wait for a reset
                self._needs_reset[finished] = True
        self._carry.push_rows(
            transitions,
            ended,
            self.buffer.episode_returns[finished],
            self.buffer.episode_lengths[finished],
        )
        if started.size:
            if transitions is None:
                first = unflatten_batch(
                    self.observation_space, [leaf[started] for leaf in flatten_batch(self.observation_space, obs)]
                )
                self._start_episodes(started, first, [None] * started.size, None, check=False, remember=False)
            else:
                self._self_started(started, policy_state=policy_state)
        if random:  # random actions read no observations: the policy, when it acts, reads the rings' last rows
            self._obs_cache = None
        else:
            self._remember_obs(all_ids, obs)
        if finished.size and not self._autoresets:
            self._reset_envs(finished, reset_options)

    def _self_started(self, env_ids: np.ndarray, *, policy_state: bool = True) -> None:
        """Bookkeeping for episodes an env started by itself whose first rows are already in the rings: no
        seed or options (not replayable by seed), the policy's state reset (unless done already)."""
        if self._described:  # else every env's seed and options are None already
            for env_id in env_ids.tolist():
                self._seeds[env_id] = None
                self._options[env_id] = None
        if policy_state and self._state is not None and hasattr(self.policy, "reset_state"):
            self._state = self.policy.reset_state(self._state, env_ids)  # type: ignore[union-attr]

    def _current_obs(self, env_ids: np.ndarray) -> Any:
        """The latest observation of each env id: from the cache when it holds them, else the ring."""
        cache = self._obs_cache
        if cache is None:
            return self.buffer.last_obs(env_ids)
        if len(env_ids) == self.num_envs:
            self._obs_cache_owned = False
            return unflatten_batch(self.observation_space, cache)
        return unflatten_batch(self.observation_space, [leaf[env_ids] for leaf in cache])

    def _remember_obs(self, env_ids: np.ndarray, obs: Any, *, owned: bool = False) -> None:
        """Keep the newest observations of all envs without reading them back from the ring.

        Arrays handed to the policy, or that the caller may still hold (``owned`` False), are never written
        to afterwards: their rows are replaced copy-on-write.
        """
        new = flatten_batch(self.observation_space, obs)
        if len(env_ids) == self.num_envs:
            self._obs_cache = new  # fresh arrays from the env, in env id order
            self._obs_cache_owned = owned
        elif self._obs_cache is not None:
            merged = self._obs_cache if self._obs_cache_owned else [leaf.copy() for leaf in self._obs_cache]
            for leaf, rows in zip(merged, new):
                leaf[env_ids] = rows
            self._obs_cache = merged
            self._obs_cache_owned = True

    def _act(self, obs: Any, env_ids: np.ndarray) -> Any:
        policy = self.policy
        assert policy is not None
        state_in = take_state_rows(self._state, env_ids, self.num_envs)
        result = policy(obs, state_in)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ActionError(
                f"policy {type(policy).__name__} returned {type(result).__name__}; a vcollect policy "
                "returns (actions, state); wrap a plain function as lambda obs, state: (fn(obs), None)"
            )
        actions, state_out = result
        if state_out is not None:
            self._state = put_state_rows(self._state, env_ids, state_out, self.num_envs)
        if self.exploration_noise and hasattr(policy, "add_exploration_noise"):
            actions = policy.add_exploration_noise(actions, obs)
        return actions

    def _checked_actions(self, actions: Any, env_ids: np.ndarray) -> Any:
        if not isinstance(actions, (dict, tuple)):
            actions = np.asarray(actions)
        try:
            flat = flatten_batch(self.action_space, actions)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise ActionError(
                f"policy returned actions of structure {type(actions).__name__} that do not match the "
                f"action space {self.action_space}: {exc}"
            ) from exc
        for leaf, array in zip(self._action_leaves, flat):
            expected = (len(env_ids), *leaf.shape)
            if np.shape(array) != expected:
                where = f" at '{leaf.name}'" if leaf.name else ""
                raise ActionError(
                    f"policy returned actions of shape {np.shape(array)}{where} for {len(env_ids)} ready envs; "
                    f"expected {expected} (one action of shape {leaf.shape} per ready env)"
                )
        problem = self._action_check(actions)
        if problem is not None:
            raise ActionError(
                f"policy returned actions outside the action space {self.action_space} for envs "
                f"{env_ids.tolist()}: {problem}"
            )
        return actions

    # ------------------------------------------------------------------ resets and the store

    def _reset_pending(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        pending = env_ids[self._needs_reset[env_ids]]
        if pending.size:
            self._reset_envs(pending, options)

    def _reset_envs(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        seeds = self._reset_seeds.take(env_ids.tolist())
        obs, _infos = self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)
        self._start_episodes(env_ids, obs, seeds if self._seeded_resets else [None] * len(seeds), options)

    def _start_episodes(
        self,
        env_ids: np.ndarray,
        obs: Any,
        seeds: Sequence[int | None],
        options: dict[str, Any] | None,
        *,
        check: bool = True,
        remember: bool = True,
    ) -> None:
        """Begin new episodes for env_ids from their first observations (seed None: not replayable by seed)."""
        if check and self.validate:
            self._check_obs(obs, env_ids, "a reset observation")
        self.buffer.start_episodes(env_ids, obs)
        if remember:
            self._remember_obs(env_ids, obs)
        for env_id, seed in zip(env_ids.tolist(), seeds):
            self._seeds[env_id] = seed
            self._options[env_id] = options
        if not self._described and (options is not None or any(seed is not None for seed in seeds)):
            self._described = True
        self._needs_reset[env_ids] = False
        if self._state is not None and hasattr(self.policy, "reset_state"):
            self._state = self.policy.reset_state(self._state, env_ids)  # type: ignore[union-attr]

    def _check_obs(self, obs: Any, env_ids: np.ndarray, what: str) -> None:
        """ObservationError unless every row of obs is in the observation space."""
        problem = self._obs_check(obs)
        if problem is not None:
            raise ObservationError(
                f"envs {env_ids.tolist()} returned {what} outside the observation space "
                f"{self.observation_space}: {problem}. Fix the env, or widen its observation_space"
            )

    def _before_ring_writes(self) -> None:
        """Count a round of ring writes; first give the store the queued episodes whose rows it could reach."""
        self._records += 1
        if self._write_by is not None and self._records >= self._write_by:
            self._write_queued()

    def _write_episode(self, env_id: int) -> None:
        """Give env_id's just finished episode to the store: queued, for stores that take batches, while its
        rows are safe in the ring; else at once (after the queue, so episodes reach the store in order)."""
        assert self.store is not None
        if self._batch_writes:
            ref = self.buffer.episode_ref(env_id)
            if ref is not None:
                last_row, steps = ref
                # rows the env may still write before reaching the episode's first row, 2 per round of writes
                # (its step and a restart), less the restart that may follow in this round
                rounds = (self.buffer.capacity - steps - 2) // 2
                if rounds >= 1:
                    self._queued.append((env_id, last_row, steps, self._seeds[env_id], self._options[env_id]))
                    deadline = self._records + rounds
                    self._write_by = deadline if self._write_by is None else min(self._write_by, deadline)
                    if len(self._queued) >= WRITE_BATCH:
                        self._write_queued()
                    return
        self._write_queued()
        episode = self.buffer.episode(env_id)
        infos = None
        if self.record_infos:
            infos = self.envs.episode_infos(env_id, len(episode.rewards)) or None  # type: ignore[attr-defined]
        self.store.write_episode(
            episode.observations,
            episode.actions,
            episode.rewards,
            episode.terminations,
            episode.truncations,
            seed=self._seeds[env_id],
            env_id=env_id,
            options=self._options[env_id],
            infos=infos,
        )

    def _write_queued(self) -> None:
        """Gather the queued episodes from the rings in one pass and hand them to the store's write_episodes."""
        queued = self._queued
        if not queued:
            return
        self._queued = []
        self._write_by = None
        env_ids, last_rows, steps, seeds, options = zip(*queued)
        lengths = np.array(steps, dtype=np.int64)
        obs, acts, rewards, terms, truncs = self.buffer.gather_episodes(
            np.array(env_ids, dtype=np.int64), np.array(last_rows, dtype=np.int64), lengths
        )
        self.store.write_episodes(  # type: ignore[union-attr]
            unflatten_batch(self.observation_space, obs),
            unflatten_batch(self.action_space, acts),
            rewards,
            terms,
            truncs,
            lengths,
            seeds=list(seeds),
            env_ids=list(env_ids),
            options=list(options),
        )

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorStateError("this collector is closed; make a new Collector")


def _block_step(block: StepBlock, j: int, restarts: np.ndarray) -> AllEnvStep:
    """Row j of a block (its restarts given) as the AllEnvStep that step_all would have returned for it;
    arrays the ledger keeps are copies (the block is written over)."""
    obs = unflatten_batch(block.observation_space, [leaf[j] for leaf in block.obs])
    started = restarts.nonzero()[0]
    transitions = ~restarts if started.size else None
    done = block.done[j]
    ended = done.copy() if transitions is None else done & transitions
    return AllEnvStep(
        obs, obs, block.rewards[j], block.terminations[j], block.truncations[j], {}, transitions, started, ended
    )
