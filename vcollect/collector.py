"""Collector: drive N environments with a policy for exactly n steps or exactly n episodes.

A facade over vcollect.collecting: the policy acts on the ready envs' latest observations (acting), the
envs step, the results go into one ring per env id (vcollect.buffers), each finished episode is queued for
the store as one ring slice (episode_writer) and its env reset with the next seed of its stream
(reset_seeds). The Collector builds these parts (parts) into one StepContext (step_context), picks a step
loop once from the backend's ``capabilities`` (loops), and reports what the calls collected; what its
resets and close do with the episodes it holds is closing's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.buffers import VectorRingBuffer
from vcollect.collecting.calls import (
    call_stats,
    checked_count,
    checked_episode_order,
    checked_seed,
    count_failed_call,
    episode_quota,
    run_loop,
)
from vcollect.collecting.closing import Closing
from vcollect.collecting.loops import StepLoop, pick_loop
from vcollect.collecting.options import CollectorOptions, CollectorSettings
from vcollect.collecting.parts import build_context
from vcollect.collecting.progress import call_bar
from vcollect.collecting.step_context import CollectCall
from vcollect.envs import VectorEnv
from vcollect.errors import CollectorStateError
from vcollect.exit_commits import ExitStage, register_exit_close
from vcollect.hooks import EpisodeRolloutHook, StepHook
from vcollect.monitor import as_monitors, live_feed
from vcollect.policies import Policy
from vcollect.policies.wrapping import as_policy
from vcollect.stats import CollectStats, EpisodeValues
from vcollect.store.sink import EpisodeSink

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Collector"]


class Collector:
    """Collect exact numbers of steps or episodes from a vector env into per-env ring buffers.

    A Tianshou policy or Algorithm is wrapped in ``vcollect.policies.TianshouPolicy`` (without infos, unless it
    asks for them); with ``exploration_noise=True`` it explores as in Tianshou's training step whether or not
    the caller entered ``policy_within_training_step`` (TianshouPolicy's docstring says how). With a ``store``
    (an ``EpisodeSink``, e.g. ``EpisodeStore``, whose spaces are the envs') every completed episode is written
    whole, with the seed of its reset and its env id; a ``buffer`` given with a store is switched to keep
    episodes longer than its rings whole (as ``keep_overflow=True`` does). ``seed`` seeds every reset's seed
    (one stream per env id) and ``collect(random=True)``'s actions: the dummy, subprocess and Ray backends then
    give bit-identical data, equal to each other; the gymnasium backend (its envs restart themselves) and
    EnvPool (seeded once, from the pool's seed) repeat their own data, not the others'.

    Backends that step every env at once are stepped whole; transitions beyond the requested count are
    recorded and stored at once and reported by the next call (``pending_transitions``). Episodes an env
    restarts by itself, or whose reset the backend cannot seed (EnvPool), are stored with ``seed=None``. Where
    such a backend restarts envs on their next step (NEXT_STEP), steps are recorded in blocks (``stage_blocks``,
    not while rendering or while a hook is set: vcollect.hooks): the rings lag the envs by up to a block while
    a call runs, never after it returns. ``collect_step`` / ``collect_episode`` / ``collect_time``: totals
    reported since construction or ``reset_stat()`` (as Tianshou's Collector keeps them).

    Args:
        policy: Called as ``policy(obs_batch, state) -> (actions, state)`` on the ready envs only; a Tianshou
            policy or Algorithm; or None for a collector that only collects with ``random=True``.
        envs: A ``VectorEnv``, a gymnasium vector env, one ``gymnasium.Env``, or a list of env factories.
        buffer: The rings to record into (a ``VectorRingBuffer`` with one ring per env); None makes one.
        store: Where every completed episode is written (an ``EpisodeSink`` of the envs' spaces).
        **options: The keyword options (``seed``, ``exploration_noise``, ``validate``, ``record_infos``,
            ``seed_every_reset``, ``seed_first_reset``, ``stage_blocks``, ``unfinished``, ``unfinished_hint``, ``check_finite`` and the
            hooks), shared with AsyncCollector; defaults and meaning: vcollect.collecting.options.CollectorSettings.

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
        self.policy = as_policy(policy, settings.exploration_noise)  # a Tianshou Policy/Algorithm: TianshouPolicy
        self.context = context = build_context(
            self.policy, envs, buffer, store, settings, batched_recv=self.handles_batched_recv
        )
        self.envs: VectorEnv = context.envs
        self.buffer, self._actor, self._ledger = context.buffer, context.actor, context.ledger
        self._writer = context.writer
        self.store = None if self._writer is None else self._writer.sink
        self.capabilities = context.capabilities
        self.num_envs = context.num_envs
        self.observation_space, self.action_space = context.observation_space, context.action_space
        self.unfinished = settings.unfinished
        self.seed_every_reset = settings.seed_every_reset
        self.seed_first_reset = settings.seed_first_reset
        self.record_infos = settings.record_infos
        self.exploration_noise = settings.exploration_noise
        self.validate = settings.validate
        hint = settings.unfinished_hint or f"{type(self).__name__}(..., unfinished='truncate')"
        self._closing = Closing(context, self.store, hint)
        self._reseed(settings.seed)
        self.collect_step, self.collect_episode, self.collect_time = 0, 0, 0.0
        self._loop: StepLoop = self._make_loop(settings.stage_blocks)
        self._live = live_feed(as_monitors(settings.monitor), context.tally, lambda: self.buffer.episode_lengths)
        if self._writer is not None:  # hands its queued episodes to the store if never closed (vcollect.exit_commits)
            register_exit_close(self, ExitStage.COLLECTOR)

    def _make_loop(self, stage_blocks: bool) -> StepLoop:
        """The step loop the backend's capabilities call for (AsyncCollector chooses its own)."""
        return pick_loop(self.context, stage_blocks)

    def _reseed(self, seed: int | None) -> None:
        """(Re)make the generator, the per-env reset seed streams and the random actions from ``seed``."""
        self._rng = np.random.default_rng(seed)
        self.context.reseed(int(self._rng.integers(0, 2**63)), self.seed_every_reset, self.seed_first_reset)
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
        """Return the step hook set (None when none is)."""
        return self.context.on_step_hook

    def get_on_episode_done_hook(self) -> EpisodeRolloutHook | None:
        """Return the episode-done hook set (None when none is)."""
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
        seed = checked_seed(seed)
        self._closing.check_open()
        self._closing.settle(self.unfinished, "reset")
        if seed is not None:
            self._reseed(seed)
        if reset_buffer:
            self.buffer.reset()
        if reset_stats:
            self.reset_stat()
        self._actor.clear()
        self.context.reset_envs(self.context.all_ids, options)
        self._closing.was_reset = True

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
        if self._closing.was_reset:
            self.reset(reset_buffer=True, reset_stats=False)
        else:
            self._closing.check_open()
            self.buffer.reset()

    def reset_stat(self) -> None:
        """Zero ``collect_step``, ``collect_episode`` and ``collect_time``."""
        self.collect_step, self.collect_episode, self.collect_time = 0, 0, 0.0

    def close(self) -> None:
        """Close the envs and flush the store (the store itself stays open: it is the caller's)."""
        self._closing.close(self.unfinished, "close", close_envs=True)

    def __del__(self) -> None:
        if getattr(self, "_closing", None) is not None:
            self.close_unclosed("garbage-collected without close()")

    def close_unclosed(self, why: str) -> None:
        """Close a collector with a store that nobody closed, its envs left open: at interpreter exit (before
        any store is closed) or when garbage-collected (vcollect.exit_commits; Closing.close_unclosed).

        Args:
            why: How the collector was left, for the warning about episodes that could not be handed over.
        """
        self._closing.close_unclosed(self.unfinished, why)

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
        episode_order: str = "quota",
    ) -> CollectStats:
        """Collect exactly ``n_step`` transitions or exactly ``n_episode`` whole episodes.

        A call that raises reports nothing: later calls report what it recorded, except what a long call had
        counted already (added to ``collect_step``/``collect_episode``, named in a note on the error).

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
            episode_order: How ``n_episode`` is shared among the envs: ``"quota"`` (above), or Tianshou's
                ``"finished_first"``: the first ``min(n_episode, N)`` envs step, and whenever fewer episodes are
                owed than envs step, those that just finished stop, lowest ids first (short episodes weigh
                more). Only where envs step on request (dummy, subprocess, Ray).

        Returns:
            What the call collected: counts, time, speed and the returns and lengths of its episodes.

        Raises:
            ValueError: Not exactly one of ``n_step`` / ``n_episode``, a count that is not a positive integer,
                no policy without ``random=True``, or an ``episode_order`` the backend cannot follow.
            CollectorStateError: The collector is closed, or was never reset (and
                ``reset_before_collect`` is False).
        """
        self._closing.check_open()
        count = checked_count(n_step, n_episode)
        finished_first = n_episode is not None and checked_episode_order(
            episode_order, self._loop, type(self.envs).__name__, self.capabilities.loop
        )
        if not random and self.policy is None:
            raise ValueError("this collector has no policy: pass one, or call collect(random=True)")
        if reset_before_collect:
            self.reset(reset_buffer=False, options=reset_options)
        elif not self._closing.was_reset:
            raise CollectorStateError(
                "collect() called before any reset: call collector.reset() first or pass reset_before_collect=True"
            )
        self._actor.begin_call()
        start = time.perf_counter()
        bar = call_bar(count, "step" if n_step is not None else "ep", progress, self._live)
        call = CollectCall(random, render, reset_options, bar, EpisodeValues(keep_episode_stats),
                           EpisodeValues(keep_episode_stats))
        quota = None if n_step is not None else episode_quota(count, self.num_envs, self._rng)
        # the ledger reports what the call is certain to report as it comes (bounded memory however long)
        self._ledger.open_call(call.returns, call.lens, n_step=count if quota is None else None, quota=quota)
        try:
            steps = run_loop(self._loop, count, quota, finished_first, call)
        except BaseException as exc:
            early = count_failed_call(self._ledger, exc)  # what it had reported early is no longer held
            self.collect_step, self.collect_episode = self.collect_step + early[0], self.collect_episode + early[1]
            raise
        finally:
            self._ledger.close_call()
            try:
                bar.close()  # and the live feed's last figures
            finally:
                self.context.write_queued()  # every episode finished in the call reaches the store, even on an error
        stats = call_stats(call, steps, time.perf_counter() - start, self.context.take_abandoned())
        self.collect_step += stats.n_collected_steps
        self.collect_episode += stats.n_collected_episodes
        self.collect_time += stats.collect_time
        return stats
