"""SubsetLoop: step exactly the envs a call still needs; restart ended envs, inside the step if offered.

n_step: every env steps while the count allows, the last batch only as many envs as still needed (taken
in rotation, so no env id is favoured). n_episode: envs step until they have finished their quota, then
idle (or, asked for Tianshou's order, until the episodes owed are fewer than the envs stepping). A backend
with ``step_reset`` restarts the envs that ended within the same call (one round trip to a worker process
instead of two); otherwise they are reset after the step. A policy that wants infos
(PolicyActor.wants_infos) is handed each step's infos, and the reset infos of the envs that restarted.

A backend that replaces failed envs (``restarts_envs``, vcollect.envs.restarts) reports them after the
step: their rows of the step are not recorded (nor counted), their running episodes are abandoned
(StepContext.take_replaced) and they are reset at once with the next seeds of their streams, so the call's
counts stay exact.

A backend that splits its step_reset in two (``split_step_reset``: the subprocess backend) has each step's
next actions sent before the step is recorded: once a step's result is in, what the next actions depend on
comes first (the checks of its observations and rewards, the seeds and policy state of the envs it restarted,
the policy's actions on its observations), the next step is sent, and the step is recorded (rings, ledger,
store) while the envs take the next one. A step whose checks fail, or in which envs were replaced, is recorded
before anything else is sent, as step by step. Should recording a step raise while the next one is under way,
that next step is waited for and dropped; every running episode is then abandoned (its env took a step the
rings never saw; listed with the collector's abandoned episodes) and every env waits for a reset.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium.spaces import Dict, Tuple

from vcollect.collecting.step_context import CollectCall, StepContext, sum_is_finite, take_rows
from vcollect.envs import StepResetResult
from vcollect.spaces import flatten_batch
from vcollect.stats import Extendable

__all__ = ["SplitsStepReset", "StepsAndResets", "SubsetLoop"]


@runtime_checkable
class StepsAndResets(Protocol):
    """What a backend that declares ``step_reset`` offers."""

    def step_reset(
        self,
        actions: Any,
        env_ids: Any = None,
        *,
        reset_seeds: Sequence[int | None],
        may_reset: np.ndarray | None = None,
        options: dict[str, Any] | None = None,
    ) -> StepResetResult:
        """Step env_ids, then restart at once each that ended (where may_reset allows)."""
        ...


@runtime_checkable
class SplitsStepReset(Protocol):
    """What a backend that declares ``split_step_reset`` offers."""

    def send_step_reset(
        self, actions: Any, *, reset_seeds: Sequence[int | None], options: dict[str, Any] | None = None
    ) -> None:
        """Start a step_reset of every env; its result is taken by ``recv_step_reset``."""
        ...

    def recv_step_reset(self) -> StepResetResult:
        """Wait for the step_reset ``send_step_reset`` started and return its result."""
        ...


_DROPPED_STEP = "recording the step before raised while the env took its next step, which was dropped"


class SubsetLoop:
    """The step loop of backends that step any subset of their envs (dummy, subprocess, Ray)."""

    def __init__(self, context: StepContext) -> None:
        self.ctx = context
        self.step_reset: StepsAndResets | None = None
        if context.capabilities.step_reset:
            if not isinstance(context.envs, StepsAndResets):
                raise TypeError(f"{type(context.envs).__name__} declares step_reset but has no step_reset method")
            self.step_reset = context.envs
        self.split: SplitsStepReset | None = None
        if context.capabilities.split_step_reset:
            if not isinstance(context.envs, SplitsStepReset):
                raise TypeError(
                    f"{type(context.envs).__name__} declares split_step_reset but has no send_step_reset and "
                    "recv_step_reset methods"
                )
            self.split = context.envs
        self._next_env = 0  # where the next partial batch starts
        self.unrecorded = 0
        """Transitions of replaced envs that steps did not record (restarts_envs); the loops subtract them."""

    def collect_steps(self, n_step: int, call: CollectCall) -> int:
        c = self.ctx
        all_ids = c.all_ids
        c.reset_pending(all_ids, call.reset_options)
        collected = 0
        self.unrecorded = 0
        if self.step_reset is not None and c.on_step_hook is None and call.render is None and not c.actor.wants_infos:
            batches = n_step // c.num_envs
            self._full_batches(batches, call)
            collected = batches * c.num_envs - self.unrecorded
        while collected < n_step:
            remaining = n_step - collected
            if remaining >= c.num_envs:
                ready = all_ids
            else:
                ready = np.sort((self._next_env + np.arange(remaining)) % c.num_envs)
                self._next_env = (self._next_env + remaining) % c.num_envs
            self.unrecorded = 0
            self.step(ready, call, None)
            collected += len(ready) - self.unrecorded
            call.bar.update(len(ready) - self.unrecorded)
        return collected

    def collect_episodes(self, quota: np.ndarray, call: CollectCall) -> int:
        c = self.ctx
        c.reset_pending(np.flatnonzero(quota > 0), call.reset_options)
        collected = 0
        while True:
            ready = np.flatnonzero(quota > 0)
            if ready.size == c.num_envs:
                ready = c.all_ids  # the object record() recognises as "every env, in order"
            if ready.size == 0:
                return collected
            self.unrecorded = 0
            finished = self.step(ready, call, quota[ready] > 1)
            collected += len(ready) - self.unrecorded
            if finished.size:
                call.bar.update(finished.size)
                quota[finished] -= 1

    def collect_episodes_finished_first(self, n_episode: int, call: CollectCall) -> int:
        """Record until ``n_episode`` episodes have finished, Tianshou's way: the first ``min(n_episode, N)``
        envs step; whenever the episodes still owed are fewer than the envs stepping, the envs that have just
        finished stop, lowest ids first (and are not restarted). Every episode finished in the call is
        reported, and none is left running."""
        c = self.ctx
        stepping = np.zeros(c.num_envs, dtype=bool)
        stepping[: min(n_episode, c.num_envs)] = True
        c.reset_pending(np.flatnonzero(stepping), call.reset_options)
        owed, collected = n_episode, 0
        while owed > 0:
            ready = np.flatnonzero(stepping)
            if ready.size == c.num_envs:
                ready = c.all_ids
            c.reset_pending(ready, call.reset_options)  # envs that finished last step and go on
            self.unrecorded = 0
            # with at least twice as many episodes owed as envs stepping, every env that finishes goes on and
            # restarts within the step; otherwise it restarts only once it is known to go on (above)
            finished = self.step(ready, call, None if owed >= 2 * len(ready) else np.zeros(len(ready), dtype=bool))
            collected += len(ready) - self.unrecorded
            if finished.size:
                call.bar.update(finished.size)
                owed -= finished.size
                surplus = int(np.count_nonzero(stepping)) - owed
                if surplus > 0:
                    stepping[np.sort(finished)[:surplus]] = False
        return collected

    def _full_batches(self, batches: int, call: CollectCall) -> None:
        """``batches`` steps of every env through ``step_reset``, where no hook, rendering or infos are asked
        for: ``step`` and ``record`` in one loop, each part looked up once per call rather than per step."""
        if batches <= 0:
            return
        c = self.ctx
        if self.split is not None and c.on_episode_done_hook is None:
            self._overlapped_batches(batches, call)
            return
        assert self.step_reset is not None
        step_reset, options = self.step_reset.step_reset, call.reset_options
        seeds = list(c.upcoming_all)  # looked up again whenever seeds are taken
        actor, add_all, writer, needs_reset = c.actor, c.buffer.add_all, c.writer, c.needs_reset
        lengths, returns = c.buffer.episode_lengths, c.buffer.episode_returns
        validate, obs_problem, all_ids, n = c.validate, c.obs_problem, c.all_ids, c.num_envs
        random, bar, space = call.random, call.bar, c.observation_space
        replacing = c.restarter is not None
        flat = not isinstance(space, (Dict, Tuple))  # observations are one array
        for _ in range(batches):
            actions = actor.actions(all_ids, random)
            result = step_reset(actions, None, reset_seeds=seeds, options=options)
            if replacing:
                replaced, abandoned = c.take_replaced()
                if replaced.size:  # the rest of this batch is recorded the general way
                    self._record_step_reset(all_ids, actions, result, call, replaced, abandoned)
                    seeds = list(c.upcoming_all)
                    bar.update(n - replaced.size)
                    continue
            obs, rewards, terms, truncs, _, restarted, reset_obs, _ = result
            if writer is not None:
                writer.next_rounds()
            if validate:
                if obs_problem(obs) is not None:
                    c.check_obs(obs, all_ids, "an observation")
                if not sum_is_finite(rewards):
                    c.check_rewards(rewards, all_ids)
            add_all(actions, rewards, terms, truncs, obs)
            done = terms | truncs
            if np.count_nonzero(done):
                finished = all_ids[done]
                call.returns.extend(returns[finished].tolist())
                call.lens.extend(lengths[finished].tolist())
                c.ended(finished)
                needs_reset[finished] = True
            if restarted.size:
                ids = restarted.tolist()
                c.start_episodes(restarted, reset_obs, c.reset_seeds.take(ids), options, remember=False)
                for i, seed in zip(ids, c.reset_seeds.peek(ids)):  # the other envs' next seeds are as they were
                    seeds[i] = seed
                if not random:  # the policy acts next on the restarted envs' first observations
                    if flat:
                        obs[restarted] = reset_obs
                    else:
                        for leaf, first in zip(flatten_batch(space, obs), flatten_batch(space, reset_obs)):
                            leaf[restarted] = first
            if random:
                actor.forget_obs()
            else:
                actor.remember(all_ids, obs, owned=True)
            bar.update(n)

    def _overlapped_batches(self, batches: int, call: CollectCall) -> None:
        """``_full_batches`` on a backend that declares ``split_step_reset``: each step is recorded while the
        envs take the next one (see the module docstring)."""
        c, split = self.ctx, self.split
        assert split is not None
        options = call.reset_options
        actor, validate, obs_problem, all_ids, n = c.actor, c.validate, c.obs_problem, c.all_ids, c.num_envs
        random, bar, space = call.random, call.bar, c.observation_space
        replacing = c.restarter is not None
        flat = not isinstance(space, (Dict, Tuple))  # observations are one array
        seeds = list(c.upcoming_all)  # looked up again whenever seeds are taken
        under_way = False  # whether a step was sent whose result is not taken yet
        try:
            actions = actor.actions(all_ids, random)
            split.send_step_reset(actions, reset_seeds=seeds, options=options)
            under_way = True
            for left in range(batches - 1, -1, -1):
                under_way = False
                result = split.recv_step_reset()
                obs, rewards, terms, truncs, _, restarted, reset_obs, _ = result
                replaced, abandoned = c.take_replaced() if replacing else (None, None)
                if replaced is not None and replaced.size:  # the rest of this batch is recorded the general way
                    assert abandoned is not None
                    self._record_step_reset(all_ids, actions, result, call, replaced, abandoned)
                    bar.update(n - replaced.size)
                elif validate and (
                    obs_problem(obs) is not None
                    or not sum_is_finite(rewards)
                    or (restarted.size and obs_problem(reset_obs) is not None)
                ):  # a check that may fail: the step is recorded (or refused) before anything else is sent
                    self._record_result(all_ids, None, actions, result, call)
                    bar.update(n)
                else:
                    # what the next actions depend on: the restarted envs' seeds and policy state, and the
                    # observations the policy acts on (a copy: the rings record what the envs returned)
                    restart_seeds: list[int | None] = []
                    if restarted.size:
                        restart_seeds = c.reset_seeds.take(restarted.tolist())
                        seeds = list(c.upcoming_all)
                        actor.reset_state(restarted)
                    if random:
                        actor.forget_obs()
                    elif flat and not restarted.size:
                        actor.use_rows([np.array(obs)])
                    else:
                        acted = [leaf.copy() for leaf in flatten_batch(space, obs)]
                        if restarted.size:
                            for leaf, first in zip(acted, flatten_batch(space, reset_obs)):
                                leaf[restarted] = first
                        actor.use_rows(acted)
                    step = (actions, obs, rewards, terms, truncs, restarted, reset_obs, restart_seeds)
                    if left:
                        try:
                            actions = actor.actions(all_ids, random)
                            split.send_step_reset(actions, reset_seeds=seeds, options=options)
                        except BaseException:
                            self._record_batch(*step, call)  # recorded, as when acting follows recording
                            raise
                        under_way = True
                    self._record_batch(*step, call)
                    bar.update(n)
                    continue
                if left:
                    seeds = list(c.upcoming_all)
                    actions = actor.actions(all_ids, random)
                    split.send_step_reset(actions, reset_seeds=seeds, options=options)
                    under_way = True
        except BaseException:
            if under_way:  # the envs took a step no ring will see: wait for it, give up the running episodes
                with contextlib.suppress(Exception):
                    split.recv_step_reset()
                c.abandon_running(_DROPPED_STEP)
            raise

    def _record_batch(
        self,
        actions: Any,
        obs: Any,
        rewards: np.ndarray,
        terms: np.ndarray,
        truncs: np.ndarray,
        restarted: np.ndarray,
        reset_obs: Any,
        restart_seeds: list[int | None],
        call: CollectCall,
    ) -> None:
        """Record a checked step of every env (its restarted envs' seeds taken and policy state reset already):
        rings, episode ends, the restarted envs' first rows."""
        c = self.ctx
        if c.writer is not None:
            c.writer.next_rounds()
        c.buffer.add_all(actions, rewards, terms, truncs, obs)
        done = terms | truncs
        if np.count_nonzero(done):
            finished = c.all_ids[done]
            call.returns.extend(c.buffer.episode_returns[finished].tolist())
            call.lens.extend(c.buffer.episode_lengths[finished].tolist())
            c.ended(finished)
            c.needs_reset[finished] = True
        if restarted.size:
            c.start_episodes(
                restarted, reset_obs, restart_seeds, call.reset_options, check=False, remember=False,
                policy_state=False,
            )

    def step(self, env_ids: np.ndarray, call: CollectCall, may_reset: np.ndarray | None) -> np.ndarray:
        """Act, step and record for ``env_ids`` (ascending); write finished episodes and restart them, except
        where ``may_reset`` (a bool per env id; None: all True) is False. Returns the finished env ids.
        A step hook sees the step first (what it leaves is recorded and acted on)."""
        c = self.ctx
        actions = c.actor.actions(env_ids, call.random)
        every = len(env_ids) == c.num_envs
        ids_arg = None if every else env_ids
        if self.step_reset is None:
            next_obs, rewards, terms, truncs, infos = c.envs.step(actions, ids_arg)
            if c.actor.wants_infos:
                c.actor.remember_infos(env_ids, infos)
            if c.on_step_hook is not None:
                next_obs, rewards = c.run_step_hook(env_ids, actions, next_obs, rewards, terms, truncs)
            finished = self.record(env_ids, actions, next_obs, rewards, terms, truncs, call.render, call.returns,
                                   call.lens)
            restart = finished if may_reset is None else finished[may_reset[np.searchsorted(env_ids, finished)]]
            if restart.size:
                c.reset_envs(restart, call.reset_options)
            return finished
        result = self.step_reset.step_reset(
            actions,
            ids_arg,
            reset_seeds=c.upcoming_all if every else c.reset_seeds.upcoming(env_ids.tolist()),
            may_reset=may_reset,
            options=call.reset_options,
        )
        if c.restarter is not None:
            replaced, abandoned = c.take_replaced()
            if replaced.size:
                return self._record_step_reset(env_ids, actions, result, call, replaced, abandoned)
        return self._record_result(env_ids, ids_arg, actions, result, call)

    def _record_step_reset(
        self,
        env_ids: np.ndarray,
        actions: Any,
        result: StepResetResult,
        call: CollectCall,
        replaced: np.ndarray,
        abandoned: np.ndarray,
    ) -> np.ndarray:
        """Record a step_reset of env_ids in which the backend replaced some envs: the others' rows only;
        the envs whose episodes were abandoned are reset at once. Returns the finished env ids."""
        c = self.ctx
        keep = np.flatnonzero(~np.isin(env_ids, replaced))
        self.unrecorded += env_ids.size - keep.size
        finished = env_ids[:0]
        if keep.size:
            space = c.observation_space
            started = ~np.isin(result.reset_ids, replaced)
            starts = np.flatnonzero(started)
            kept = StepResetResult(
                take_rows(space, result.obs, keep),
                result.rewards[keep],
                result.terminations[keep],
                result.truncations[keep],
                [result.infos[i] for i in keep.tolist()],
                result.reset_ids[started],
                None if not starts.size else take_rows(space, result.reset_obs, starts),
                [result.reset_infos[i] for i in starts.tolist()],
            )
            kept_ids = env_ids[keep]
            kept_actions = take_rows(c.action_space, actions, keep)
            finished = self._record_result(kept_ids, kept_ids, kept_actions, kept, call)
        else:
            c.next_rounds()  # the restarts below write a row each
        if abandoned.size:
            c.reset_envs(abandoned, call.reset_options)
        return finished

    def _record_result(
        self, env_ids: np.ndarray, ids_arg: np.ndarray | None, actions: Any, result: StepResetResult, call: CollectCall
    ) -> np.ndarray:
        """Record a step_reset's result for env_ids (``ids_arg`` None: every env, in order) and start the
        episodes of the envs it restarted. Returns the finished env ids."""
        c = self.ctx
        obs, rewards = result.obs, result.rewards
        if c.actor.wants_infos:  # the step's infos, then the restarted envs' reset infos
            c.actor.remember_infos(env_ids, result.infos)
            c.actor.remember_infos(result.reset_ids, result.reset_infos)
        if c.on_step_hook is not None:
            obs, rewards = c.run_step_hook(env_ids, actions, obs, rewards, result.terminations, result.truncations)
        finished = self.record(
            env_ids, actions, obs, rewards, result.terminations, result.truncations, call.render,
            call.returns, call.lens, remember=False,
        )
        restarted = result.reset_ids
        if restarted.size:
            seeds = c.reset_seeds.take(restarted.tolist())
            c.start_episodes(restarted, result.reset_obs, seeds, call.reset_options, remember=False)
            if not call.random:
                # The policy acts next on the restarted envs' first observations: put them in the (fresh) rows.
                rows = restarted if ids_arg is None else np.searchsorted(env_ids, restarted)
                obs_leaves = flatten_batch(c.observation_space, obs)
                for leaf, first in zip(obs_leaves, flatten_batch(c.observation_space, result.reset_obs)):
                    leaf[rows] = first
        if call.random:
            c.actor.forget_obs()
        else:
            c.actor.remember(env_ids, obs, owned=True)
        return finished

    def record(
        self,
        env_ids: np.ndarray,
        actions: Any,
        next_obs: Any,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        render: float | None,
        returns: Extendable,
        lens: Extendable,
        *,
        remember: bool = True,
    ) -> np.ndarray:
        """Record one step of env_ids into the rings; queue finished episodes for the store; return their
        env ids (their returns and lengths appended to ``returns``/``lens``). ``remember=False``: the caller updates
        the latest observations itself."""
        c = self.ctx
        writer = c.writer
        if writer is not None:
            writer.next_rounds()
        if c.validate:
            c.check_obs(next_obs, env_ids, "an observation")
            c.check_rewards(rewards, env_ids)
        if env_ids is c.all_ids:  # every env, in order: one write per array
            c.buffer.add_all(actions, rewards, terminations, truncations, next_obs)
        else:
            c.buffer.add(env_ids, actions, rewards, terminations, truncations, next_obs)
        if remember:
            c.actor.remember(env_ids, next_obs)
        if render is not None:
            c.envs.render()
            time.sleep(render)
        done = terminations | truncations
        if not np.count_nonzero(done):  # count_nonzero: a C call, several times cheaper than .any()
            return env_ids[:0]
        finished = env_ids[done]
        returns.extend(c.buffer.episode_returns[finished].tolist())
        lens.extend(c.buffer.episode_lengths[finished].tolist())
        c.ended(finished)
        c.needs_reset[finished] = True
        return finished
