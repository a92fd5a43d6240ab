"""AllEnvLoop: step a backend that can only step every env at once, and keep the counts exact.

Every transition of every step is recorded (rings, store) and held in the collector's ledger; a call
reports exactly n_step of them (or, per env, its transitions up to its quota-th episode end), and the
rest are reported by later calls. Envs that restart by themselves (NEXT_STEP: the restart is a row of its
own; SAME_STEP: the final observation comes in ``next_obs``) start episodes with no seed. A policy that
wants infos gets each env's part of the step's vector info dict (``split_vector_infos``).
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

import numpy as np

from vcollect.collecting.step_context import CollectCall, StepContext
from vcollect.envs import AllEnvStep
from vcollect.infos import split_vector_infos
from vcollect.spaces import flatten_batch, unflatten_batch

__all__ = ["AllEnvLoop", "StepsAllEnvs"]


@runtime_checkable
class StepsAllEnvs(Protocol):
    """What a backend that declares ``steps_all_envs`` offers."""

    def step_all(self, actions: Any) -> AllEnvStep:
        """Step every env once; report transitions and the episodes envs restarted themselves."""
        ...


class AllEnvLoop:
    """The step loop of backends that step all envs at once (``capabilities.steps_all_envs``)."""

    def __init__(self, context: StepContext) -> None:
        self.ctx = context
        self.autoresets = context.capabilities.autoresets
        envs = context.envs
        if not isinstance(envs, StepsAllEnvs):
            raise TypeError(f"{type(envs).__name__} declares steps_all_envs but has no step_all(actions)")
        self.envs: StepsAllEnvs = envs

    def collect_steps(self, n_step: int, call: CollectCall) -> int:
        ledger = self._prepare(call)
        held = len(ledger)
        while held < n_step:
            self.step(call)
            now = len(ledger)
            call.bar.update(min(now, n_step) - held)
            held = now
        return ledger.take_steps(n_step, call.returns, call.lens)

    def collect_episodes(self, quota: np.ndarray, call: CollectCall) -> int:
        ledger = self._prepare(call)
        shown = self.progress(0, quota)
        while (ledger.episode_ends < quota).any():
            self.step(call)
            shown = self.progress(0, quota, call.bar, shown)
        return ledger.take_episodes(quota, call.returns, call.lens)[0]

    def _prepare(self, call: CollectCall) -> Any:
        """Reset the envs that wait for it (backends that restart envs themselves never wait)."""
        c = self.ctx
        if not self.autoresets:
            c.reset_pending(c.all_ids, call.reset_options)
        return c.ledger

    def progress(self, n_step: int, quota: np.ndarray | None, bar: Any = None, shown: int = 0) -> int:
        """What the progress bar counts of what is recorded (steps up to n_step, or with quotas the episodes
        within them); with a bar, moves it on from ``shown``."""
        ledger = self.ctx.ledger
        now = min(len(ledger), n_step) if quota is None else int(np.minimum(ledger.episode_ends, quota).sum())
        if bar is not None:
            bar.update(now - shown)
        return now

    def step(self, call: CollectCall) -> None:
        """One step of every env (``step_all``), recorded."""
        c = self.ctx
        actions = c.actor.actions(c.all_ids, call.random)
        step = self.envs.step_all(actions)
        self.record(actions, step, call.random, call.render, call.reset_options)

    def _run_step_hook(self, actions: Any, step: AllEnvStep) -> None:
        """Show the step's transition rows to the step hook; write back the rewards and next observations it
        leaves (NEXT_STEP restart rows are not transitions and are not shown)."""
        c, rows = self.ctx, step.transitions
        if rows is None:
            same = step.next_obs is step.obs  # no SAME_STEP final observations: the policy acts on the hook's
            step.next_obs, step.rewards = c.run_step_hook(
                c.all_ids, actions, step.next_obs, step.rewards, step.terminations, step.truncations
            )
            if same:
                step.obs = step.next_obs
            return
        obs_space, act_space = c.observation_space, c.action_space
        ids = c.all_ids[rows]
        next_obs, rewards = c.run_step_hook(
            ids,
            unflatten_batch(act_space, [leaf[rows] for leaf in flatten_batch(act_space, actions)]),
            unflatten_batch(obs_space, [leaf[rows] for leaf in flatten_batch(obs_space, step.next_obs)]),
            step.rewards[rows], step.terminations[rows], step.truncations[rows],
        )
        step.rewards = step.rewards.copy()
        step.rewards[rows] = rewards
        for leaf, new in zip(flatten_batch(obs_space, step.next_obs), flatten_batch(obs_space, next_obs)):
            leaf[rows] = new

    def record(
        self,
        actions: Any,
        step: AllEnvStep,
        random: bool,
        render: float | None,
        reset_options: dict[str, Any] | None,
        *,
        policy_state: bool = True,
    ) -> None:
        """Record one step of every env: rings (one write per array, NEXT_STEP restart rows as the first
        observations of their episodes), ledger, store, restarts. ``policy_state`` False where the restarted
        envs' policy state was reset already."""
        c = self.ctx
        all_ids = c.all_ids
        c.next_rounds()
        if c.on_step_hook is not None:
            self._run_step_hook(actions, step)
        obs, started, transitions = step.obs, step.started, step.transitions
        if c.validate:  # once for every row (first observations of restarted episodes included)
            c.check_obs(obs, all_ids, "an observation")
            if step.next_obs is not obs:
                c.check_obs(step.next_obs, all_ids, "a final observation")
            if transitions is None:
                c.check_rewards(step.rewards, all_ids)
            else:  # restart rows carry no reward
                c.check_rewards(step.rewards[transitions], all_ids[transitions])
        if transitions is None:  # every row is a transition (SAME_STEP restarts are started below)
            c.buffer.add_all(actions, step.rewards, step.terminations, step.truncations, step.next_obs)
        else:  # NEXT_STEP: the other rows are the restarts of the envs in `started`
            c.buffer.add_all(actions, step.rewards, step.terminations, step.truncations, obs, started, transitions)
        if render is not None:
            c.envs.render()
            time.sleep(render)
        finished = step.ended.nonzero()[0]
        if finished.size:
            c.ended(finished)
            if not self.autoresets:  # envs that restart by themselves never wait for a reset
                c.needs_reset[finished] = True
        c.ledger.push_rows(
            transitions, step.ended, c.buffer.episode_returns[finished], c.buffer.episode_lengths[finished]
        )
        if started.size:
            if transitions is None:
                space = c.observation_space
                first = unflatten_batch(space, [leaf[started] for leaf in flatten_batch(space, obs)])
                c.start_episodes(started, first, [None] * started.size, None, check=False, remember=False)
            else:
                c.self_started(started, policy_state=policy_state)
        if random:
            c.actor.forget_obs()
        else:
            c.actor.remember(all_ids, obs)
        if c.actor.wants_infos:  # a restart row's info is its reset's (SAME_STEP: the step's in final_info)
            c.actor.remember_infos(all_ids, split_vector_infos(step.infos, c.num_envs))
        if finished.size and not self.autoresets:
            c.reset_envs(finished, reset_options)
