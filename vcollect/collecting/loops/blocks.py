"""BlockLoop: the all-env loop for NEXT_STEP backends, with steps staged in a StepBlock.

Per vector step only the env's step (``step_into``: its results copied into the block's next row, or its
observation arrays kept by reference where the backend hands them over: ``capabilities.hands_over_obs``)
and the actions' row copy happen; the rings (``RingWriter.add_steps``: one write per array), the ledger, the
store queue and (random actions, or a policy that reads no observation values) the observation checks take
up to a block of steps at once. A call stops after the same step as the per-step loop would, and every
staged step is recorded before it returns, also when it raises. While rendering, while a step or
episode-done hook is set (a hook sees each step before it is recorded), or for a policy that wants infos (a
block keeps no infos), steps are recorded one by one (AllEnvLoop).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium.spaces import Dict, Tuple

from vcollect.collecting.loops.all_envs import AllEnvLoop
from vcollect.collecting.step_context import CollectCall, StepContext
from vcollect.envs.steps import StepBlock
from vcollect.spaces import flatten_batch, leaves, unflatten_batch

__all__ = ["BLOCK_BYTES", "BLOCK_STEPS", "HOLD_OBS_BYTES", "BlockLoop", "StagesBlocks"]

BLOCK_STEPS = 64
"""Steps staged in a StepBlock before they go to the rings, ledger and store."""

BLOCK_BYTES = 4 << 20
"""Most bytes of observations a StepBlock holds (large observations make shorter blocks)."""

HOLD_OBS_BYTES = 32 << 10
"""Bytes of observations per vector step from which arrays a backend hands over are kept rather than copied
(4 stacked Atari frames: 56 KB for 2 envs, 225 KB for 8); below it one copy into the block is cheaper than
writing and checking the rows one by one."""


@runtime_checkable
class StagesBlocks(Protocol):
    """What a backend that declares ``steps_in_blocks`` offers. One that also declares ``hands_over_obs``
    (its ``step_into`` passes observation arrays new every step that it never writes to again) has them
    kept by the block (``StepBlock(hold_obs=True)``) instead of copied, where a step's observations are
    large (``HOLD_OBS_BYTES``)."""

    def step_into(self, actions: Any, block: StepBlock) -> None:
        """Step every env once, its results written into the block's next row."""
        ...


class BlockLoop(AllEnvLoop):
    """The step loop of backends that declare ``capabilities.steps_in_blocks`` (see the module docstring)."""

    def __init__(self, context: StepContext) -> None:
        super().__init__(context)
        c = context
        if not isinstance(c.envs, StagesBlocks):
            raise TypeError(f"{type(c.envs).__name__} declares steps_in_blocks but has no step_into(actions, block)")
        self.stager: StagesBlocks = c.envs
        step_bytes = c.num_envs * sum(
            int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves(c.observation_space)
        )
        size = max(1, min(BLOCK_STEPS, c.buffer.capacity - 1, BLOCK_BYTES // max(1, step_bytes)))
        hold = c.capabilities.hands_over_obs and step_bytes >= HOLD_OBS_BYTES
        self.block = StepBlock(c.num_envs, size, c.observation_space, c.action_space, hold_obs=hold)
        self._flat_obs = self.block.obs_leaf_count == 1 and not isinstance(c.observation_space, (Dict, Tuple))

    def collect_steps(self, n_step: int, call: CollectCall) -> int:
        if call.render is not None or self.ctx.hooked or self.ctx.actor.wants_infos:
            return super().collect_steps(n_step, call)
        self._prepare(call)
        self._run(n_step, None, call)
        return self.ctx.ledger.take_steps(n_step, call.returns, call.lens)

    def collect_episodes(self, quota: np.ndarray, call: CollectCall) -> int:
        if call.render is not None or self.ctx.hooked or self.ctx.actor.wants_infos:
            return super().collect_episodes(quota, call)
        self._prepare(call)
        self._run(0, quota, call)
        return self.ctx.ledger.take_episodes(quota, call.returns, call.lens)[0]

    def _run(self, goal: int, quota: np.ndarray | None, call: CollectCall) -> None:
        """Stage and record steps until the ledger holds ``goal`` transitions (quota None) or every env's
        quota of episode ends."""
        c, block = self.ctx, self.block
        ledger, all_ids, random, n, actor = c.ledger, c.all_ids, call.random, c.num_envs, c.actor
        single_action = len(block.actions) == 1
        by_steps = quota is None
        held = len(ledger)
        # n_episode: episodes each env still owes, less those ending in the block
        owed = np.zeros(0, np.int64) if quota is None else quota - ledger.episode_ends
        done = self.progress(goal, quota)
        size = block.size
        action_rows = block.action_rows
        # a policy that reads no observation values has them checked with the block, and its rows written over
        check_rows = c.validate and actor.reads_obs
        renew = not random and actor.reads_obs
        acted_on = None  # the rows of the step staged last (the policy acts on them next), once checked
        try:
            while held < goal if by_steps else bool((owed > 0).any()):
                actions = actor.actions(all_ids, random, acted_on)
                k = block.count
                self.stager.step_into(actions, block)
                if single_action:  # row k was just staged: its one action leaf written in place
                    action_rows[k][...] = actions
                else:
                    block.set_actions(k, flatten_batch(c.action_space, actions))
                if not random:  # the policy acts next on these observations (checked now, if it reads them)
                    row = block.obs_leaf_row(k)  # views (renewed blocks for a policy that reads them) or held arrays
                    if check_rows:
                        self._check_row(k, row)
                    if actor.state is not None:
                        self._reset_restarted_state(k)
                    acted_on = row
                if not by_steps:
                    owed -= block.done_rows(k + 1)[k]
                if block.count == size:
                    self._flush(random, renew)
                    done = self.progress(goal, quota, call.bar, done)
                    held = len(ledger)
                    if quota is not None:
                        owed = quota - ledger.episode_ends
                    size = block.size
                elif by_steps and held + (k + 1) * n >= goal and held + block.transitions() >= goal:
                    break  # (every row a transition would not be enough: no need to count them before)
        finally:
            try:
                self._flush(random, renew)
            finally:
                if not renew:  # the block's rows are written over by the next call: the actor reads the rings'
                    actor.forget_obs()
                elif acted_on is not None:  # rows of renewed blocks are never written over: the next call's
                    actor.use_rows(acted_on)
        self.progress(goal, quota, call.bar, done)

    def _check_row(self, k: int, row: list[np.ndarray]) -> None:
        """ObservationError if row k's observations (its leaves) do not fit the space; the block's rows up to
        k are checked then."""
        c = self.ctx
        obs = row[0] if self._flat_obs else unflatten_batch(c.observation_space, row)
        if c.obs_problem(obs) is not None:
            c.check_obs(obs, c.all_ids, "an observation")
        self.block.checked = k + 1

    def _reset_restarted_state(self, k: int) -> None:
        """Reset the policy state of the envs restarting in row k (their seeds are cleared when the block is
        recorded)."""
        restarted = self.block.restart_row(k).nonzero()[0]
        if restarted.size:
            self.ctx.actor.reset_state(restarted)

    def _flush(self, random: bool, renew: bool) -> None:
        """Record the block's steps and empty it (``renew``: with fresh observation arrays, as a policy that
        reads observations may still hold views of the rows it acted on; ``random``: the actions were random).
        Observations not checked yet are checked first: the steps before the first bad one are recorded, then
        ObservationError."""
        c, block = self.ctx, self.block
        k = block.count
        if k == 0:
            return
        bad = None
        if c.validate and block.checked < k:
            bad = self._first_bad_row(block.checked, k)
        if c.validate and not math.isfinite(float(np.add.reduce(block.rewards[:k], axis=None))):
            # restart rows carry no reward: only transitions' rewards must be finite
            unfit = ~np.isfinite(block.rewards[:k]) & ~block.restarts(k)
            if unfit.any():
                row = int(unfit.any(axis=1).argmax())
                bad = row if bad is None else min(bad, row)
        if bad is not None:
            k = bad
        bad_obs = None if bad is None else block.obs_row(bad)
        bad_rewards = None if bad is None else (block.rewards[bad].copy(), block.restart_row(bad).copy())
        try:
            if k:
                self._record_block(k, random)
        finally:
            if renew:
                block.renew()
            else:
                block.clear()
        if bad_obs is not None and bad_rewards is not None:
            c.check_obs(bad_obs, c.all_ids, "an observation")
            rewards, restarting = bad_rewards
            c.check_rewards(rewards[~restarting], c.all_ids[~restarting])

    def _first_bad_row(self, first: int, stop: int) -> int | None:
        """The first of rows [first, stop) with an observation outside the space, None if none: the rows
        checked as one batch (held rows one by one: joining them would copy them)."""
        c, block = self.ctx, self.block
        if not block.hold_obs and c.obs_problem(block.obs_rows(first, stop)) is None:
            return None
        return next((j for j in range(first, stop) if c.obs_problem(block.obs_row(j)) is not None), None)

    def _record_block(self, k: int, random: bool) -> None:
        """The first k steps of the block into the rings (one write per array), the ledger and the store.
        With a policy (not ``random``), restarted envs' policy state was reset step by step already."""
        c, block = self.ctx, self.block
        c.next_rounds(k)
        restarts = block.restarts(k)
        ends = c.ring.add_steps(
            [leaf[:k] for leaf in block.actions],
            block.rewards[:k],
            block.terminations[:k],
            block.truncations[:k],
            block.obs_leaves(k),
            restarts,
        )
        restarted = np.flatnonzero(restarts.any(axis=0))
        c.ledger.push_rows(~restarts if restarted.size else None, ends.mask, ends.returns, ends.lengths)
        if c.writer is not None and ends.env_ids.size:
            c.writer.block_ended(ends, restarts)
        if c.tally is not None and ends.env_ids.size:
            c.tally.add(ends.env_ids, ends.lengths, ends.returns)
        if restarted.size:
            c.self_started(restarted, policy_state=random)
