"""Slices from the rings: the episodes a ring holds as an episode table, windows drawn and gathered.

The episodes are the runs of step rows (``has``) in each env's ring, read from the row after the env's
newest row (its oldest) onwards: consecutive step rows belong to one episode (the row after a step row holds
its next observation), and an episode's last step row is followed by a row holding no step (its final
observation, or the env's newest row while the episode still runs). Those runs, listed env by env, oldest
first, are the *linear* coordinate of :mod:`vcollect.slices`: ``HeldEpisodes.rows[p]`` is the flat row of
linear step p. The table is built once per state of the ring (vectorised over its rows) and reused by every
call until the ring is written again; a draw then costs the batch.

An episode whose first steps were overwritten counts its steps from the oldest one still held. One that has
not ended (its env's running episode, or one abandoned when its env was replaced) is ``partial``: its
returns-to-go run to its newest step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.buffers.sampling import check_count, gather_transitions
from vcollect.slices import (
    SliceRequest,
    check_windows,
    draw_windows,
    lowest_start,
    shape_rows,
    window_counts,
    window_returns,
    window_steps,
)

if TYPE_CHECKING:
    from vcollect.buffers.ring import VectorRingBuffer

__all__ = ["HeldEpisodes", "gather_slices", "held_episodes", "window_first_rows"]


@dataclass(eq=False)
class HeldEpisodes:
    """The episodes a ring holds, in linear step positions (see the module docstring).

    Attributes:
        rows: Flat ring row of each linear step position.
        first: Linear position of each episode's first step held.
        lengths: Steps held of each episode.
        partial: Whether each episode has not ended (its last step neither terminated nor truncated).
    """

    rows: np.ndarray
    first: np.ndarray
    lengths: np.ndarray
    partial: np.ndarray
    _cum: np.ndarray | None = field(default=None, repr=False)
    _rewards: np.ndarray | None = field(default=None, repr=False)
    _linear_of_row: np.ndarray | None = field(default=None, repr=False)

    def rewards(self, ring: VectorRingBuffer) -> np.ndarray:
        """Each linear step's reward (taken once)."""
        if self._rewards is None:
            self._rewards = ring._rew_flat.take(self.rows)
        return self._rewards

    def cum_rewards(self, ring: VectorRingBuffer) -> np.ndarray:
        """Running sums of the linear rewards, a leading 0 (taken once)."""
        if self._cum is None:
            cum = np.zeros(self.rows.size + 1)
            np.cumsum(self.rewards(ring), out=cum[1:])
            self._cum = cum
        return self._cum

    def linear_of_row(self, size: int) -> np.ndarray:
        """The linear position of each flat row (-1 for rows holding no step), made once."""
        if self._linear_of_row is None:
            where = np.full(size, -1, dtype=np.intp)
            where[self.rows] = np.arange(self.rows.size)
            self._linear_of_row = where
        return self._linear_of_row

    def describe(self, k: int, capacity: int) -> str:
        """Episode k named for an error message: its env and ring row."""
        row = int(self.rows[self.first[k]])
        return f"env {row // capacity}'s episode from ring row {row % capacity}"


def held_episodes(ring: VectorRingBuffer) -> HeldEpisodes:
    """The ring's episode table, from its cache when nothing was written since it was built."""
    cached = ring._slice_index
    if cached is not None and cached[0] == ring._writes:
        return cached[1]  # type: ignore[no-any-return]
    episodes = _build(ring)
    ring._slice_index = (ring._writes, episodes)
    return episodes


def _build(ring: VectorRingBuffer) -> HeldEpisodes:
    n, c = ring.num_envs, ring.capacity
    steps = np.flatnonzero(ring._has_flat)
    bounds = np.searchsorted(steps, np.arange(n + 1) * c)  # each env's part of ``steps``
    newest = ring._last_flat
    # each env's rows from the one after its newest: the rows after it come first
    cuts = np.searchsorted(steps, newest, side="right")
    wraps = np.flatnonzero((cuts > bounds[:-1]) & (cuts < bounds[1:]))  # envs with step rows on both sides
    if wraps.size:
        pieces, at = [], 0
        for env in wraps.tolist():
            lo, cut, hi = int(bounds[env]), int(cuts[env]), int(bounds[env + 1])
            pieces += [steps[at:lo], steps[cut:hi], steps[lo:cut]]
            at = hi
        pieces.append(steps[at:])
        steps = np.concatenate(pieces)
    size = steps.size
    begins = np.zeros(size, dtype=bool)
    if size:
        step = np.diff(steps)
        # a new episode where the next step row is not the ring row after (wrapping inside the env's ring)
        begins[1:] = (step != 1) & (step != 1 - c)
        begins[bounds[:-1][bounds[:-1] < size]] = True  # each env's first
    first = np.flatnonzero(begins)
    lengths = np.diff(first, append=size)
    last = steps.take(first + lengths - 1)
    partial = ~(ring._term_flat.take(last) | ring._trunc_flat.take(last))
    return HeldEpisodes(steps, first, lengths, partial)


def window_first_rows(episodes: HeldEpisodes, which: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The flat row of each window's first step (windows padded at the start: the episode's first)."""
    return episodes.rows.take(episodes.first.take(which) + np.maximum(starts, 0))


def gather_slices(ring: VectorRingBuffer, episodes: HeldEpisodes, which: np.ndarray, starts: np.ndarray,
                  request: SliceRequest, stack_num: int) -> dict[str, Any]:
    """The batch of the windows (episode ``which``, ``starts``): ``gather_transitions``' keys, each
    (batch, length, ...), rows padded outside the episode 0 and their ``indices`` -1; plus ``mask``,
    ``timesteps``, ``returns_to_go``, ``partial``, ``episode_ids`` (the flat row of the episode's first step
    held) and ``start_indices`` (the window's first step in the episode, negative when padded at the start).
    """
    stack_num = check_count("stack_num", stack_num, 1, ring.capacity)
    size, length = len(which), request.length
    lengths = episodes.lengths.take(which)
    base = episodes.first.take(which)
    steps, mask = window_steps(lengths, starts, length)
    rows = episodes.rows.take(base[:, None] + steps)
    padded = None if mask.all() else ~mask
    batch = shape_rows(gather_transitions(ring, rows.reshape(-1), stack_num), size, length, padded)
    if padded is not None:
        batch["indices"][padded] = -1
    batch.update(
        mask=mask,
        timesteps=steps if padded is None else np.where(mask, steps, 0),
        returns_to_go=window_returns(episodes.rewards(ring), episodes.cum_rewards(ring), base, lengths, starts,
                                     steps, mask, batch["rewards"], request.gamma),
        partial=episodes.partial.take(which),
        episode_ids=episodes.rows.take(base),
        start_indices=np.asarray(starts, dtype=np.int64),
    )
    return batch


def draw_uniform(ring: VectorRingBuffer, request: SliceRequest, rng: np.random.Generator,
                 ) -> tuple[HeldEpisodes, np.ndarray, np.ndarray]:
    """The episode table and ``request.batch_size`` windows drawn uniformly (by window or by episode)."""
    episodes = held_episodes(ring)
    which, starts = draw_windows(episodes.lengths, request, rng, lambda k: episodes.describe(k, ring.capacity))
    return episodes, which, starts


def window_weights(episodes: HeldEpisodes, leaves: np.ndarray, request: SliceRequest, priority: str,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every window of every episode with its weight: (episode, start, weight), the weight the leaf of the
    window's first step (``priority="first"``) or the largest leaf over its steps (``"max"``); ``leaves``
    holds each linear step's leaf. Cost grows with the windows held."""
    length = request.length
    counts = window_counts(episodes.lengths, length, request.pad)
    which = np.repeat(np.arange(counts.size), counts)
    starts = lowest_start(length, request.pad) + np.arange(which.size) - np.repeat(np.cumsum(counts) - counts, counts)
    base = episodes.first.take(which)
    lo = base + np.maximum(starts, 0)
    if priority == "first":
        return which, starts, leaves.take(lo)
    hi = base + np.minimum(starts + length, episodes.lengths.take(which)) - 1  # the window's last step
    span = hi - lo + 1
    # a sparse table of maxima over 2**j consecutive steps, then two overlapping lookups per window
    levels = [leaves]
    while 2 ** len(levels) <= int(span.max(initial=1)):
        prev, half = levels[-1], 2 ** (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    level = np.floor(np.log2(span)).astype(np.intp)
    out = np.empty(which.size)
    for j in np.unique(level).tolist():
        at = np.flatnonzero(level == j)
        table = levels[j]
        out[at] = np.maximum(table.take(lo[at]), table.take(hi[at] - 2**j + 1))
    return which, starts, out


def draw_weighted(episodes: HeldEpisodes, leaves: np.ndarray, request: SliceRequest, priority: str,
                  rng: np.random.Generator, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``request.batch_size`` windows drawn in proportion to their weights (``window_weights``): (episode,
    start, weight) of each."""
    counts = window_counts(episodes.lengths, request.length, request.pad)
    check_windows(counts, episodes.lengths, request, lambda k: episodes.describe(k, capacity))
    which, starts, weights = window_weights(episodes, leaves, request, priority)
    cum = np.cumsum(weights)
    if not cum[-1] > 0.0:
        raise ValueError("every window has priority 0: give some of their steps a priority > 0 (update_weight)")
    u = rng.random(request.batch_size) * cum[-1]
    picked = np.minimum(np.searchsorted(cum, u, side="right"), which.size - 1)
    return which.take(picked), starts.take(picked), weights.take(picked)
