"""Collector: drive N environments with a policy for exactly n steps or exactly n episodes.

One batch on its way from the envs to the store: the policy acts on the ready envs' latest observations
(vcollect.acting), the envs step, the results go into one ring per env id (vcollect.buffers), every
finished episode is queued for the store as one contiguous ring slice (vcollect.episode_writer), and
the finished envs are reset with the next seed of their env id's stream (vcollect.reset_seeds).

The Collector is a facade: it builds these parts (vcollect.collector_parts), hands them to a step loop in
one StepContext (vcollect.step_context), picks the loop once from what the backend declares
(``VectorEnv.capabilities``: a subset of envs per step, every env per step, or every env per step staged
in blocks; vcollect.loops), and reports what the calls collected.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from vcollect.acting import PolicyActor
from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.collector_options import CollectorOptions, CollectorSettings
from vcollect.collector_parts import (
    DEFAULT_BUFFER_ROWS,
    as_vector_env,
    checked_ring,
    checked_store,
    collector_envs,
)
from vcollect.envs import VectorEnv
from vcollect.envs.info_recording import InfoRecordingEnv
from vcollect.episode_writer import EpisodeWriter
from vcollect.errors import CollectorStateError, EpisodesLostWarning
from vcollect.exit_commits import ExitStage, register_exit_close
from vcollect.hooks import EpisodeRolloutHook, StepHook
from vcollect.ledger import TransitionLedger
from vcollect.loops import AllEnvLoop, BlockLoop, StepLoop, SubsetLoop
from vcollect.policies import Policy
from vcollect.policies.wrapping import as_policy
from vcollect.progress import ThrottledBar
from vcollect.stats import CollectStats, EpisodeValues
from vcollect.step_context import CollectCall, ProgressBar, StepContext
from vcollect.store.sink import EpisodeSink

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DEFAULT_BUFFER_ROWS", "CollectCall", "Collector", "as_vector_env"]


class _NoBar:
    """The progress bar when none is shown: a disabled tqdm costs ~15 us a call, ~10% of a one-step collect."""

    n = 0

    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


class Collector:
    """Collect exact numbers of steps or episodes from a vector env into per-env ring buffers.

    ``policy`` is called as ``policy(obs_batch, state) -> (actions, state)`` on the ready envs only. A
    Tianshou policy or Algorithm is wrapped in ``vcollect.policies.TianshouPolicy`` (recognised by isinstance
    against Tianshou's classes when tianshou is imported; vcollect.policies.tianshou_types), without infos: a
    policy that asks for them (``SupportsInfos``, ``TianshouPolicy(p, pass_infos=True)``) gets each env's last.
    With a ``store`` (an ``EpisodeSink``, e.g. ``EpisodeStore``, whose spaces are the envs') every
    completed episode is written whole, with the seed of its reset and its env id; a ``buffer`` given with
    a store is switched to keep episodes longer than its rings whole (as ``keep_overflow=True`` does). ``seed``
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

    Hooks (vcollect.hooks, Tianshou's names; each costs one ``is None`` test per step when unset):
    ``on_step_hook(rollout)`` sees each step's env ids and arrays before they are checked and recorded and
    may replace ``rollout.rew`` / ``rollout.obs_next``; ``on_episode_done_hook(episode)`` sees each finished
    episode and may return per-step arrays (name -> one row per step), stored with it in the ring
    (``buffer.extras``) and the store (per-step info columns, ``EpisodeData.infos[name]``). Unlike
    Tianshou it may do so in ``n_step`` collection too. While a hook is set, a blocks backend is stepped
    step by step (block staging off: a hook sees every step before it is recorded); counts stay exact. A
    hook that raises stops the call with its exception, every episode finished before it stored; reset the
    collector before collecting again.

    The keyword options (``seed``, ``exploration_noise``, ``validate``, ``record_infos``, ``seed_every_reset``,
    ``stage_blocks``, ``unfinished``, ``check_finite`` and the hooks), their defaults and meaning:
    vcollect.collector_options.CollectorSettings; typed once and shared with AsyncCollector, an option no
    collector takes is a TypeError.

    ``collect_step`` / ``collect_episode`` / ``collect_time``: running totals of what the collect calls
    reported since construction or the last ``reset_stat()`` (as Tianshou's Collector keeps them).

    Args:
        policy: Called as ``policy(obs_batch, state) -> (actions, state)``; a Tianshou policy or Algorithm;
            or None for a collector that only collects with ``random=True``.
        envs: A ``VectorEnv``, a gymnasium vector env, one ``gymnasium.Env``, or a list of env factories.
        buffer: The rings to record into (a ``VectorRingBuffer`` with one ring per env); None makes one.
        store: Where every completed episode is written (an ``EpisodeSink`` of the envs' spaces).
        **options: The keyword options above (vcollect.collector_options.CollectorSettings).

    Raises:
        TypeError: An option no collector takes, ``buffer`` not a VectorRingBuffer, or ``store`` not a whole
            EpisodeSink.
        ValueError: ``buffer`` or ``store`` of other env counts or spaces than the envs', or a bad option value.
    """

    #: whether this class keeps enough envs in flight for backends that return results in fixed-size batches
    handles_batched_recv = False

    def __init__(
        self,
        policy: Policy | Callable[..., Any] | None,
        envs: Any,
        buffer: VectorRingBuffer | None = None,
        store: EpisodeSink | None = None,
        **options: Unpack[CollectorOptions],
    ) -> None:
        settings = CollectorSettings(**options)
        self.unfinished = settings.unfinished
        vector_env = collector_envs(envs, record_infos=settings.record_infos, batched_recv=self.handles_batched_recv)
        self.envs: VectorEnv = vector_env
        self.capabilities = vector_env.capabilities
        self.policy = policy = as_policy(policy)  # a Tianshou Policy/Algorithm is wrapped in TianshouPolicy
        self.num_envs = vector_env.num_envs
        self.observation_space = vector_env.single_observation_space
        self.action_space = vector_env.single_action_space
        self.buffer = checked_ring(buffer, vector_env)
        self.store = checked_store(store, vector_env)
        self._writer: EpisodeWriter | None = None
        if self.store is not None:
            RingWriter(self.buffer).keep_whole_episodes()  # a stored episode is whole, however long
            infos = vector_env.episode_infos if isinstance(vector_env, InfoRecordingEnv) else None
            self._writer = EpisodeWriter(self.store, self.buffer, infos)
        self.seed_every_reset = settings.seed_every_reset
        self.record_infos = settings.record_infos
        self.exploration_noise = settings.exploration_noise
        self.validate = settings.validate
        self._actor = PolicyActor(
            policy, self.buffer, self.observation_space, self.action_space,
            exploration_noise=settings.exploration_noise, validate=settings.validate,
        )
        self._ledger = TransitionLedger(self.num_envs)
        self.context = StepContext(
            vector_env, self.buffer, self._actor, self._ledger, self._writer,
            validate=settings.validate, check_finite=settings.check_finite,
        )
        self.context.on_step_hook = settings.on_step_hook
        self.context.on_episode_done_hook = settings.on_episode_done_hook
        self._reseed(settings.seed)
        self._was_reset = False
        self._closed = False
        self.collect_step, self.collect_episode, self.collect_time = 0, 0, 0.0
        self._loop: StepLoop = self._make_loop(settings.stage_blocks)
        self._made_in: int | None = None
        if self._writer is not None:  # hands its queued episodes to the store if never closed (vcollect.exit_commits)
            self._made_in = os.getpid()
            register_exit_close(self, ExitStage.COLLECTOR)

    def _make_loop(self, stage_blocks: bool) -> StepLoop:
        """The step loop the backend's capabilities call for (AsyncCollector chooses its own)."""
        kind = self.capabilities.loop
        if kind == "blocks" and stage_blocks:
            return BlockLoop(self.context)
        if kind == "subset":
            return SubsetLoop(self.context)
        return AllEnvLoop(self.context)

    def _reseed(self, seed: int | None) -> None:
        """(Re)make the generator, the per-env reset seed streams and the random actions from ``seed``."""
        self._rng = np.random.default_rng(seed)
        self.context.reseed(int(self._rng.integers(0, 2**63)), self.seed_every_reset)
        self._actor.reseed(int(self._rng.integers(0, 2**63)))

    # ------------------------------------------------------------------ hooks (Tianshou's names)

    def set_on_step_hook(self, hook: StepHook | None) -> None:
        """Call ``hook(rollout)`` on every step from now on.

        Args:
            hook: The step hook; None removes it.
        """
        self.context.on_step_hook = hook

    def set_on_episode_done_hook(self, hook: EpisodeRolloutHook | None) -> None:
        """Call ``hook(episode)`` on every finished episode from now on.

        Args:
            hook: The episode-done hook; None removes it.
        """
        self.context.on_episode_done_hook = hook

    def get_on_step_hook(self) -> StepHook | None:
        """The step hook set (None: none)."""
        return self.context.on_step_hook

    def get_on_episode_done_hook(self) -> EpisodeRolloutHook | None:
        """The episode-done hook set (None: none)."""
        return self.context.on_episode_done_hook

    @property
    def hooked(self) -> bool:
        """Whether a step or episode-done hook is set (the block loop then records step by step)."""
        return self.context.hooked

    @property
    def pending_transitions(self) -> int:
        """Transitions already recorded (and stored) that the next collect() call will report first."""
        return len(self._ledger)

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

        Unfinished episodes are discarded (or stored truncated: ``unfinished``).

        Args:
            seed: Re-seeds the collector's generator first (None: keep it). Unlike Tianshou's, the first
                positional argument is the seed.
            reset_buffer: Empty the buffer too.
            reset_stats: Zero ``collect_step``, ``collect_episode`` and ``collect_time`` too.
            options: Passed to every env's reset.

        Raises:
            TypeError: ``seed`` is a bool (Tianshou's ``reset(False)``), refused rather than taken as a seed.
            CollectorStateError: The collector is closed.
        """
        if isinstance(seed, bool):
            raise TypeError(
                f"reset(seed) got {seed!r}: the first argument of vcollect's reset is the seed; pass "
                "reset_buffer= (and reset_stats=) by keyword"
            )
        self._check_open()
        self.context.write_queued()
        if self._was_reset:
            self.context.settle_unfinished(self.unfinished, "reset")
        if seed is not None:
            self._reseed(seed)
        if reset_buffer:
            self.buffer.reset()
        if reset_stats:
            self.reset_stat()
        self._actor.clear()
        self.context.reset_envs(self.context.all_ids, options)
        self._was_reset = True

    def reset_env(self, seed: int | None = None, *, options: dict[str, Any] | None = None) -> None:
        """Reset every env, keeping the buffer and the counters (Tianshou's ``reset_env``).

        Args:
            seed: Re-seeds the collector's generator first (None: keep it).
            options: Passed to every env's reset.
        """
        self.reset(seed, reset_buffer=False, reset_stats=False, options=options)

    def reset_buffer(self, keep_statistics: bool = False) -> None:
        """Empty the buffer (Tianshou's ``reset_buffer``).

        A ring holds the start of each running episode, so after the first reset the envs are reset too
        (their running episodes settled as at any reset).

        Args:
            keep_statistics: Accepted as Tianshou's is; the rings keep no statistics to keep.
        """
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
        self._close("close", close_envs=True)

    def _close(self, when: str, close_envs: bool) -> None:
        """close(); ``when`` names the moment in the warning about episodes still running."""
        if self._closed:
            return
        self._closed = True
        try:
            self.context.write_queued()
            if self._was_reset:
                self.context.settle_unfinished(self.unfinished, when)
            if self.store is not None:
                self.store.flush()
        finally:
            if close_envs:
                self.envs.close()

    def __del__(self) -> None:
        if getattr(self, "_made_in", None) is not None and not self._closed:
            self.close_unclosed("garbage-collected without close()")

    def close_unclosed(self, why: str) -> None:
        """Close a collector with a store that nobody closed: its queued finished episodes go to the store,
        which is flushed (vcollect.exit_commits). The envs are left open (they may serve another collector;
        they close themselves when dropped).

        Runs at interpreter exit for a collector still open then (before any store is closed), and when such a
        collector is garbage-collected. Episodes still running are settled as ``close()`` settles them
        (``unfinished``). Finished episodes that cannot be handed over are reported with an EpisodesLostWarning
        counting them and saying why; a store that cannot commit what it was handed reports it when it is
        closed. A collector made in another process (a forked child's copy) is left alone.

        Args:
            why: How the collector was left, for the warning.
        """
        if self._closed or self._writer is None or os.getpid() != self._made_in:
            return
        try:
            self._close(f"close ({why})", close_envs=False)  # the envs may serve another collector
        except Exception as exc:
            episodes, steps = self._writer.queued, self._writer.queued_steps
            lost = (f"{episodes} finished episodes ({steps} steps) queued for its store could not be handed over "
                    "and are lost" if episodes else "its store could not commit the episodes it was handed (the "
                    "store says so when it is closed)")
            warnings.warn(f"Collector was {why}: {lost} ({type(exc).__name__}: {exc}); close the collector (or use "
                          "it in a with block) to see such errors where they happen", EpisodesLostWarning, stacklevel=2)

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
        keep_episode_stats: bool = True,
    ) -> CollectStats:
        """Collect exactly ``n_step`` transitions or exactly ``n_episode`` whole episodes.

        Args:
            n_step: Transitions to collect; the last batch steps only as many envs as still needed, and
                unfinished episodes carry over to the next call.
            n_episode: Whole episodes to collect; each env gets a quota (n // N or one more, the extra ones
                given to randomly chosen envs), every episode started in the call is finished and kept, and
                envs that met their quota idle.
            random: Sample actions from the action space instead of calling the policy.
            reset_before_collect: Reset the envs and the counters first but keep the buffer, as Tianshou
                2.0.1 does (``reset(reset_buffer=False)``): a replay loop that resets before each collect
                keeps training on all its data (``reset()`` or ``reset_buffer()`` empty it).
            progress: Show a progress bar.
            render: Render and sleep this many seconds after each step.
            reset_options: Passed to every env reset in this call.
            keep_episode_stats: Keep every episode's return and length (``returns``/``lens``). False keeps
                only their count, mean, M2, minimum and maximum (``returns_moments``/``lens_moments``, read by
                ``returns_stat``/``lens_stat``), in bounded memory however many episodes the call collects.

        A call that raises reports nothing: the transitions it recorded are reported by later calls, except
        those a long call had already counted (added to ``collect_step``/``collect_episode`` and named in a
        note on the error).

        Returns:
            What the call collected: counts, time, speed and the returns and lengths of its episodes.

        Raises:
            ValueError: Not exactly one of ``n_step`` / ``n_episode``, a count that is not a positive
                integer, or no policy without ``random=True``.
            CollectorStateError: The collector is closed, or was never reset (and
                ``reset_before_collect`` is False).
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
        self._actor.begin_call()
        start = time.perf_counter()
        bar: ProgressBar = _NoBar()
        if progress:
            bar = ThrottledBar(tqdm(total=int(target), unit="step" if n_step is not None else "ep"))
        call = CollectCall(random, render, reset_options, bar, EpisodeValues(keep_episode_stats),
                           EpisodeValues(keep_episode_stats))
        quota = None if n_step is not None else self._episode_quota(int(target))
        # the ledger reports what the call is certain to report as it comes (bounded memory however long)
        self._ledger.open_call(call.returns, call.lens, n_step=None if n_step is None else int(n_step), quota=quota)
        try:
            if quota is None:
                steps = self._loop.collect_steps(int(target), call)
            else:
                steps = self._loop.collect_episodes(quota, call)
        except BaseException as exc:
            self._count_failed_call(exc)
            raise
        finally:
            self._ledger.close_call()
            try:
                bar.close()
            finally:
                self.context.write_queued()  # every episode finished in the call reaches the store, even on an error
        elapsed = time.perf_counter() - start
        self.collect_step += steps
        self.collect_episode += len(call.returns)
        self.collect_time += elapsed
        return CollectStats(
            n_collected_steps=steps,
            n_collected_episodes=len(call.returns),
            collect_time=elapsed,
            returns=call.returns.array(np.float64),
            lens=call.lens.array(np.int64),
            abandoned=self.context.take_abandoned(),
            returns_moments=None if keep_episode_stats else call.returns.moments(),
            lens_moments=None if keep_episode_stats else call.lens.moments(),
        )

    def _count_failed_call(self, exc: BaseException) -> None:
        """A call that raises reports nothing; the transitions its ledger had reported early are no longer held
        for a later call, so they are counted in ``collect_step``/``collect_episode`` and named on the error."""
        steps, episodes = self._ledger.close_call()
        if not steps:
            return
        self.collect_step += steps
        self.collect_episode += episodes
        add_note = getattr(exc, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(
                f"this collect call had counted {steps} steps and {episodes} episodes before it failed (added to "
                "collect_step/collect_episode); a later call reports only what was recorded after them"
            )

    def _episode_quota(self, n_episode: int) -> np.ndarray:
        """Episodes each env owes: n // N, plus one for n % N envs drawn at random."""
        quota = np.full(self.num_envs, n_episode // self.num_envs, dtype=np.int64)
        extra = n_episode % self.num_envs
        if extra:
            quota[self._rng.choice(self.num_envs, size=extra, replace=False)] += 1
        return quota

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorStateError("this collector is closed; make a new Collector")
