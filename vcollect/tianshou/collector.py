"""Collector: Tianshou's Collector as its trainers use it, collecting with vcollect's Collector into the rings
of a vcollect.tianshou.VectorReplayBuffer.

Tianshou's ``OffPolicyTrainer`` / ``OnPolicyTrainer`` (``algorithm.run_training(...)``) call ``reset``,
``collect(n_step=... | n_episode=...)``, ``reset_buffer(keep_statistics=True)``, ``buffer`` (``hasnull``, and
the buffer handed to ``algorithm.update``), ``policy``, ``collect_step`` / ``collect_episode`` /
``collect_time``, and read Tianshou's ``CollectStats``; all of these are here, with Tianshou's meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.data import CollectStats, SequenceSummaryStats
from tianshou.env import BaseVectorEnv as TianshouVectorEnv
from tianshou.env import DummyVectorEnv as TianshouDummyVectorEnv

import vcollect
from vcollect.buffers.ring import RingWriter, ring_columns
from vcollect.envs import DummyVectorEnv, SubprocVectorEnv
from vcollect.envs.factory import as_vector_env
from vcollect.policies.tianshou_policy import TianshouPolicy
from vcollect.policies.tianshou_types import is_tianshou_policy
from vcollect.tianshou.buffer import VectorReplayBuffer
from vcollect.tianshou.info_tap import StepInfoTap, taps
from vcollect.tianshou.mapped_actions import MappedActions
from vcollect.tianshou.random_actions import RandomActions, seeded_copies
from vcollect.tianshou.raw_actions import RawActions

__all__ = ["DEFAULT_SIZE_PER_ENV", "Collector"]

DEFAULT_SIZE_PER_ENV = 10_000
"""Transitions per env of the buffer a Collector makes when given none (Tianshou's default)."""


class Collector:
    """Tianshou's ``Collector(policy, env, buffer, exploration_noise=...)`` on vcollect's collector.

    Steps the envs with vcollect's collect loop (the policy or Algorithm wrapped in
    ``vcollect.policies.TianshouPolicy``) and records into ``buffer.ring``: the transitions Tianshou's
    algorithms then read through the buffer's Tianshou indices, never copied into a Tianshou buffer.

    On a Tianshou ``DummyVectorEnv`` (its envs stepped in this process, as they are) a script that swaps
    the two imports runs as on Tianshou's Collector for the same seeds: the envs are Tianshou's own objects,
    seeded by the script's ``venv.seed(...)``, and no reset is seeded afterwards (each env carries on its own
    generator, as Tianshou resets them); ``collect(n_step=n)`` steps every env each time (n rounded up to a
    multiple of the env count); ``collect(n_episode=n)`` shares the episodes among the envs as Tianshou does
    (the envs that finish first stop first once fewer episodes are owed than envs step), restarts each env
    that finishes at once and every env when the call ends; the policy is called in the same order on the
    same observations, its exploration noise added under the caller's training-step flag (Tianshou's
    trainer sets it), so it draws the same numbers from numpy's global generator; and the buffer samples
    the same indices (vcollect.tianshou.VectorReplayBuffer); ``collect(random=True)`` samples each env's own
    action space object in env-id order (seeded by ``venv.seed(...)``), steps the envs with the samples and
    stores the policy's ``map_action_inverse`` of them, without exploration noise, and leaves no policy state.
    The transitions, episodes, sampled batches and trained weights are then Tianshou's, bit for bit.

    Elsewhere: on vcollect's dummy, subprocess and Ray backends (a Tianshou SubprocVectorEnv's env factories
    are run again in vcollect's subprocesses) episodes are shared as above, but the envs' resets are seeded
    from numpy's global generator (seeded by the script's ``np.random.seed``) once, at their first reset;
    on a gymnasium or EnvPool vector env each env gets a quota of episodes (vcollect's ``n_episode``); and
    ``collect(random=True)`` samples one copy of the action space per env, each seeded from its own stream of
    ``seed`` (the same seed, the same random actions). ``reset_buffer`` keeps the running episodes' returns and
    lengths whatever ``keep_statistics`` says (so every reported return is a whole episode's). Each step's info
    is stored beside its transition (``buffer.info``, ``env_id`` added) where the envs step on request; a
    gymnasium or EnvPool vector env's steps are stored without infos. On every backend (gymnasium and EnvPool
    vector envs included) the buffer stores a Tianshou policy's own actions (before its ``map_action``: a SAC
    or TD3 actor's in [-1, 1]), as Tianshou's, and random samples through the policy's ``map_action_inverse``
    (none, or action scaling off: the samples as drawn), so both are on the policy's scale; the envs get the
    policy's ``map_action`` of its actions, and the samples as drawn. Any other policy's actions are stored as
    vcollect's Collector stores them.

    Args:
        policy: A Tianshou Algorithm or Policy (or any policy vcollect's Collector takes).
        env: A Tianshou ``DummyVectorEnv`` (its envs are stepped in this process, as they are), another
            Tianshou vector env (its env factories are run again in vcollect's subprocesses), or anything
            ``vcollect.Collector`` takes (a vcollect VectorEnv, a gymnasium vector env, env factories).
        buffer: A ``vcollect.tianshou.VectorReplayBuffer`` with one sub-buffer per env (None: one of
            ``DEFAULT_SIZE_PER_ENV`` transitions per env).
        exploration_noise: Add the policy's exploration noise to its actions, as Tianshou's Collector does
            (under the caller's training-step flag: DQN's ``eps_training`` inside Tianshou's trainer's
            training step, ``eps_inference`` in its test step).
        **options: Further keyword options of ``vcollect.Collector`` (``seed``, ``validate``, hooks, ...).

    Raises:
        TypeError: ``buffer`` is not a vcollect.tianshou.VectorReplayBuffer (a Tianshou buffer cannot be
            written by vcollect's collector).
        ValueError: A buffer with another number of sub-buffers than envs.
    """

    def __class_getitem__(cls, item: Any) -> type[Collector]:
        """``Collector[CollectStats]`` (Tianshou's generic spelling) is the Collector itself."""
        return cls

    def __init__(
        self,
        policy: Any,
        env: Any,
        buffer: VectorReplayBuffer | None = None,
        exploration_noise: bool = False,
        **options: Any,
    ) -> None:
        venv = as_vector_env(_vector_env(env))
        num_envs = venv.num_envs
        if buffer is None:
            buffer = VectorReplayBuffer(DEFAULT_SIZE_PER_ENV * num_envs, num_envs)
        if not isinstance(buffer, VectorReplayBuffer):
            raise TypeError(
                f"buffer must be a vcollect.tianshou.VectorReplayBuffer (or ReplayBuffer), got {type(buffer).__name__}: "
                "vcollect's collector records into its rings (from vcollect.tianshou import VectorReplayBuffer)"
            )
        if buffer.buffer_num != num_envs:
            raise ValueError(
                f"the buffer has {buffer.buffer_num} sub-buffers for {num_envs} envs: make it "
                f"VectorReplayBuffer(total_size, buffer_num={num_envs})"
            )
        if isinstance(env, TianshouDummyVectorEnv) and "seed" not in options:
            # Tianshou's own env objects, seeded by the script's venv.seed(...): every reset unseeded, as Tianshou's
            options.setdefault("seed_every_reset", False)
            options.setdefault("seed_first_reset", False)
        elif "seed" not in options:  # the script's np.random.seed decides, as it does Tianshou's runs
            options["seed"] = int(np.random.randint(0, 2**31 - 1))
            options.setdefault("seed_every_reset", False)
        self.env = env
        self.buffer = buffer
        self.policy = policy.policy if isinstance(policy, Algorithm) else policy
        self.exploration_noise = bool(exploration_noise)
        self._episode_order = "quota"
        self._tap: StepInfoTap | None = None
        if taps(venv):  # each step's infos beside its transition, with env_id, as Tianshou's buffers hold them
            venv = self._tap = StepInfoTap(venv, buffer.ring, buffer.infos)
            buffer.infos.env_ids = True
            self._episode_order = "finished_first"  # n_episode shared among the envs as Tianshou shares it
        self._map_action: Callable[[Any], Any] | None = None  # the policy's, applied on the way to the envs
        self._mapped: MappedActions | None = None
        inverse: Callable[[Any], Any] | None = None  # what the rings store of a random sample (None: the sample)
        if is_tianshou_policy(policy):  # its exploration noise under the caller's training-step flag, as Tianshou's
            policy = TianshouPolicy(policy, exploration_noise=False)
            # the rings hold the policy's own actions, as Tianshou's buffers; the envs get them mapped
            self._map_action = policy.map_action
            inverse = getattr(self.policy, "map_action_inverse", None)
            policy = RawActions(policy, venv.single_action_space)
            venv = self._mapped = MappedActions(venv)
        self.collector = vcollect.Collector(policy, venv, buffer.ring, exploration_noise=exploration_noise, **options)
        if isinstance(env, TianshouDummyVectorEnv):  # each env's own space object, as Tianshou's Collector takes it
            spaces = list(env.action_space)
        else:
            spaces = seeded_copies(venv.single_action_space, num_envs, options.get("seed"))
        self._random = RandomActions(spaces, inverse)
        self.collector.context.actor.random_source = self._random

    # ------------------------------------------------------------------ Tianshou's counters

    @property
    def env_num(self) -> int:
        """The number of envs."""
        return self.collector.num_envs

    @property
    def collect_step(self) -> int:
        """Transitions collected since construction or the last ``reset_stat``."""
        return self.collector.collect_step

    @property
    def collect_episode(self) -> int:
        """Episodes collected since construction or the last ``reset_stat``."""
        return self.collector.collect_episode

    @property
    def collect_time(self) -> float:
        """Seconds spent collecting since construction or the last ``reset_stat``."""
        return self.collector.collect_time

    # ------------------------------------------------------------------ lifecycle

    def reset(
        self, reset_buffer: bool = True, reset_stats: bool = True, gym_reset_kwargs: dict[str, Any] | None = None
    ) -> None:
        """Reset every env, and by default the buffer and the counters (Tianshou's ``reset``).

        Args:
            reset_buffer: Empty the buffer too.
            reset_stats: Zero the counters too.
            gym_reset_kwargs: ``options`` passed to every env's reset (its ``options`` entry, or the dict).
        """
        options = _reset_options(gym_reset_kwargs)
        self.collector.reset(reset_buffer=False, reset_stats=reset_stats, options=options)
        self._note_written(self.env_num)
        if reset_buffer:
            self.reset_buffer()

    def reset_env(self, gym_reset_kwargs: dict[str, Any] | None = None) -> None:
        """Reset every env, keeping the buffer and the counters.

        Args:
            gym_reset_kwargs: ``options`` passed to every env's reset.
        """
        self.collector.reset_env(options=_reset_options(gym_reset_kwargs))
        self._note_written(self.env_num)

    def reset_stat(self) -> None:
        """Zero ``collect_step``, ``collect_episode`` and ``collect_time``."""
        self.collector.reset_stat()

    def reset_buffer(self, keep_statistics: bool = False) -> None:
        """Empty the buffer; running episodes go on (each env's newest observation starts its ring again,
        their returns and lengths so far kept), as Tianshou's ``reset_buffer`` (what the on-policy trainer
        calls after each update).

        Args:
            keep_statistics: Accepted as Tianshou's is; returns and lengths are always kept (see the class).
        """
        ring = self.buffer.ring
        if not ring.has_spaces:
            return
        running = np.flatnonzero(ring_columns(ring).running())
        latest = RingWriter(ring).last_obs(running) if running.size else None
        lengths, returns = ring.episode_lengths.copy(), ring.episode_returns.copy()
        self.buffer.reset()
        if running.size:
            ring.start_episodes(running, latest)
            self.buffer.note_written(1)
            ring.episode_lengths[running] = lengths[running]
            ring.episode_returns[running] = returns[running]

    def _note_written(self, bound: int) -> None:
        """Tell the buffer the most rows any env wrote: counted where the envs are tapped, else ``bound``."""
        self.buffer.note_written(self._tap.take_rows() if self._tap is not None else bound)

    def close(self) -> None:
        """Close the envs."""
        self.collector.close()

    # ------------------------------------------------------------------ collect

    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        random: bool = False,
        render: float | None = None,
        reset_before_collect: bool = False,
        gym_reset_kwargs: dict[str, Any] | None = None,
    ) -> CollectStats:
        """Collect ``n_step`` transitions (rounded up to a multiple of the env count) or ``n_episode`` episodes
        into the buffer, as Tianshou's Collector does.

        Args:
            n_step: Transitions to collect (every env steps each time).
            n_episode: Whole episodes to collect.
            random: Sample each env's action space instead of calling the policy (stored as the class says).
            render: Render and sleep this many seconds after each step.
            reset_before_collect: Reset the envs (and the counters) first, keeping the buffer (Tianshou 2's).
            gym_reset_kwargs: ``options`` passed to the env resets of this call.

        Returns:
            Tianshou's CollectStats of the call (counts, time, speed, returns and lengths with their stats).
        """
        collector, options = self.collector, _reset_options(gym_reset_kwargs)
        if isinstance(n_step, int) and not isinstance(n_step, bool) and n_step > 0:
            n_step = -(-n_step // self.env_num) * self.env_num  # every env steps each time, as in Tianshou's
        if self._mapped is not None:
            self._mapped.map_action = self._random.to_envs if random else self._map_action
        pending = collector.pending_transitions
        stats = collector.collect(
            n_step, n_episode, random=random, render=render, reset_before_collect=reset_before_collect,
            reset_options=options, episode_order=self._episode_order,
        )
        if random:  # no policy state comes out of random steps (Tianshou's hidden state is None after them)
            collector.context.actor.state = None
        if n_step is None and self._episode_order == "finished_first":
            # Tianshou's resets: each env that finished restarts at once (even one that then idles), and every
            # env is reset once more when the call ends
            collector.context.reset_pending(collector.context.all_ids, options)
            collector.reset_env(options=options)
        recorded = stats.n_collected_steps + collector.pending_transitions - pending
        # each step writes one row and each reset one: at most twice the steps, plus the resets before and after
        self._note_written(2 * recorded + 3 * self.env_num)
        returns = np.asarray(stats.returns, dtype=float)
        lens = np.asarray(stats.lens, dtype=int)
        time = stats.collect_time
        return CollectStats(
            n_collected_episodes=stats.n_collected_episodes,
            n_collected_steps=stats.n_collected_steps,
            collect_time=time,
            collect_speed=stats.n_collected_steps / time if time > 0 else 0.0,
            returns=returns,
            returns_stat=SequenceSummaryStats.from_sequence(returns) if returns.size else None,
            lens=lens,
            lens_stat=SequenceSummaryStats.from_sequence(lens) if lens.size else None,
        )


def _vector_env(env: Any) -> Any:
    """What vcollect's Collector steps for a Tianshou vector env; anything else as it is."""
    if isinstance(env, TianshouDummyVectorEnv):
        return DummyVectorEnv([_given(worker.env) for worker in env.workers])
    if isinstance(env, TianshouVectorEnv):
        return SubprocVectorEnv(list(env._env_fns))
    return env


def _given(env: Any) -> Callable[[], Any]:
    """A factory returning the env already made (a Tianshou DummyVectorEnv's)."""
    return lambda: env


def _reset_options(gym_reset_kwargs: dict[str, Any] | None) -> dict[str, Any] | None:
    """Tianshou's ``gym_reset_kwargs`` as gymnasium's reset ``options``."""
    if not gym_reset_kwargs:
        return None
    return dict(gym_reset_kwargs.get("options", gym_reset_kwargs))
