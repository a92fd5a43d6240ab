"""StepContext: what a step loop is handed to record steps, and CollectCall: what one collect call asked for.

A collector builds its parts (the envs, the rings, the policy actor, the ledger, the episode writer) and
hands them to its step loop in one StepContext, with the work every loop shares: the checks of
observations and rewards, the resets of ended envs with the seeds of their streams, the start and end of
episodes (the hooks, the writer's queue). The loops import this module, never the collector, so every
import points one way: collector -> loops -> step context -> parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np

from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.collecting.acting import PolicyActor
from vcollect.collecting.episode_writer import EpisodeWriter
from vcollect.collecting.ledger import TransitionLedger
from vcollect.collecting.reset_seeds import ResetSeeds
from vcollect.envs import VectorEnv
from vcollect.envs.restarts import RestartsEnvs
from vcollect.errors import HookOutputError, ObservationError
from vcollect.hooks import EpisodeRolloutHook, StepHook, StepRollout, check_episode_extras
from vcollect.monitor import EpisodeTally
from vcollect.spaces import BatchCheck, flatten_batch, leaves, unflatten_batch
from vcollect.stats import AbandonedEpisode, EpisodeValues

__all__ = ["CollectCall", "ProgressBar", "StepContext", "observation_check", "take_rows"]


class ProgressBar(Protocol):
    """What a collect call moves on as it records: a tqdm bar, or one that shows nothing."""

    n: int

    def update(self, n: int = 1) -> None:
        """Move on by n."""
        ...

    def close(self) -> None:
        """Stop showing."""
        ...


@dataclass
class CollectCall:
    """What one ``collect`` call was asked for, and the episode returns/lengths it reports.

    Args:
        random: sample actions from the action space instead of calling the policy.
        render: seconds to sleep after rendering each step (None: no rendering).
        reset_options: options of every env reset in the call.
        bar: the call's progress bar.
        returns: where the returns of the episodes the call finishes are reported (kept, or only their moments).
        lens: where their lengths are reported.
    """

    random: bool
    render: float | None
    reset_options: dict[str, Any] | None
    bar: ProgressBar
    returns: EpisodeValues = field(default_factory=EpisodeValues)
    lens: EpisodeValues = field(default_factory=EpisodeValues)


class StepContext:
    """The parts of one collector as its step loop uses them, and what every loop does with them.

    Args:
        envs: the vector env (capabilities read from it once).
        buffer: the rings the steps are recorded in.
        actor: the policy actor (actions, policy state, newest observations).
        ledger: transitions recorded but not yet reported.
        writer: the episode writer of the collector's store (None: no store).
        validate: check observations, rewards and a policy's actions.
        check_finite: with ``validate``, refuse NaN/inf in observations too.
    """

    def __init__(
        self,
        envs: VectorEnv,
        buffer: VectorRingBuffer,
        actor: PolicyActor,
        ledger: TransitionLedger,
        writer: EpisodeWriter | None,
        *,
        validate: bool,
        check_finite: bool,
    ) -> None:
        self.envs = envs
        self.capabilities = envs.capabilities
        self.num_envs = n = envs.num_envs
        self.observation_space = envs.single_observation_space
        self.action_space = envs.single_action_space
        self.buffer = buffer
        self.ring = RingWriter(buffer)
        self.actor = actor
        self.ledger = ledger
        self.writer = writer
        self.validate = validate
        self.obs_problem = observation_check(self.observation_space, check_finite)
        """``obs_problem(batch)``: what is wrong with a batch of observations, None when nothing is."""
        self.all_ids = np.arange(n)
        """Every env id, in order; read-only. A loop passes this very array where it steps every env."""
        self.all_ids.flags.writeable = False
        self.needs_reset = np.ones(n, dtype=bool)
        """Envs whose episode ended (or never began) and that wait for a reset."""
        self.reset_seeds = ResetSeeds(n, 0)
        self.upcoming_all: Sequence[int | None] = self.reset_seeds.upcoming(list(range(n)))
        """The next reset seed of every env id, looked up when read (for a step that restarts ended envs)."""
        self.on_step_hook: StepHook | None = None
        self.on_episode_done_hook: EpisodeRolloutHook | None = None
        self.tally: EpisodeTally | None = None
        """Told of every episode end where a monitor watches the collector (vcollect.monitor)."""
        self.restarter: RestartsEnvs | None = None
        """The backend, where it declares ``restarts_envs`` (it replaces failed envs; vcollect.envs.restarts)."""
        if self.capabilities.restarts_envs:
            if not isinstance(envs, RestartsEnvs):
                raise TypeError(f"{type(envs).__name__} declares restarts_envs but has no take_restarts method")
            self.restarter = envs
        self.abandoned: list[AbandonedEpisode] = []
        """Episodes given up since the collector last took them (their envs were replaced)."""

    def reseed(self, seed: int, every_reset: bool, first_reset: bool = True) -> None:
        """New streams of reset seeds from ``seed`` (``every_reset`` False: only each env's first reset seeded;
        ``first_reset`` False as well: none)."""
        self.reset_seeds = ResetSeeds(self.num_envs, seed, every_reset=every_reset, first_reset=first_reset)
        self.upcoming_all = self.reset_seeds.upcoming(list(range(self.num_envs)))

    @property
    def hooked(self) -> bool:
        """Whether a step or episode-done hook is set (a blocks loop then records step by step)."""
        return self.on_step_hook is not None or self.on_episode_done_hook is not None

    # ------------------------------------------------------------------ checks

    def check_obs(self, obs: Any, env_ids: np.ndarray, what: str) -> None:
        """Refuse observations outside the observation space.

        Raises:
            ObservationError: some row of ``obs`` (one per env id) is not in the space.
        """
        problem = self.obs_problem(obs)
        if problem is not None:
            raise ObservationError(
                f"envs {env_ids.tolist()} returned {what} outside the observation space "
                f"{self.observation_space}: {problem}. Fix the env, or widen its observation_space"
            )

    def check_rewards(self, rewards: np.ndarray, env_ids: np.ndarray) -> None:
        """Refuse rewards that are not finite (they would make every return statistic NaN); one sum per step.

        Raises:
            ObservationError: a reward (one per env id) is NaN or infinite.
        """
        if sum_is_finite(rewards):
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

    # ------------------------------------------------------------------ episodes starting

    def reset_pending(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Reset those of env_ids that wait for a reset."""
        pending = env_ids[self.needs_reset[env_ids]]
        if pending.size:
            self.reset_envs(pending, options)

    def reset_envs(self, env_ids: np.ndarray, options: dict[str, Any] | None) -> None:
        """Reset env_ids, each with the next seed of its stream, and start their episodes. Envs the backend
        replaced meanwhile (``restarts_envs``) are reset again, each with its stream's next seed."""
        seeds = self.reset_seeds.take(env_ids.tolist())
        if self.restarter is not None:
            self.needs_reset[env_ids] = True  # being reset: no episode of theirs is running
        obs, infos = self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)
        if self.restarter is not None:
            replaced, abandoned = self.take_replaced()
            if replaced.size:
                keep = np.flatnonzero(~np.isin(env_ids, replaced))
                if keep.size:
                    kept = env_ids[keep]
                    self.actor.remember_infos(kept, [infos[i] for i in keep.tolist()])
                    seeds = [seeds[i] for i in keep.tolist()]
                    self.start_episodes(kept, take_rows(self.observation_space, obs, keep), seeds, options)
                again = np.union1d(env_ids[np.isin(env_ids, replaced)], abandoned)
                self.reset_envs(again, options)
                return
        self.actor.remember_infos(env_ids, infos)  # kept only for a policy that wants infos
        self.start_episodes(env_ids, obs, seeds, options)

    def take_replaced(self) -> tuple[np.ndarray, np.ndarray]:
        """The env ids the backend replaced since last asked (``restarter`` set), each now waiting for a reset;
        the running episodes among them are abandoned (not stored; recorded in ``abandoned``).

        Returns:
            (every replaced env id, those whose running episode was abandoned), each ascending.
        """
        assert self.restarter is not None
        records = self.restarter.take_restarts()
        if not records:
            return self.all_ids[:0], self.all_ids[:0]
        errors = {record.env_id: record.error for record in records}
        replaced = np.array(sorted(errors), dtype=np.int64)
        running = replaced[~self.needs_reset[replaced]]
        for env_id in running.tolist():
            self.abandoned.append(AbandonedEpisode(env_id, int(self.buffer.episode_lengths[env_id]), errors[env_id]))
        if running.size:
            self.ring.abandon_episodes(running)
        self.needs_reset[replaced] = True
        return replaced, running

    def abandon_running(self, error: str) -> None:
        """Give up every running episode (their envs took a step the rings never saw): not stored, listed in
        ``abandoned`` with ``error``; every env then waits for a reset."""
        running = self.buffer.unfinished()
        for env_id in running.tolist():
            self.abandoned.append(AbandonedEpisode(env_id, int(self.buffer.episode_lengths[env_id]), error))
        if running.size:
            self.ring.abandon_episodes(running)
        self.needs_reset[:] = True

    def take_abandoned(self) -> tuple[AbandonedEpisode, ...]:
        """The episodes abandoned since the last take (a collect call's)."""
        abandoned, self.abandoned = tuple(self.abandoned), []
        return abandoned

    def start_episodes(
        self,
        env_ids: np.ndarray,
        obs: Any,
        seeds: Sequence[int | None],
        options: dict[str, Any] | None,
        *,
        check: bool = True,
        remember: bool = True,
        policy_state: bool = True,
    ) -> None:
        """Begin new episodes for env_ids from their first observations, reset with these seeds.

        Args:
            env_ids: ascending env ids.
            obs: their first observations.
            seeds: the seed of each reset (stored with the episode where the backend seeds resets).
            options: the options of the resets.
            check: check the observations (with ``validate``).
            remember: make them the actor's newest observations.
            policy_state: reset their policy state (False: the caller did, before the policy acted on them).
        """
        if check and self.validate:
            self.check_obs(obs, env_ids, "a reset observation")
        self.buffer.start_episodes(env_ids, obs)
        if remember:
            self.actor.remember(env_ids, obs)
        if self.writer is not None:
            stored: list[int | None] = list(seeds) if self.capabilities.seeded_resets else [None] * len(env_ids)
            self.writer.started(env_ids.tolist(), stored, options)
        self.needs_reset[env_ids] = False
        if policy_state:
            self.actor.reset_state(env_ids)

    def self_started(self, env_ids: np.ndarray, *, policy_state: bool = True) -> None:
        """Episodes envs started by themselves, whose first rows are in the rings already: no seed or options
        (not replayable by seed), the policy's state reset unless ``policy_state`` is False (done already)."""
        if self.writer is not None:
            self.writer.self_started(env_ids)
        if policy_state:
            self.actor.reset_state(env_ids)

    # ------------------------------------------------------------------ steps and episodes ending

    def run_step_hook(
        self, env_ids: np.ndarray, actions: Any, obs_next: Any, rewards: np.ndarray, terms: np.ndarray,
        truncs: np.ndarray,
    ) -> tuple[Any, np.ndarray]:
        """Show one step to the step hook (set).

        Returns:
            The next observations and rewards the hook leaves.

        Raises:
            HookOutputError: the hook left rewards of another shape.
        """
        rollout = StepRollout(env_ids, actions, obs_next, rewards, terms, truncs)
        assert self.on_step_hook is not None
        self.on_step_hook(rollout)
        rew = np.asarray(rollout.rew, dtype=np.float64)
        if rew.shape != (len(env_ids),):
            raise HookOutputError(
                f"on_step_hook left rew of shape {rew.shape}; it must stay one reward per env id ({len(env_ids)},)"
            )
        return rollout.obs_next, rew

    def ended(self, finished: np.ndarray) -> None:
        """The episodes of ``finished`` just ended, whole in their rings: run the episode-done hook (if set)
        and queue them for the store, one by one, so that those before a hook that raises are stored."""
        if self.tally is not None:
            self.tally.add(finished, self.buffer.episode_lengths[finished], self.buffer.episode_returns[finished])
        if self.on_episode_done_hook is None:
            if self.writer is not None:
                self.writer.ended(finished)
            return
        for i in range(finished.size):
            extras = self.episode_extras(int(finished[i]))
            if self.writer is not None:
                self.writer.ended(finished[i : i + 1], [extras])

    def episode_extras(self, env_id: int) -> dict[str, np.ndarray]:
        """The episode-done hook's per-step arrays for env_id's latest episode, checked, put in its ring."""
        assert self.on_episode_done_hook is not None
        episode = self.buffer.episode(env_id)
        out = self.on_episode_done_hook(episode)
        if out is None:
            return {}
        extras = check_episode_extras(out, len(episode.rewards), env_id)
        self.ring.set_episode_extras(env_id, extras)
        return extras

    def next_rounds(self, rounds: int = 1) -> None:
        """Ring writes for ``rounds`` steps are about to happen: the writer hands over what they could reach."""
        if self.writer is not None:
            self.writer.next_rounds(rounds)

    def write_queued(self) -> None:
        """Hand every queued finished episode to the store."""
        if self.writer is not None:
            self.writer.write_queued()

    def settle_unfinished(self, unfinished: Literal["drop", "truncate"]) -> tuple[int, int]:
        """The episodes still running when a collector with a store closes or resets: stored with their last
        step marked truncated (``"truncate"``), or not stored (``"drop"``).

        Returns:
            The episodes and steps not stored (0, 0 with ``"truncate"`` or no store).
        """
        if self.writer is None:
            return 0, 0
        running = self.buffer.unfinished()
        if running.size == 0:
            return 0, 0
        if unfinished == "truncate":
            extras = None
            if self.on_episode_done_hook is not None:
                extras = [self.episode_extras(env_id) for env_id in running.tolist()]
            self.writer.truncated(running, extras)
            return 0, 0
        return int(running.size), int(self.buffer.episode_lengths[running].sum())


def take_rows(space: gym.Space[Any], batch: Any, positions: np.ndarray) -> Any:
    """The rows at ``positions`` of a batch of the space's values (nested Dict/Tuple batches too), copied."""
    return unflatten_batch(space, [np.asarray(leaf)[positions] for leaf in flatten_batch(space, batch)])


def observation_check(space: gym.Space[Any], check_finite: bool) -> Callable[[Any], str | None]:
    """The batch check of observations: in the space, and with ``check_finite`` every float value finite
    (an unbounded Box admits inf, which offline training rarely survives).

    Returns:
        ``check(batch)``: what is wrong with the batch, None when nothing is.
    """
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


SMALL_BATCH = 64
"""Up to this many values, Python's sum of the list beats a numpy reduction's fixed cost (~1 us)."""


def sum_is_finite(values: np.ndarray) -> bool:
    """Whether the sum of a float array is finite: True means every value is; False means a NaN or an infinity,
    or a sum that overflowed (look closer, as ``StepContext.check_rewards`` does).

    Args:
        values: A 1-D float array (a step's rewards).

    Returns:
        Whether the sum is finite.
    """
    if values.size <= SMALL_BATCH:
        return math.isfinite(sum(values.tolist()))
    return math.isfinite(float(np.add.reduce(values)))
