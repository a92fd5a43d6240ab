"""Collector: drive N environments with a policy for exactly n steps or exactly n episodes.

One batch on its way from the envs to the store: the policy acts on the ready envs' latest observations
(vcollect.acting), the envs step, the results go into one ring per env id (vcollect.buffers), every
finished episode is queued for the store as one contiguous ring slice (vcollect.episode_writer), and
the finished envs are reset with the next seed of their env id's stream (vcollect.reset_seeds).

How the envs are stepped is chosen once, when the collector is built, from what the backend declares
(``VectorEnv.capabilities``): a subset of envs per step, every env per step, or every env per step
staged in blocks (vcollect.loops).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from vcollect.acting import PolicyActor
from vcollect.buffers import VectorRingBuffer
from vcollect.envs import DummyVectorEnv, EnvPoolVectorEnv, GymnasiumVectorEnv, VectorEnv, is_envpool
from vcollect.envs.base import BaseVectorEnv
from vcollect.envs.info_recording import InfoRecordingEnv
from vcollect.episode_writer import EpisodeWriter
from vcollect.errors import CollectorStateError, HookOutputError, ObservationError, UnfinishedEpisodesWarning
from vcollect.hooks import EpisodeRolloutHook, StepHook, StepRollout, check_episode_extras
from vcollect.ledger import TransitionLedger
from vcollect.loops import AllEnvLoop, BlockLoop, StepLoop, SubsetLoop
from vcollect.policies import Policy
from vcollect.policies.tianshou_types import as_policy
from vcollect.progress import ThrottledBar
from vcollect.reset_seeds import ResetSeeds
from vcollect.spaces import BatchCheck, flatten_batch, leaves
from vcollect.stats import CollectStats
from vcollect.store.env_spec_record import record_env_spec
from vcollect.store.sink import EpisodeSink, check_sink

__all__ = ["DEFAULT_BUFFER_ROWS", "CollectCall", "Collector", "as_vector_env"]

DEFAULT_BUFFER_ROWS = 20_000
"""Rows of ring buffer made when none is given, split evenly between the envs."""


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
        "envs must be a vcollect VectorEnv (with its capabilities declared), a gymnasium vector env, a "
        f"gymnasium.Env or a non-empty list of zero-argument env factories; got {type(envs).__name__}"
    )


class _NoBar:
    """The progress bar when none is shown: a disabled tqdm costs ~15 us a call, ~10% of a one-step collect."""

    n = 0

    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class CollectCall:
    """What one ``collect`` call was asked for, and the episode returns/lengths it reports."""

    random: bool
    render: float | None
    reset_options: dict[str, Any] | None
    bar: ThrottledBar | _NoBar
    returns: list[float] = field(default_factory=list)
    lens: list[int] = field(default_factory=list)


class Collector:
    """Collect exact numbers of steps or episodes from a vector env into per-env ring buffers.

    ``policy`` is called as ``policy(obs_batch, state) -> (actions, state)`` on the ready envs only. A
    Tianshou policy or Algorithm is wrapped in ``vcollect.policies.TianshouPolicy`` (recognised by isinstance
    against Tianshou's classes when tianshou is imported; vcollect.policies.tianshou_types), without infos: a
    policy that asks for them (``SupportsInfos``, ``TianshouPolicy(p, pass_infos=True)``) gets each env's last.
    With a ``store`` (an ``EpisodeSink``, e.g. ``EpisodeStore``, whose spaces are the envs') every
    completed episode is written whole, with the seed of its reset and its env id; a ``buffer`` given with
    a store is switched to keep episodes longer than its rings whole (``keep_whole_episodes``). ``seed``
    seeds the generator behind every reset's seed (one stream per env id) and the actions of
    ``collect(random=True)``. The dummy, subprocess and Ray backends seed every reset the collector asks
    for, so for the same seed (and policy) they give bit-identical data, equal to each other. The gymnasium
    backend (its vector envs restart finished envs themselves) and EnvPool (seeded once, from the pool's
    seed) give the same data again for the same backend and seeds, but not the data of the other backends.

    Backends that step every env at once are stepped whole; transitions beyond the requested count are
    recorded and stored at once and reported by the next call (``pending_transitions``). Episodes an env
    restarts by itself, or whose reset the backend cannot seed (EnvPool), are stored with ``seed=None``.
    Where such a backend restarts envs on their next step (NEXT_STEP), steps are recorded in blocks
    (``stage_blocks=True``, not while rendering): the rings lag the envs by up to a block while a call
    runs, never after it returns; ``stage_blocks=False`` records every step as it comes.

    ``unfinished``: what becomes of the episodes still running when a collector with a store is closed or
    reset. ``"drop"`` (default): they are not stored, and an ``UnfinishedEpisodesWarning`` gives their count
    and steps; every stored episode then ended as its env ended it, and the stored episodes are exactly
    those CollectStats reported. ``"truncate"``: they are stored, their last step marked truncated (as
    Minari's DataCollector stores an episode cut short by a reset), so the dataset holds every step
    collected; they are reported by no CollectStats, and their last step's truncation is not the env's.

    ``validate`` (default True) checks every observation against the observation space, every reward for
    being finite, and a policy's actions against the action space; ``check_finite=True`` also refuses
    NaN/inf in observations of unbounded Box spaces.

    ``seed_every_reset=False`` seeds only each env's first reset (after construction or ``reset(seed=...)``);
    later episodes continue the env's own generator, as Tianshou's and Minari's collectors reset, and are
    stored with ``seed=None``: the run is reproducible from ``seed`` as a whole, but an episode can no
    longer be replayed alone by its seed. It saves gymnasium's new generator per reset (about 10 us).

    Hooks (vcollect.hooks, Tianshou's names; each costs one ``is None`` test per step when unset):
    ``on_step_hook(rollout)`` sees each step's env ids and arrays before they are checked and recorded and
    may replace ``rollout.rew`` / ``rollout.obs_next``; ``on_episode_done_hook(episode)`` sees each finished
    episode and may return per-step arrays (name -> one row per step), stored with it in the ring
    (``buffer.extras``) and the store (per-step info columns, ``EpisodeData.infos[name]``). Unlike
    Tianshou it may do so in ``n_step`` collection too. While a hook is set, a blocks backend is stepped
    step by step (block staging off: a hook sees every step before it is recorded); counts stay exact. A
    hook that raises stops the call with its exception, every episode finished before it stored; reset the
    collector before collecting again.

    ``collect_step`` / ``collect_episode`` / ``collect_time``: running totals of what the collect calls
    reported since construction or the last ``reset_stat()`` (as Tianshou's Collector keeps them).
    """

    #: whether this class keeps enough envs in flight for backends that return results in fixed-size batches
    handles_batched_recv = False

    def __init__(
        self,
        policy: Policy | Callable[..., Any] | None,
        envs: Any,
        buffer: VectorRingBuffer | None = None,
        store: EpisodeSink | None = None,
        *,
        seed: int | None = None,
        exploration_noise: bool = False,
        validate: bool = True,
        record_infos: bool = False,
        seed_every_reset: bool = True,
        stage_blocks: bool = True,
        unfinished: Literal["drop", "truncate"] = "drop",
        check_finite: bool = False,
        on_step_hook: StepHook | None = None,
        on_episode_done_hook: EpisodeRolloutHook | None = None,
    ) -> None:
        if unfinished not in ("drop", "truncate"):
            raise ValueError(f"unfinished must be 'drop' or 'truncate', got {unfinished!r}")
        self.unfinished = unfinished
        vector_env = as_vector_env(envs)
        if record_infos:
            if vector_env.capabilities.steps_all_envs or vector_env.capabilities.autoresets:
                raise ValueError(
                    f"record_infos needs a backend that steps and resets each env on request; "
                    f"{type(vector_env).__name__} steps all envs at once or resets them by itself"
                )
            vector_env = InfoRecordingEnv(vector_env)
        self.envs: VectorEnv = vector_env
        self.capabilities = caps = vector_env.capabilities
        if caps.recv_batch_size > 1 and not self.handles_batched_recv:
            raise ValueError(
                f"{type(vector_env).__name__} returns results {caps.recv_batch_size} at a time (async mode): "
                "collect from it with AsyncCollector, or make it in sync mode (batch_size=num_envs)"
            )
        policy = as_policy(policy)  # a Tianshou Policy/Algorithm is wrapped in TianshouPolicy
        self.policy = policy
        self.num_envs = n = vector_env.num_envs
        self.observation_space = vector_env.single_observation_space
        self.action_space = vector_env.single_action_space
        self.buffer = self._checked_buffer(buffer)
        self.store = None if store is None else check_sink(store, self.observation_space, self.action_space)
        record_env_spec(self.store, vector_env.env_spec if isinstance(vector_env, BaseVectorEnv | InfoRecordingEnv)
                        else None)  # the dataset names its env, so recover_environment() works
        self.writer: EpisodeWriter | None = None
        if self.store is not None:
            self.buffer.keep_whole_episodes()  # a stored episode is whole, however long
            infos = vector_env.episode_infos if isinstance(vector_env, InfoRecordingEnv) else None
            self.writer = EpisodeWriter(self.store, self.buffer, infos)
        self.seed_every_reset = seed_every_reset
        self.record_infos = record_infos
        self.exploration_noise = exploration_noise
        self.validate = validate
        self.actor = PolicyActor(
            policy, self.buffer, self.observation_space, self.action_space,
            exploration_noise=exploration_noise, validate=validate,
        )
        self.ledger = TransitionLedger(n)
        self._obs_check = _observation_check(self.observation_space, check_finite)
        self._reseed(seed)
        self._needs_reset = np.ones(n, dtype=bool)
        self._was_reset = False
        self._closed = False
        self._all_ids = np.arange(n)
        self._all_ids.flags.writeable = False
        self._on_step_hook = on_step_hook
        self._on_episode_done_hook = on_episode_done_hook
        self.collect_step, self.collect_episode, self.collect_time = 0, 0, 0.0
        self.loop: StepLoop = self._make_loop(stage_blocks)

    def _checked_buffer(self, buffer: VectorRingBuffer | None) -> VectorRingBuffer:
        """The given ring, checked against the envs, or a new one of DEFAULT_BUFFER_ROWS rows."""
        if buffer is None:
            capacity = max(2, DEFAULT_BUFFER_ROWS // self.num_envs)
            return VectorRingBuffer(self.num_envs, capacity, self.observation_space, self.action_space)
        if not isinstance(buffer, VectorRingBuffer):
            raise TypeError(f"buffer must be a vcollect VectorRingBuffer, got {type(buffer).__name__}")
        if buffer.num_envs != self.num_envs:
            raise ValueError(
                f"buffer has {buffer.num_envs} env rings but the collector has {self.num_envs} envs; "
                "make the VectorRingBuffer with num_envs equal to envs.num_envs"
            )
        if not buffer.has_spaces:  # VectorRingBuffer(total_size=..., num_envs=...): the envs' spaces
            buffer.bind_spaces(self.observation_space, self.action_space)
        for what, ring_space, env_space in (
            ("observation", buffer.observation_space, self.observation_space),
            ("action", buffer.action_space, self.action_space),
        ):
            if ring_space != env_space:
                raise ValueError(
                    f"buffer holds {what} space {ring_space} but the envs have {what} space {env_space}; "
                    "make the VectorRingBuffer with envs.single_observation_space / single_action_space"
                )
        return buffer

    def _make_loop(self, stage_blocks: bool) -> StepLoop:
        """The step loop the backend's capabilities call for (AsyncCollector chooses its own)."""
        kind = self.capabilities.loop
        if kind == "blocks" and stage_blocks:
            return BlockLoop(self)
        if kind == "subset":
            return SubsetLoop(self)
        return AllEnvLoop(self)

    def _reseed(self, seed: int | None) -> None:
        """(Re)make the generator, the per-env reset seed streams and the random actions from ``seed``."""
        self._rng = np.random.default_rng(seed)
        self._reset_seeds = ResetSeeds(
            self.num_envs, int(self._rng.integers(0, 2**63)), every_reset=self.seed_every_reset
        )
        self.actor.reseed(int(self._rng.integers(0, 2**63)))

    # ------------------------------------------------------------------ hooks (Tianshou's names)

    def set_on_step_hook(self, hook: StepHook | None) -> None:
        """Call ``hook(rollout)`` on every step from now on (None: no step hook)."""
        self._on_step_hook = hook

    def set_on_episode_done_hook(self, hook: EpisodeRolloutHook | None) -> None:
        """Call ``hook(episode)`` on every finished episode from now on (None: no episode hook)."""
        self._on_episode_done_hook = hook

    def get_on_step_hook(self) -> StepHook | None:
        return self._on_step_hook

    def get_on_episode_done_hook(self) -> EpisodeRolloutHook | None:
        return self._on_episode_done_hook

    @property
    def hooked(self) -> bool:
        """Whether a step or episode-done hook is set (the block loop then records step by step)."""
        return self._on_step_hook is not None or self._on_episode_done_hook is not None

    @property
    def pending_transitions(self) -> int:
        """Transitions already recorded (and stored) that the next collect() call will report first."""
        return len(self.ledger)

    # ------------------------------------------------------------------ lifecycle

    def reset(
        self,
        seed: int | None = None,
        *,
        reset_buffer: bool = True,
        reset_stats: bool = True,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Reset every env (each with a seed from the generator) and, by default, the buffer and the
        ``collect_*`` counters, as Tianshou's ``reset(reset_buffer, reset_stats)`` does.

        ``seed`` re-seeds the collector's generator first. Unfinished episodes are discarded (or stored
        truncated: ``unfinished``). Unlike Tianshou's, the first positional argument is ``seed``: a bool
        there (Tianshou's ``reset(False)``) is refused rather than taken as a seed.
        """
        if isinstance(seed, bool):
            raise TypeError(
                f"reset(seed) got {seed!r}: the first argument of vcollect's reset is the seed; pass "
                "reset_buffer= (and reset_stats=) by keyword"
            )
        self._check_open()
        self._write_queued()
        if self._was_reset:
            self._settle_unfinished("reset")
        if seed is not None:
            self._reseed(seed)
        if reset_buffer:
            self.buffer.reset()
        if reset_stats:
            self.reset_stat()
        self.actor.clear()
        self._reset_envs(self._all_ids, options)
        self._was_reset = True

    def reset_env(self, seed: int | None = None, *, options: dict[str, Any] | None = None) -> None:
        """Reset every env, keeping the buffer and the counters (Tianshou's ``reset_env``)."""
        self.reset(seed, reset_buffer=False, reset_stats=False, options=options)

    def reset_buffer(self, keep_statistics: bool = False) -> None:
        """Empty the buffer (Tianshou's ``reset_buffer``). A ring holds the start of each running episode, so
        after the first reset the envs are reset too (their running episodes settled as at any reset).
        ``keep_statistics`` is accepted as Tianshou's is; the rings keep no statistics to keep."""
        if self._was_reset:
            self.reset(reset_buffer=True, reset_stats=False)
        else:
            self._check_open()
            self.buffer.reset()

    def reset_stat(self) -> None:
        """Zero ``collect_step``, ``collect_episode`` and ``collect_time``."""
        self.collect_step, self.collect_episode, self.collect_time = 0, 0, 0.0

    def close(self) -> None:
        """Close the envs and flush the store (the store itself stays open: it is the caller's)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write_queued()
            if self._was_reset:
                self._settle_unfinished("close")
            if self.store is not None:
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

        ``reset_before_collect=True`` resets the envs and the counters but keeps the buffer, as Tianshou
        2.0.1 does (``reset(reset_buffer=False)``): a replay loop that resets before each collect keeps
        training on all its data. (Before #16 vcollect emptied the buffer here; call ``reset()`` or
        ``reset_buffer()`` for that.)
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
            self.reset(reset_buffer=False, options=reset_options)
        elif not self._was_reset:
            raise CollectorStateError(
                "collect() called before any reset: call collector.reset() first or pass "
                "reset_before_collect=True"
            )
        self.actor.begin_call()
        start = time.perf_counter()
        bar: ThrottledBar | _NoBar = _NoBar()
        if progress:
            bar = ThrottledBar(tqdm(total=int(target), unit="step" if n_step is not None else "ep"))
        call = CollectCall(random, render, reset_options, bar)
        try:
            if n_step is not None:
                steps = self.loop.collect_steps(int(n_step), call)
            else:
                steps = self.loop.collect_episodes(self._episode_quota(int(target)), call)
        finally:
            try:
                bar.close()
            finally:
                self._write_queued()  # every episode finished in the call reaches the store, even on an error
        elapsed = time.perf_counter() - start
        self.collect_step += steps
        self.collect_episode += len(call.returns)
        self.collect_time += elapsed
        return CollectStats(
            n_collected_steps=steps,
            n_collected_episodes=len(call.returns),
            collect_time=elapsed,
            returns=np.asarray(call.returns, dtype=np.float64),
            lens=np.asarray(call.lens, dtype=np.int64),
        )

    def _settle_unfinished(self, when: str) -> None:
        """Store the running episodes marked truncated, or warn that they are not stored (``unfinished``)."""
        if self.writer is None:
            return
        running = self.buffer.unfinished()
        if running.size == 0:
            return
        if self.unfinished == "truncate":
            extras = None
            if self._on_episode_done_hook is not None:
                extras = [self._episode_extras(env_id) for env_id in running.tolist()]
            self.writer.truncated(running, extras)
            return
        steps = int(self.buffer.episode_lengths[running].sum())
        warnings.warn(
            f"{running.size} episodes still running at {when} ({steps} steps) were not stored; pass "
            "Collector(..., unfinished='truncate') to store them with their last step marked truncated",
            UnfinishedEpisodesWarning,
            stacklevel=3,
        )

    def _episode_quota(self, n_episode: int) -> np.ndarray:
        """Episodes each env owes: n // N, plus one for n % N envs drawn at random."""
        quota = np.full(self.num_envs, n_episode // self.num_envs, dtype=np.int64)
        extra = n_episode % self.num_envs
        if extra:
            quota[self._rng.choice(self.num_envs, size=extra, replace=False)] += 1
        return quota

    # ------------------------------------------------------------------ episodes starting (for the loops)

    def _reset_pending(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Reset those of env_ids that wait for a reset."""
        pending = env_ids[self._needs_reset[env_ids]]
        if pending.size:
            self._reset_envs(pending, options)

    def _reset_envs(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Reset env_ids, each with the next seed of its stream, and start their episodes."""
        seeds = self._reset_seeds.take(env_ids.tolist())
        obs, infos = self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)
        self.actor.remember_infos(env_ids, infos)  # kept only for a policy that wants infos
        self._start_episodes(env_ids, obs, seeds, options)

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
        """Begin new episodes for env_ids from their first observations, reset with these seeds."""
        if check and self.validate:
            self._check_obs(obs, env_ids, "a reset observation")
        self.buffer.start_episodes(env_ids, obs)
        if remember:
            self.actor.remember(env_ids, obs)
        if self.writer is not None:
            stored: list[int | None] = list(seeds) if self.capabilities.seeded_resets else [None] * len(env_ids)
            self.writer.started(env_ids.tolist(), stored, options)
        self._needs_reset[env_ids] = False
        self.actor.reset_state(env_ids)

    def _self_started(self, env_ids: np.ndarray, *, policy_state: bool = True) -> None:
        """Episodes an env started by itself, whose first rows are in the rings already: no seed or options
        (not replayable by seed), the policy's state reset (unless that was done already)."""
        if self.writer is not None:
            self.writer.self_started(env_ids)
        if policy_state:
            self.actor.reset_state(env_ids)

    def _run_step_hook(
        self, env_ids: np.ndarray, actions: Any, obs_next: Any, rewards: np.ndarray, terms: np.ndarray,
        truncs: np.ndarray,
    ) -> tuple[Any, np.ndarray]:
        """Call the step hook (set) on one step; returns the observations and rewards it leaves."""
        rollout = StepRollout(env_ids, actions, obs_next, rewards, terms, truncs)
        assert self._on_step_hook is not None
        self._on_step_hook(rollout)
        rew = np.asarray(rollout.rew, dtype=np.float64)
        if rew.shape != (len(env_ids),):
            raise HookOutputError(
                f"on_step_hook left rew of shape {rew.shape}; it must stay one reward per env id ({len(env_ids)},)"
            )
        return rollout.obs_next, rew

    def _ended(self, finished: np.ndarray) -> None:
        """The episodes of ``finished`` just ended, whole in their rings: run the episode-done hook (if set)
        and queue them for the store, one by one, so that those before a hook that raises are stored."""
        if self._on_episode_done_hook is None:
            if self.writer is not None:
                self.writer.ended(finished)
            return
        for i in range(finished.size):
            extras = self._episode_extras(int(finished[i]))
            if self.writer is not None:
                self.writer.ended(finished[i : i + 1], [extras])

    def _episode_extras(self, env_id: int) -> dict[str, np.ndarray]:
        """The episode-done hook's per-step arrays for env_id's latest episode, checked, put in its ring."""
        assert self._on_episode_done_hook is not None
        episode = self.buffer.episode(env_id)
        out = self._on_episode_done_hook(episode)
        if out is None:
            return {}
        extras = check_episode_extras(out, len(episode.rewards), env_id)
        self.buffer.set_episode_extras(env_id, extras)
        return extras

    def _check_rewards(self, rewards: np.ndarray, env_ids: np.ndarray) -> None:
        """ObservationError unless every reward is finite: a NaN or inf would be stored and would make every
        return statistic NaN. One sum per step; the rewards are looked at one by one only when it is not
        finite."""
        if math.isfinite(float(np.add.reduce(rewards))):
            return
        bad = ~np.isfinite(rewards)
        if not bad.any():  # the sum overflowed, every reward is finite
            return
        envs = env_ids[bad]
        raise ObservationError(
            f"envs {envs.tolist()} returned rewards {rewards[bad].tolist()} (not finite) at step "
            f"{self.buffer.episode_lengths[envs].tolist()} of their episodes; fix the env's reward, or collect "
            "with validate=False to store such rewards as they are"
        )

    def _check_obs(self, obs: Any, env_ids: np.ndarray, what: str) -> None:
        """ObservationError unless every row of obs is in the observation space."""
        problem = self._obs_check(obs)
        if problem is not None:
            raise ObservationError(
                f"envs {env_ids.tolist()} returned {what} outside the observation space "
                f"{self.observation_space}: {problem}. Fix the env, or widen its observation_space"
            )

    def _next_rounds(self, rounds: int = 1) -> None:
        """Ring writes for ``rounds`` steps are about to happen: the writer hands over what they could reach."""
        if self.writer is not None:
            self.writer.next_rounds(rounds)

    def _write_queued(self) -> None:
        if self.writer is not None:
            self.writer.write_queued()

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorStateError("this collector is closed; make a new Collector")


def _observation_check(space: gym.Space[Any], check_finite: bool) -> Callable[[Any], str | None]:
    """The batch check of observations: in the space, and with ``check_finite`` every float value finite
    (an unbounded Box admits inf, which offline training rarely survives)."""
    check = BatchCheck(space)
    if not check_finite:
        return check

    def finite_check(batch: Any) -> str | None:
        problem = check(batch)
        if problem is not None:
            return problem
        for leaf, values in zip(leaves(space), flatten_batch(space, batch)):
            array = np.asarray(values)
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                where = f" at '{leaf.name}'" if leaf.name else ""
                return f"a value{where} is not finite (NaN or inf) and check_finite=True"
        return None

    return finite_check
