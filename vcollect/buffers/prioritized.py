"""PrioritizedVectorRingBuffer: the rings sampled in proportion to priorities (prioritized replay).

Priorities live in a :class:`~vcollect.buffers.sum_tree.SumTree` with one leaf per ring row: a step row
has ``priority ** alpha``, any other row 0. New step rows get the largest priority given so far, as
Tianshou's PrioritizedReplayBuffer. The writes only note which rows they touched (one small array per
write, no tree work in the collection path); the tree takes them in one vectorised update before the next
``sample`` or ``update_weight``, each at the priority that was the largest when it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from vcollect.buffers.checkpoint import CheckpointReader
from vcollect.buffers.episodes import EpisodeEnds
from vcollect.buffers.preload import EpisodeSource
from vcollect.buffers.ring import StorageNeedsSpaces, VectorRingBuffer
from vcollect.buffers.ring_slices import HeldEpisodes, draw_weighted, gather_slices
from vcollect.buffers.sampling import (
    check_count,
    check_rows,
    draw_priority_rows,
    every_step_row,
    gather_transitions,
)
from vcollect.buffers.sum_tree import SumTree
from vcollect.held_rows import HeldRows
from vcollect.slices import (
    Pad,
    SliceRequest,
    Stacks,
    check_slice_request,
    check_stacks,
    check_windows,
    slice_generator,
    window_counts,
)

# Rounds of drawing window starts from the sum tree (rejecting those too near an episode's end) before the
# remaining windows are drawn from every window's weight.
_SLICE_ROUNDS = 4

# Added to |priority| so that no transition's probability becomes 0 (Tianshou adds float32's eps too).
_EPS = float(np.finfo(np.float32).eps)


class PrioritizedVectorRingBuffer(VectorRingBuffer):
    """A :class:`VectorRingBuffer` whose ``sample`` draws step rows with probability proportional to
    ``priority ** alpha`` and adds importance weights: ``weights = (P_j / min_batch P) ** -beta``, the
    batch's largest weight 1 (Tianshou's ``weight_norm=True``); with ``weight_norm=False`` the paper's
    unnormalised ``(N * P_j / sum P) ** -beta``, N the transitions stored (Tianshou's divides by its
    smallest raw priority instead, which mixes priorities with and without alpha; vcollect does not).

    ``update_weight(indices, priorities)`` sets new priorities (``|p| + eps``) of rows a ``sample`` returned.
    Stale indices, rows rewritten since the ``sample`` that last returned them (the collector moved on
    between sampling and the update), are ignored: their new transition keeps the priority it was given
    when written. ``update_weight`` returns which indices it applied.

    Args:
        num_envs: How many rings (one per env id).
        capacity: Rows per ring; or give ``total_size`` instead.
        observation_space: The envs' single observation space (None: set later; give both spaces or neither).
        action_space: The envs' single action space.
        alpha: The priority exponent (> 0).
        beta: The importance-weight exponent (>= 0).
        weight_norm: Normalise the weights by the batch's largest (Tianshou's ``weight_norm``).
        keep_overflow: As :class:`VectorRingBuffer`'s.
        total_size: Rows over all rings, as Tianshou's ``total_size``.
        seed: Seeds the generator ``sample`` draws with.

    Raises:
        ValueError: ``alpha <= 0`` or ``beta < 0``, or :class:`VectorRingBuffer`'s reasons.
    """

    def __init__(
        self,
        num_envs: int,
        capacity: int | None = None,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        *,
        alpha: float,
        beta: float,
        weight_norm: bool = True,
        keep_overflow: bool = False,
        total_size: int | None = None,
        seed: int | np.random.SeedSequence | None = None,
    ) -> None:
        if not float(alpha) > 0.0:
            raise ValueError(f"alpha must be > 0 (priority ** alpha), got {alpha}")
        if not float(beta) >= 0.0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.alpha, self.beta, self.weight_norm = float(alpha), float(beta), bool(weight_norm)
        self.max_priority = 1.0
        super().__init__(
            num_envs, capacity, observation_space, action_space,
            keep_overflow=keep_overflow, total_size=total_size, seed=seed,
        )

    if not TYPE_CHECKING:  # the priorities' storage, set by _allocate with the spaces: reading it before raises
        _tree = _fresh = _touched = _touched_rows = StorageNeedsSpaces()

    def _allocate(self) -> None:
        rows = self.num_envs * self.capacity
        self._tree = SumTree(rows)
        self._fresh = np.zeros(rows, dtype=bool)  # a sample returned the row and it was not rewritten since
        self._touched: list[np.ndarray] = []  # rows written since the tree last took them
        self._touched_rows = 0
        super()._allocate()

    def set_beta(self, beta: float) -> None:
        """Change beta (e.g. annealed towards 1 over training), as Tianshou's ``set_beta``.

        Args:
            beta: The new importance-weight exponent.

        Raises:
            ValueError: ``beta < 0``.
        """
        if not float(beta) >= 0.0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.beta = float(beta)

    # ------------------------------------------------------------------------- writes: note the rows
    def reset(self) -> None:
        """Forget everything stored, priorities included (every earlier index becomes stale)."""
        super().reset()
        self._tree.reset()
        self._fresh.fill(False)
        self._touched.clear()
        self._touched_rows = 0

    def _note(self, rows: np.ndarray) -> None:
        self._touched.append(rows)
        self._touched_rows += rows.size
        if self._touched_rows > self._tree.size:  # bound the notes of a long collection without sampling
            self._sync()

    def start_episodes(self, env_ids: np.ndarray, obs_batch: Any) -> None:
        """As :meth:`VectorRingBuffer.start_episodes`, noting the rows written for the priority tree.

        Args:
            env_ids: Distinct env ids.
            obs_batch: Their first observations, batched in ``env_ids`` order.
        """
        super().start_episodes(env_ids, obs_batch)
        self._note(self._columns.last_rows[env_ids])

    def add(self, env_ids: np.ndarray, actions: Any, rewards: Any, terminations: Any, truncations: Any,
            next_obs: Any) -> None:
        """As :meth:`VectorRingBuffer.add`, noting the rows written for the priority tree.

        Args:
            env_ids: Distinct env ids, each with a started episode.
            actions: The actions taken, batched in ``env_ids`` order.
            rewards: The rewards that followed.
            terminations: Whether each episode terminated.
            truncations: Whether each episode was truncated.
            next_obs: The observations that followed, batched.
        """
        env_ids = np.asarray(env_ids)
        cols = self._columns
        before = cols.last_rows[env_ids]
        super().add(env_ids, actions, rewards, terminations, truncations, next_obs)
        self._note(np.concatenate([before, cols.last_rows[env_ids]]))

    def add_all(self, actions: Any, rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray,
                next_obs: Any, started: np.ndarray | None = None, stepped: np.ndarray | None = None) -> None:
        """As :meth:`VectorRingBuffer.add_all`, noting the rows written for the priority tree.

        Args:
            actions: Every env's action, batched in env id order.
            rewards: Every env's reward.
            terminations: Every env's termination flag.
            truncations: Every env's truncation flag.
            next_obs: Every env's next observation (a restarting env's first one), batched.
            started: Ascending env ids that begin a new episode with this row (None: none).
            stepped: The bool mask of the other envs, where the caller has it.
        """
        cols = self._columns
        before = cols.last_rows.copy()
        super().add_all(actions, rewards, terminations, truncations, next_obs, started, stepped)
        self._note(np.concatenate([before, cols.last_rows]))

    def _add_steps(self, actions: list[np.ndarray], rewards: np.ndarray, terminations: np.ndarray,
                  truncations: np.ndarray, next_obs: Sequence[np.ndarray | HeldRows],
                  restarts: np.ndarray) -> EpisodeEnds:
        before = self._columns.last_rows.copy()
        ends = super()._add_steps(actions, rewards, terminations, truncations, next_obs, restarts)
        c = self.capacity
        base = before - before % c
        self._note((base + (before - base + np.arange(len(rewards) + 1)[:, None]) % c).reshape(-1))
        return ends

    def extend_from(self, dataset: EpisodeSource, episodes: Iterable[int] | None = None) -> None:
        """As :meth:`VectorRingBuffer.extend_from`, the rows written given the largest priority so far.

        Args:
            dataset: A vcollect ``Dataset`` (or a view of one).
            episodes: Global episode ids to preload, in order (None: all of the dataset's).
        """
        self._note(self._preload(dataset, episodes))

    # ------------------------------------------------------------------------------------ checkpoints
    def _checkpoint_header(self) -> dict[str, Any]:
        self._sync()  # every row at its priority: the notes need not be saved
        return {**super()._checkpoint_header(), "alpha": self.alpha, "beta": self.beta,
                "weight_norm": self.weight_norm, "max_priority": self.max_priority}

    def _checkpoint_arrays(self) -> dict[str, np.ndarray]:
        return {**super()._checkpoint_arrays(), "priority/leaves": self._tree.leaves(), "priority/fresh": self._fresh}

    @classmethod
    def _checkpoint_kwargs(cls, header: Mapping[str, Any]) -> dict[str, Any]:
        return {**super()._checkpoint_kwargs(header), "alpha": float(header["alpha"]), "beta": float(header["beta"]),
                "weight_norm": bool(header["weight_norm"])}

    def _restore(self, ckpt: CheckpointReader) -> None:
        super()._restore(ckpt)
        ckpt.read_into("priority/fresh", self._fresh)
        leaves = np.empty(self._tree.size, dtype=np.float64)
        ckpt.read_into("priority/leaves", leaves)
        self._tree.set(np.arange(self._tree.size), leaves)
        self.max_priority = float(ckpt.header["max_priority"])

    def _sync(self) -> None:
        """Give the rows written since the last sync their priority: the largest so far if they hold a step."""
        if not self._touched:
            return
        rows = np.concatenate(self._touched)
        self._touched.clear()
        self._touched_rows = 0
        self._fresh[rows] = False
        self._tree.set(rows, np.where(self._columns.has[rows], self.max_priority**self.alpha, 0.0))

    # ----------------------------------------------------------------------------- sampling, updates
    def sample(
        self, batch_size: int, rng: np.random.Generator | None = None, *, stack_num: int = 1,
        n_step: int | None = None, gamma: float | None = None,
    ) -> dict[str, Any]:
        """As :meth:`VectorRingBuffer.sample`, rows drawn in proportion to their priorities.

        Args:
            batch_size: How many (0: every stored row, in order).
            rng: The generator to draw with (None: the ring's own).
            stack_num: Stack observations this deep.
            n_step: With ``gamma``, add n-step returns.
            gamma: The discount of the n-step returns.

        Returns:
            :meth:`VectorRingBuffer.sample`'s dict, with ``weights`` (importance weights, float64).

        Raises:
            ValueError: Nothing is stored, or bad ``batch_size`` / ``stack_num`` / ``n_step`` / ``gamma``.
        """
        self._sync()
        cols = self._columns
        if check_count("batch_size", batch_size, 0) == 0:  # every stored transition, with its weight
            rows = every_step_row(cols)
            p = self._tree[rows]
            p_min = float(p.min())
        else:
            rows, p, p_min = draw_priority_rows(self._tree, batch_size, self._rng if rng is None else rng)
        batch = gather_transitions(cols, rows, stack_num, n_step, gamma)
        self._fresh[rows] = True  # after the gather, which refuses bad arguments
        # p is the batch's own array of leaf values: the weights are computed in it
        if self.weight_norm:
            p *= 1.0 / p_min
        else:
            p *= np.count_nonzero(cols.has) / self._tree.total
        batch["weights"] = np.power(p, -self.beta, out=p)
        return batch

    def sample_slices(
        self, batch_size: int, length: int, *, pad: Pad = "none", by: Literal["window", "episode"] = "window",
        gamma: float = 1.0, stack_num: int = 1, priority: Literal["first", "max"] = "first",
        seed: int | None = None, rng: np.random.Generator | None = None, stacks: Stacks = "copy",
    ) -> dict[str, Any]:
        """As :meth:`VectorRingBuffer.sample_slices`, each window drawn in proportion to the priority
        (``priority ** alpha``) of its first step, or of the largest over its steps (``priority="max"``), with
        importance ``weights`` per window, the batch's largest 1.

        With ``priority="first"`` and ``pad`` "none" or "end", starts are drawn from the sum tree (cost
        grows with the batch; starts too near an episode's end are drawn again); otherwise every window's
        weight is taken (cost grows with the steps held).

        Args:
            batch_size: How many windows (0: an empty batch of the right shapes).
            length: Steps per window.
            pad: Where windows may be padded: "none", "start", "end" or "both".
            by: Only "window" (windows are drawn by priority).
            gamma: The discount of ``returns_to_go``.
            stack_num: Stack observations this deep.
            priority: "first" (the window's first step's) or "max" (the largest of its steps').
            seed: Seeds a generator for this call (else ``rng``, else the ring's own).
            rng: The generator to draw with.
            stacks: "copy" or "view", as :meth:`VectorRingBuffer.sample_slices`.

        Returns:
            :meth:`VectorRingBuffer.sample_slices`' dict with ``weights`` (float64, one per window). Update
            priorities with the rows of ``indices`` (e.g. ``indices[:, 0]`` where ``mask[:, 0]``).

        Raises:
            SliceLengthError: ``pad="none"`` and every episode held is shorter than ``length``.
            ValueError: A bad argument.
        """
        request = check_slice_request(batch_size, length, pad, by, gamma)
        if request.by != "window":
            raise ValueError("a prioritized ring draws windows by priority: use by='window' (or a VectorRingBuffer "
                             "to draw episodes uniformly)")
        if priority not in ("first", "max"):
            raise ValueError(f"priority must be 'first' (the window's first step's) or 'max', got {priority!r}")
        view = check_stacks(stacks)
        gen = slice_generator(rng, seed, self._rng)
        self._sync()
        episodes = self._episodes.held()
        if request.batch_size == 0:
            which = starts = np.zeros(0, dtype=np.int64)
            p = np.zeros(0)
        elif priority == "first" and request.pad in ("none", "end"):
            which, starts, p = self._draw_starts(episodes, request, gen)
        else:
            which, starts, p = draw_weighted(episodes, self._tree[episodes.all_rows()], request, priority, gen)
        batch = gather_slices(self._columns, episodes, which, starts, request, stack_num, view)
        rows = batch["indices"]
        self._fresh[rows[rows >= 0]] = True
        batch["weights"] = np.power(p / p.min(), -self.beta) if p.size else p
        return batch

    def _draw_starts(self, episodes: HeldEpisodes, request: SliceRequest, rng: np.random.Generator,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows drawn by their first step's priority from the sum tree: rows drawn, those whose window
        would run past its episode's end (``pad="none"``) drawn again; what a few rounds miss is drawn from
        every window's weight. The kept draws, in order, are independent draws of valid windows."""
        size, length = request.batch_size, request.length
        counts = window_counts(episodes.lengths, length, request.pad)
        check_windows(counts, episodes.lengths, request, episodes.describe)
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        have, drawn, share = 0, 0, 1.0
        for _ in range(_SLICE_ROUNDS):
            want = size - have if share == 1.0 else int((size - have) / max(share, 1e-3) * 1.25) + 8
            rows, leaf, _ = draw_priority_rows(self._tree, want, rng)
            which, starts = episodes.locate(rows)
            drawn += want
            if request.pad == "none":
                ok = starts + length <= episodes.lengths.take(which)
                which, starts, leaf = which[ok], starts[ok], leaf[ok]
            kept.append((which, starts, leaf))
            have += which.size
            share = have / drawn
            if have >= size:
                break
        if have < size:
            kept.append(draw_weighted(episodes, self._tree[episodes.all_rows()],
                                      SliceRequest(size - have, length, request.pad, "window", request.gamma),
                                      "first", rng)[:3])
        which, starts, leaf = (np.concatenate(part)[:size] for part in zip(*kept))
        return which, starts, leaf

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """The current ``priority ** alpha`` of some rows.

        Args:
            indices: Flat row indices (a batch's ``indices``).

        Returns:
            Their ``priority ** alpha`` (0 for rows holding no step).

        Raises:
            IndexError: An index outside the rings.
        """
        self._sync()
        return self._tree[self._check_indices(indices)]

    def update_weight(self, indices: np.ndarray, priorities: Any) -> np.ndarray:
        """Set the priorities of rows ``indices`` to ``|priorities| + eps``.

        Indices whose rows were rewritten since they were sampled are ignored (see the class docstring).

        Args:
            indices: Flat row indices, from a batch's ``indices``.
            priorities: One per index, numpy or a torch tensor (e.g. TD errors).

        Returns:
            The bool mask of the indices applied.

        Raises:
            ValueError: Not one priority per index, or a priority that is NaN or infinite.
            IndexError: An index outside the rings.
        """
        idx = self._check_indices(indices)
        if hasattr(priorities, "detach"):  # a torch tensor, maybe on a device or needing grad
            priorities = priorities.detach().cpu().numpy()
        p = np.abs(np.asarray(priorities, dtype=np.float64).reshape(-1))  # a new array: changed in place below
        if p.shape != idx.shape:
            raise ValueError(f"update_weight got {idx.size} indices but {p.size} priorities; give one per index")
        if not idx.size:
            return np.ones(0, dtype=bool)
        top = float(p.max())
        if not top < np.inf:  # NaN fails the comparison too
            raise ValueError("update_weight got priorities that are NaN or infinite; check the TD errors")
        self._sync()
        fresh = self._fresh.take(idx)
        if not fresh.all():
            idx, p = idx[fresh], p[fresh]
            if not idx.size:
                return fresh
            top = float(p.max())
        p += _EPS
        self._tree.set(idx, p if self.alpha == 1.0 else np.power(p, self.alpha, out=p))
        self.max_priority = max(self.max_priority, top + _EPS)
        return fresh

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        return check_rows(indices, self._tree.size)
