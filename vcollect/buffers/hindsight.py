"""Hindsight experience replay (HER, arXiv:1707.01495) over the rings: sampled transitions of
goal-conditioned envs relabelled with goals their own episode achieved later, rewards recomputed.

Goal-conditioned observations are Dicts with ``observation``, ``achieved_goal`` and ``desired_goal``, as
gymnasium-robotics lays them out. The strategy is HER's "future" one with Tianshou 2.0.1's
``HERReplayBuffer`` semantics (online, at sampling time; ``horizon``, ``future_k``, ``compute_reward_fn``):

- Each sampled step row t looks ahead over at most ``horizon - 1`` further steps of its episode (stopping
  after a step that terminated or truncated it, and at the env's newest step): the last of those steps is
  its *window end*. Sampled rows of one env whose window ends at the same step form a *group*.
- A fraction ``1 - 1 / future_k`` of each env's groups (``int(groups * (1 - 1 / future_k))`` of them, drawn
  without replacement; Tianshou's vector buffer draws per sub-buffer) is relabelled. A relabelled group takes one future step f: its latest sampled row c, plus
  ``round(u * (end - c))`` steps, u uniform in [0, 1); the new goal is the ``achieved_goal`` of the
  observation after step f (a goal the episode reached at c + 1 or later, within the horizon).
- Every sampled row of a relabelled group gets that goal as the ``desired_goal`` of its observation and of
  its next observation, and the reward ``compute_reward_fn(next achieved_goal, new goal)``.

Unlike Tianshou's buffer, which writes the relabelled goals into its storage until the next write, the
ring is never written: only the sampled batch is relabelled (``buffer[indices]`` gives stored data).
Tianshou documents ``horizon`` as the longest episode; with a shorter one, windows of one episode overlap
and its buffer's rewrites of overlapping rows can leave a sampled transition a goal from its past or
unrelabel it. Here every relabelled goal lies in the transition's future within the horizon, whatever
the horizon; with ``horizon`` at least the longest episode both give the same distribution.
The index arithmetic is in :func:`window_ends` and :func:`future_goal_rows`, functions of a ring's flat
columns (:class:`~vcollect.buffers.columns.RingColumns`), as in vcollect.buffers.sampling.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.buffers.ring import VectorRingBuffer, ring_columns, ring_generator
from vcollect.buffers.sampling import check_count, gather_transitions, sample_rows
from vcollect.spaces import leaves

__all__ = ["GOAL_KEYS", "HERVectorRingBuffer", "HindsightRelabeler", "future_goal_rows", "window_ends"]

#: The keys of a goal-conditioned observation (gymnasium-robotics' GoalEnv layout).
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")

RewardFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def window_ends(
    rows: np.ndarray, has: np.ndarray, done: np.ndarray, next_flat: np.ndarray, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each sampled step row's window end: the step row reached by walking forward at most ``horizon - 1``
    steps inside its episode, and how many steps were walked.

    A walk goes on from a step row while its step did not end the episode (``done``: terminated or
    truncated) and the row after it (``next_flat``, wrapping inside the env's own ring) holds a step
    (``has``): the episode's next transition, not its final observation or the env's newest row.

    Args:
        rows: Flat step rows (``env_id * capacity + row``).
        has: Per flat row: it holds a transition.
        done: Per flat row: its step terminated or truncated the episode.
        next_flat: Per flat row: the flat row after it in its env's ring.
        horizon: The window's length in steps (>= 1).

    Returns:
        The window ends' flat rows and the steps walked to them (0 to ``horizon - 1``).
    """
    cur = np.asarray(rows, dtype=np.intp)
    steps = np.zeros(len(cur), dtype=np.intp)
    for _ in range(horizon - 1):
        ahead = next_flat.take(cur)
        live = has.take(ahead) & ~done.take(cur)
        if not np.count_nonzero(live):
            break
        cur = np.where(live, ahead, cur)
        steps += live
    return cur, steps


def future_goal_rows(
    rows: np.ndarray,
    ends: np.ndarray,
    steps: np.ndarray,
    capacity: int,
    future_p: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Which sampled rows are relabelled, and the step row whose next observation gives each its goal.

    Rows sharing a window end (``ends``) form a group; ``int(groups * future_p)`` of each env's groups, drawn
    without replacement, are relabelled; a group's future step is its latest sampled row (the fewest ``steps`` to the
    end) plus ``round(u * those steps)``, u uniform in [0, 1).

    Args:
        rows: Flat step rows sampled.
        ends: Their window ends (:func:`window_ends`).
        steps: The steps from each row to its window end.
        capacity: Rows per ring (a step ``k`` rows ahead of flat row r lies at ``(r % capacity + k) %
            capacity`` in r's ring).
        future_p: The share of groups relabelled, ``1 - 1 / future_k``.
        rng: The generator drawing the groups and the future steps.

    Returns:
        A bool mask of the relabelled rows and, per row, its group's future step row (-1 where not
        relabelled).
    """
    relabelled = np.zeros(len(rows), dtype=bool)
    future = np.full(len(rows), -1, dtype=np.intp)
    if len(rows) == 0:
        return relabelled, future
    groups, group_of = np.unique(ends, return_inverse=True)
    latest = np.full(len(groups), np.iinfo(np.intp).max, dtype=np.intp)  # steps from the latest sampled row
    np.minimum.at(latest, group_of, steps)
    offset = np.round(rng.random(len(groups)) * latest).astype(np.intp)  # steps after the latest row
    future_steps_to_end = latest - offset
    base = groups - groups % capacity
    group_future = base + (groups % capacity - future_steps_to_end) % capacity
    # per env (as Tianshou's vector buffer, each sub-buffer on its own): int(its groups * future_p) of its
    # groups, drawn without replacement (each group ranked by a uniform key within its env)
    env = groups // capacity
    order = np.lexsort((rng.random(len(groups)), env))
    first = np.searchsorted(env[order], env[order])  # the position of each env's first group in that order
    counts = np.bincount(env)
    chosen = np.zeros(len(groups), dtype=bool)
    chosen[order] = (np.arange(len(groups)) - first) < (counts * future_p).astype(np.intp)[env[order]]
    relabelled = chosen[group_of]
    future[relabelled] = group_future[group_of[relabelled]]
    return relabelled, future


def check_goal_space(space: gym.Space[Any]) -> None:
    """A ValueError unless ``space`` is a goal-conditioned Dict (GOAL_KEYS, goals of one shape)."""
    if not isinstance(space, gym.spaces.Dict) or any(key not in space.spaces for key in GOAL_KEYS):
        raise ValueError(
            f"hindsight relabelling needs goal-conditioned Dict observations with keys {list(GOAL_KEYS)} "
            f"(gymnasium-robotics' layout), got {space}"
        )
    achieved, desired = space.spaces["achieved_goal"], space.spaces["desired_goal"]
    if not isinstance(achieved, gym.spaces.Box) or not isinstance(desired, gym.spaces.Box):
        raise ValueError(f"achieved_goal and desired_goal must be Box spaces, got {achieved} and {desired}")
    if achieved.shape != desired.shape:
        raise ValueError(
            f"achieved_goal {achieved.shape} and desired_goal {desired.shape} must have one shape: a relabelled "
            "desired goal is an achieved one"
        )


class HindsightRelabeler:
    """Samples a ring's transitions and relabels them with future achieved goals (see the module's doc).

    Args:
        ring: The rings of a goal-conditioned env (Dict observations with GOAL_KEYS); given spaces when made
            or by a Collector before the first ``sample``.
        compute_reward_fn: ``fn(achieved_goal, desired_goal) -> rewards``, both of shape (n, *goal shape),
            rewards of shape (n,) (gymnasium-robotics' ``env.compute_reward`` with ``info=None``, wrapped).
        horizon: The most steps a relabelled goal lies ahead of its transition plus one (Tianshou's
            ``horizon``: the longest episode).
        future_k: Relabel ``1 - 1 / future_k`` of the groups (Tianshou's ``future_k``, >= 1; 1: none).

    Raises:
        ValueError: A bad ``horizon`` or ``future_k``, or a ring with spaces that are not goal-conditioned.
        TypeError: ``compute_reward_fn`` is not callable.
    """

    def __init__(
        self, ring: VectorRingBuffer, compute_reward_fn: RewardFn, horizon: int, future_k: float = 8.0
    ) -> None:
        if not callable(compute_reward_fn):
            raise TypeError(f"compute_reward_fn must be callable (achieved_goal, desired_goal) -> rewards, got "
                            f"{compute_reward_fn!r}")
        if isinstance(future_k, bool) or not isinstance(future_k, numbers.Real) or not float(future_k) >= 1.0:
            raise ValueError(f"future_k must be a number >= 1 (relabel 1 - 1/future_k of the groups), got {future_k!r}")
        self.ring: VectorRingBuffer = ring
        self.compute_reward_fn: RewardFn = compute_reward_fn
        self.horizon: int = check_count("horizon", horizon, 1)
        self.future_k: float = float(future_k)
        self.future_p: float = 1.0 - 1.0 / self.future_k
        if ring.has_spaces:
            check_goal_space(ring.observation_space)

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> dict[str, Any]:
        """Draw transitions uniformly (as VectorRingBuffer's ``sample``, whatever the ring's own draws) and
        relabel them; for another draw (a PrioritizedVectorRingBuffer's), pass its batch to :meth:`relabel`.

        Args:
            batch_size: How many (0: every stored one).
            rng: The generator for the draw and the relabelling (None: the ring's own).

        Returns:
            The ring's batch, relabelled (see :meth:`relabel`).

        Raises:
            ValueError: Nothing is stored, or the ring's observations are not goal-conditioned.
        """
        columns = ring_columns(self.ring)
        rng = ring_generator(self.ring) if rng is None else rng
        return self.relabel(gather_transitions(columns, sample_rows(columns, batch_size, rng)), rng)

    def relabel(self, batch: dict[str, Any], rng: np.random.Generator | None = None) -> dict[str, Any]:
        """Relabel, in place, a batch the ring's ``sample`` or ``buffer[indices]`` returned (stack_num 1, no
        n-step keys: those would need the relabelled rewards of the steps after each row).

        Args:
            batch: The batch; its ``indices`` are the rows relabelled.
            rng: The generator for the groups and future steps (None: the ring's own).

        Returns:
            ``batch``, with ``desired_goal`` of ``observations`` and ``next_observations`` and ``rewards``
            changed in the relabelled rows, and two keys added: ``relabelled`` (bool per row) and
            ``goal_indices`` (the flat row whose observation's ``achieved_goal`` became the row's desired
            goal; -1 where not relabelled).

        Raises:
            ValueError: The ring's observations are not goal-conditioned, or the batch is stacked.
        """
        ring = self.ring
        space = ring.observation_space
        check_goal_space(space)
        columns = ring_columns(ring)
        assert isinstance(space, gym.spaces.Dict)
        goal_dims = len(space.spaces["desired_goal"].shape or ())
        if "n_step_returns" in batch or np.ndim(batch["observations"]["desired_goal"]) != 1 + goal_dims:
            raise ValueError("relabel takes batches sampled with stack_num=1 and no n_step")
        rng = ring_generator(ring) if rng is None else rng
        rows = np.asarray(batch["indices"], dtype=np.intp)
        done = columns.terminations | columns.truncations
        ends, steps = window_ends(rows, columns.has, done, columns.next_rows, self.horizon)
        relabelled, future = future_goal_rows(rows, ends, steps, ring.capacity, self.future_p, rng)
        goal_rows = np.full(len(rows), -1, dtype=np.intp)
        goal_rows[relabelled] = columns.next_rows.take(future[relabelled])
        if np.count_nonzero(relabelled):
            leaf = _leaf_index(space, "achieved_goal")
            goals = columns.obs[leaf].take(goal_rows[relabelled], axis=0)
            batch["observations"]["desired_goal"][relabelled] = goals
            batch["next_observations"]["desired_goal"][relabelled] = goals
            achieved = batch["next_observations"]["achieved_goal"][relabelled]
            rewards = np.asarray(self.compute_reward_fn(achieved, goals), dtype=np.float64).reshape(-1)
            if rewards.shape != (len(goals),):
                raise ValueError(
                    f"compute_reward_fn returned shape {rewards.shape} for {len(goals)} goals; it returns one reward "
                    "per row"
                )
            batch["rewards"][relabelled] = rewards
        batch["relabelled"] = relabelled
        batch["goal_indices"] = goal_rows
        return batch


def _leaf_index(space: gym.Space[Any], key: str) -> int:
    """The position of Dict key ``key``'s leaf among the space's flat leaves (vcollect.spaces order)."""
    return [leaf.path for leaf in leaves(space)].index((key,))


class HERVectorRingBuffer(VectorRingBuffer):
    """A :class:`VectorRingBuffer` whose ``sample`` relabels goals in hindsight (Tianshou's
    ``HERVectorReplayBuffer(total_size, buffer_num, compute_reward_fn=..., horizon=..., future_k=...)``);
    what it stores and ``buffer[indices]`` are a plain ring's. See vcollect.buffers.hindsight.

    Args:
        num_envs: How many rings (one per env id).
        compute_reward_fn: ``fn(achieved_goal, desired_goal) -> rewards`` (HindsightRelabeler's).
        horizon: Tianshou's ``horizon`` (HindsightRelabeler's).
        future_k: Tianshou's ``future_k`` (HindsightRelabeler's).
        capacity: Rows per ring; or give ``total_size`` instead.
        observation_space: The envs' goal-conditioned observation space (None: set by a Collector).
        action_space: The envs' single action space.
        total_size: Rows over all rings, as Tianshou's ``total_size``.
        seed: Seeds the generator ``sample`` draws and relabels with.

    Raises:
        ValueError: Observations that are not goal-conditioned, or VectorRingBuffer's and
            HindsightRelabeler's reasons.
    """

    def __init__(
        self,
        num_envs: int,
        compute_reward_fn: RewardFn,
        horizon: int,
        future_k: float = 8.0,
        *,
        capacity: int | None = None,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        total_size: int | None = None,
        seed: int | np.random.SeedSequence | None = None,
    ) -> None:
        if observation_space is not None:
            check_goal_space(observation_space)
        super().__init__(
            num_envs, capacity, observation_space, action_space, total_size=total_size, seed=seed
        )
        self.relabeler = HindsightRelabeler(self, compute_reward_fn, horizon, future_k)

    def bind_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        """As VectorRingBuffer's, for goal-conditioned observations only.

        Args:
            observation_space: The envs' goal-conditioned observation space.
            action_space: The envs' single action space.

        Raises:
            ValueError: The observations are not goal-conditioned, or the ring has its spaces already.
        """
        check_goal_space(observation_space)
        super().bind_spaces(observation_space, action_space)

    def sample(
        self, batch_size: int, rng: np.random.Generator | None = None, *, stack_num: int = 1,
        n_step: int | None = None, gamma: float | None = None,
    ) -> dict[str, Any]:
        """Draw transitions uniformly and relabel them (HindsightRelabeler.relabel).

        Args:
            batch_size: How many (0: every stored one).
            rng: The generator to draw and relabel with (None: the ring's own).
            stack_num: 1 only (relabelled stacks are not supported).
            n_step: None only (n-step returns over relabelled rewards are not supported).
            gamma: None only.

        Returns:
            The batch, relabelled, with ``relabelled`` and ``goal_indices``.

        Raises:
            ValueError: Nothing is stored, or ``stack_num``/``n_step`` asked for.
        """
        if stack_num != 1 or n_step is not None or gamma is not None:
            raise ValueError(
                "HERVectorRingBuffer.sample relabels single transitions: stack_num=1 and no n_step/gamma (sample "
                "from a plain VectorRingBuffer for stacks or n-step returns)"
            )
        generator = self._rng if rng is None else rng
        return self.relabeler.relabel(super().sample(batch_size, generator), generator)
