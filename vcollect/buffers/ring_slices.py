"""Slices from the rings: the episodes a ring holds as an episode table, kept up to date as rows are written.

The episodes are the runs of step rows (``has``) in each env's ring, read from the row after the env's
newest row (its oldest) onwards: consecutive step rows belong to one episode (the row after a step row holds
its next observation), and an episode's last step row is followed by a row holding no step (its final
observation, or the env's newest row while the episode still runs).

The table keeps, per episode (a slot), its env, the ring position of its first step held, its steps held and
whether it has ended, and per ring row the slot of the step it holds and the running sum of its episode's
rewards up to it. Rows change only at each env's head (every write puts rows after the env's newest row), so
a call after writes reads just the rows written since the last call (those after each env's newest row
then): the oldest episodes they overwrote lose their first steps, the runs of steps in them extend the
episode that was running or add new ones. Only when more writes happened than a ring holds rows is the table
built again from all rows. Episodes are then listed env by env, oldest first: the *linear* coordinate of
:mod:`vcollect.slices` (a draw over them costs the batch and a pass over the episodes).

An episode whose first steps were overwritten counts its steps from the oldest one still held. One that has
not ended (its env's running episode, or one abandoned when its env was replaced) is ``partial``: its
returns-to-go run to its newest step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.buffers.sampling import check_count, gather_transitions, stack_rows
from vcollect.slices import (
    SliceRequest,
    Stacks,
    check_windows,
    discounted_sums,
    lowest_start,
    returns_to_go,
    shape_rows,
    strided_stacks,
    window_counts,
    window_steps,
)
from vcollect.spaces import flatten_batch, unflatten_batch

if TYPE_CHECKING:
    from vcollect.buffers.columns import RingColumns

__all__ = [
    "EpisodeTable",
    "HeldEpisodes",
    "draw_weighted",
    "gather_slices",
    "observation_views",
]


class HeldEpisodes:
    """The episodes a ring holds, env by env and oldest first (see the module docstring), as arrays.

    Attributes:
        env: Each episode's env.
        start: The ring position (0 .. capacity - 1) of each episode's first step held.
        lengths: Steps held of each episode.
        first: Linear position of each episode's first step (running sum of ``lengths``).
        partial: Whether each episode has not ended (its last step neither terminated nor truncated).
        capacity: Rows per ring.
    """

    def __init__(self, table: EpisodeTable, order: np.ndarray) -> None:
        self._table = table
        self._order = order
        self.env = table.env.take(order)
        self.start = table.start.take(order)
        self.lengths = table.length.take(order)
        self.partial = table.partial.take(order)
        self.first = np.cumsum(self.lengths) - self.lengths
        self.capacity = table.capacity
        self._rank = np.full(table.env.size, -1, dtype=np.int64)
        self._rank[order] = np.arange(order.size)
        self._all_rows: np.ndarray | None = None

    def rows_of(self, which: np.ndarray, steps: np.ndarray | int) -> np.ndarray:
        """The flat ring rows of steps ``steps`` (counted from the first held, inside the episode) of episodes
        ``which`` (broadcast together)."""
        c = self.capacity
        return self.env.take(which) * c + (self.start.take(which) + steps) % c

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode, step in it) of flat rows that hold steps."""
        slot = self._table.label.take(rows)
        return self._rank.take(slot), (rows % self.capacity - self._table.start.take(slot)) % self.capacity

    def all_rows(self) -> np.ndarray:
        """Flat ring row of every linear step position (made once; its size is the steps held)."""
        if self._all_rows is None:
            owner = np.repeat(np.arange(self.lengths.size), self.lengths)
            self._all_rows = self.rows_of(owner, np.arange(owner.size) - self.first.take(owner))
        return self._all_rows

    def returns(self, which: np.ndarray, lengths: np.ndarray, starts: np.ndarray, steps: np.ndarray,
                mask: np.ndarray, rows: np.ndarray, window_rewards: np.ndarray, rewards: np.ndarray,
                gamma: float) -> np.ndarray:
        """(batch, length) returns-to-go of windows (``window_steps``' ``steps`` and ``mask``, their flat
        ``rows``): plain sums from the rows' running episode sums, discounted ones backward over each window
        from the discounted sum of the steps after it."""
        if gamma == 1.0:
            cum = self._table.cum
            total = cum.take(self.rows_of(which, lengths - 1))
            out = total[:, None] - cum.take(rows) + rewards.take(rows)
            if not mask.all():
                out[~mask] = 0.0
            return out
        last = np.minimum(np.asarray(starts, dtype=np.int64) + steps.shape[1], lengths)  # the step after each window
        count = lengths - last
        owner = np.repeat(np.arange(which.size), count)
        within = np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)
        tail = rewards.take(self.rows_of(which.take(owner), last.take(owner) + within))
        after = discounted_sums(tail, None, np.cumsum(count) - count, count, gamma)
        return returns_to_go(window_rewards, mask, after, gamma)

    def describe(self, k: int) -> str:
        """Episode k named for an error message: its env and ring row."""
        return f"env {int(self.env[k])}'s episode from ring row {int(self.start[k])}"


class EpisodeTable:
    """The episode table of one ring's columns (module docstring): built on the first :meth:`held`, caught up
    with the rows written on each later one, built again when more writes happened than a ring holds rows
    (each write moves an env at most as many rows as it counts in ``columns.writes``) or after :meth:`forget`.

    Args:
        columns: The ring's columns.
    """

    def __init__(self, columns: RingColumns) -> None:
        self.columns = columns
        self.capacity = columns.capacity
        self._writes: int | None = None  # the columns' write count the table has read up to (None: not built)
        self._last = np.zeros(0, dtype=np.intp)  # each env's newest row then
        self._clear(0)

    def _clear(self, rows: int) -> None:
        """Empty arrays: no episode, ``rows`` rows labelled with none."""
        self.label: np.ndarray = np.full(rows, -1, dtype=np.int32 if rows < 2**31 else np.int64)
        self.cum = np.zeros(rows)
        self.env = np.zeros(0, dtype=np.int64)
        self.start = np.zeros(0, dtype=np.int64)
        self.length = np.zeros(0, dtype=np.int64)
        self.partial = np.zeros(0, dtype=bool)
        self._held: HeldEpisodes | None = None

    def forget(self) -> None:
        """Drop the table (the rows were replaced other than by the ring's head moving): the next
        :meth:`held` builds it from all rows."""
        self._writes = None
        self._clear(0)

    def held(self) -> HeldEpisodes:
        """The episodes held now: the rows written since the last call read first.

        Returns:
            The episodes, env by env and oldest first.
        """
        columns, c = self.columns, self.capacity
        if self._writes is None or columns.writes - self._writes >= c - 1:
            self._clear(columns.num_envs * c)
            self._build()
        elif columns.writes != self._writes:
            last = columns.last_rows
            moved = (last - self._last) % c  # rows each env moved forward: fewer than c (see above)
            ids = np.flatnonzero(moved)
            if ids.size:
                self._scan(ids, self._last.take(ids) % c, moved.take(ids) + 1)
        if columns.writes != self._writes:
            self._writes = columns.writes
            self._last = columns.last_rows.copy()
        if self._held is None:
            self._held = self._ordered()
        return self._held

    def _slots(self, count: int) -> np.ndarray:
        """``count`` free slots (episodes holding no step), the arrays grown where too few are free."""
        free = np.flatnonzero(self.length == 0)[:count]
        short = count - free.size
        if short:
            size = self.length.size
            grow = max(short, size // 2, 16)
            self.env = np.concatenate([self.env, np.zeros(grow, dtype=np.int64)])
            self.start = np.concatenate([self.start, np.zeros(grow, dtype=np.int64)])
            self.length = np.concatenate([self.length, np.zeros(grow, dtype=np.int64)])
            self.partial = np.concatenate([self.partial, np.zeros(grow, dtype=bool)])
            free = np.concatenate([free, np.arange(size, size + short)])
        return free

    def _build(self) -> None:
        """The table of every row, read in flat order: runs of step rows (never across envs), then each episode
        that wraps around its ring's end (a run ending at the ring's last row and one beginning at its first,
        the newest row lying between) joined into one."""
        columns, c = self.columns, self.capacity
        n = columns.num_envs
        steps = np.flatnonzero(columns.has)
        if not steps.size:
            return
        begins = np.empty(steps.size, dtype=bool)
        begins[0] = True
        np.not_equal(np.diff(steps), 1, out=begins[1:])
        firsts = np.searchsorted(steps, np.arange(n) * c)  # each env's first step row
        begins[firsts[firsts < steps.size]] = True
        heads = np.flatnonzero(begins)
        sizes = np.diff(heads, append=steps.size)
        rewards = columns.rewards.take(steps)
        rewards[heads[1:]] -= np.add.reduceat(rewards, heads)[:-1]  # each run's sum starts afresh
        cum = np.cumsum(rewards)
        count = heads.size
        self._slots(count)
        first_rows = steps.take(heads)
        tails = steps.take(heads + sizes - 1)
        self.env[:count] = first_rows // c
        self.start[:count] = first_rows % c
        self.length[:count] = sizes
        self.partial[:count] = ~(columns.terminations.take(tails) | columns.truncations.take(tails))
        label = np.repeat(np.arange(count, dtype=self.label.dtype), sizes)
        # an env whose ring's last and first rows both hold steps: one episode runs from the one into the other
        ends = np.arange(n, dtype=np.int64) * c
        wraps = np.flatnonzero(columns.has.take(ends + c - 1) & columns.has.take(ends))
        if wraps.size:
            newer = np.searchsorted(first_rows, ends[wraps])  # the run at the ring's first row
            older = np.searchsorted(first_rows, ends[wraps] + c) - 1  # the run at its last row
            at = np.repeat(heads[newer], sizes[newer])
            at += np.arange(at.size) - np.repeat(np.cumsum(sizes[newer]) - sizes[newer], sizes[newer])
            label[at] = np.repeat(older, sizes[newer])
            cum[at] += np.repeat(cum[heads[older] + sizes[older] - 1], sizes[newer])
            self.length[older] += sizes[newer]
            self.partial[older] = self.partial[newer]
            self.length[newer] = 0
        self.label[steps] = label
        self.cum[steps] = cum

    def _scan(self, ids: np.ndarray, begin: np.ndarray, count: np.ndarray) -> None:
        """Read ``count`` rows of each env of ``ids`` from ring position ``begin`` on (env by env, in ring
        order): the rows after ``begin`` were the env's oldest when the table last saw them (their episodes
        lose those first steps), and the runs of steps now in them extend the episode running into ``begin``
        (the row before it a step) or are new episodes."""
        columns, c = self.columns, self.capacity
        has = columns.has
        offsets = np.cumsum(count) - count
        if (count == count[0]).all():  # every env the same count (a whole ring each, when built afresh)
            within = np.arange(int(count[0]), dtype=np.int64)
            rows = ((begin[:, None] + within) % c + (ids * c)[:, None]).reshape(-1)
        else:
            within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(offsets, count)
            rows = np.repeat(ids * c, count) + (np.repeat(begin, count) + within) % c
        # the episodes whose oldest steps these rows held lose them (a prefix of each)
        old = self.label.take(rows) if self.length.any() else np.zeros(0, dtype=self.label.dtype)
        old = old[old >= 0]
        if old.size:
            lost = np.bincount(old, minlength=self.length.size)
            hit = np.flatnonzero(lost)
            self.start[hit] = (self.start[hit] + lost[hit]) % c
            self.length[hit] -= lost[hit]
            self.label[rows] = -1
        steps = np.flatnonzero(has.take(rows))  # the places in ``rows`` holding steps
        if steps.size:
            before = ids * c + (begin - 1) % c  # the row before each env's first row read
            # the episode there goes on into the rows read
            running = has.take(before) & has.take(rows.take(offsets))
            # runs of steps: a run begins after a row holding none, or at each env's first row read
            begins = np.empty(steps.size, dtype=bool)
            begins[0] = True
            np.not_equal(np.diff(steps), 1, out=begins[1:])
            firsts = np.searchsorted(steps, offsets)
            begins[firsts[firsts < steps.size]] = True
            heads = np.flatnonzero(begins)  # in ``steps``
            sizes = np.diff(heads, append=steps.size)
            carried = np.zeros(heads.size, dtype=bool)
            carried[np.searchsorted(steps.take(heads), offsets[running])] = True
            slot = np.empty(heads.size, dtype=np.int64)
            slot[carried] = self.label.take(before[running])
            fresh = np.flatnonzero(~carried)
            slot[fresh] = self._slots(fresh.size)
            step_rows = rows.take(steps)
            new = slot[fresh]
            first_rows = step_rows.take(heads[fresh])
            self.env[new] = first_rows // c
            self.start[new] = first_rows % c
            self.length[new] = 0
            self.length[slot] += sizes
            tails = step_rows.take(heads + sizes - 1)
            self.partial[slot] = ~(columns.terminations.take(tails) | columns.truncations.take(tails))
            self.label[step_rows] = np.repeat(slot, sizes)
            # running sums of each run's rewards, from the sum its episode had before the rows read
            rewards = columns.rewards.take(step_rows)
            rewards[heads[carried]] += self.cum.take(before[running])
            rewards[heads[1:]] -= np.add.reduceat(rewards, heads)[:-1]  # each run's sum starts afresh
            self.cum[step_rows] = np.cumsum(rewards)
        self._held = None

    def _ordered(self) -> HeldEpisodes:
        """The episodes holding steps, env by env and oldest first."""
        c = self.capacity
        alive = np.flatnonzero(self.length)
        env = self.env.take(alive)
        oldest = (self.columns.last_rows.take(env) + 1) % c
        key = env * c + (self.start.take(alive) - oldest) % c
        return HeldEpisodes(self, alive[np.argsort(key)])


def gather_slices(columns: RingColumns, episodes: HeldEpisodes, which: np.ndarray, starts: np.ndarray,
                  request: SliceRequest, stack_num: int, stacks: Stacks = "copy") -> dict[str, Any]:
    """The batch of the windows (episode ``which``, ``starts``): ``gather_transitions``' keys, each
    (batch, length, ...), rows padded outside the episode 0 and their ``indices`` -1; plus ``mask``,
    ``timesteps``, ``returns_to_go``, ``partial``, ``episode_ids`` (the flat row of the episode's first step
    held) and ``start_indices`` (the window's first step in the episode, negative when padded at the start).
    ``stacks="view"``: observations and next observations read-only views over each window's rows, gathered
    once (:func:`observation_views`); a batch holding a padded window has them materialised, read-only too.
    """
    stack_num = check_count("stack_num", stack_num, 1, columns.capacity)
    size, length = len(which), request.length
    lengths = episodes.lengths.take(which)
    steps, mask = window_steps(lengths, starts, length)
    rows = episodes.rows_of(which[:, None], steps)
    padded = None if mask.all() else ~mask
    if stacks == "view" and padded is None:
        rest = shape_rows(gather_transitions(columns, rows.reshape(-1), stack_num, observations=False), size, length,
                          None)
        obs, nxt = observation_views(columns, rows, stack_num)
        batch = {"observations": obs, "actions": rest.pop("actions"), "rewards": rest.pop("rewards"),
                 "next_observations": nxt, **rest}  # sample()'s key order
    else:
        batch = shape_rows(gather_transitions(columns, rows.reshape(-1), stack_num), size, length, padded)
        if stacks == "view":  # padded rows must read 0: materialised, read-only as views are
            space = columns.observation_space
            for leaf in flatten_batch(space, batch["observations"]) + flatten_batch(space, batch["next_observations"]):
                leaf.flags.writeable = False
    if padded is not None:
        batch["indices"][padded] = -1
    batch.update(
        mask=mask,
        timesteps=steps if padded is None else np.where(mask, steps, 0),
        returns_to_go=episodes.returns(which, lengths, starts, steps, mask, rows, batch["rewards"], columns.rewards,
                                       request.gamma),
        partial=episodes.partial.take(which),
        episode_ids=episodes.rows_of(which, 0),
        start_indices=np.asarray(starts, dtype=np.int64),
    )
    return batch


def observation_views(columns: RingColumns, rows: np.ndarray, stack_num: int) -> tuple[Any, Any]:
    """Observations and next observations of unpadded windows of step rows ``rows`` (batch, length), as
    read-only views over one array per window of its ``length + stack_num`` observation rows, gathered
    once: the first row's stack (its ``stack_num - 1`` predecessors in the episode, the first repeated as in
    ``gather_transitions``), the window's rows, and the last row's next observation. Row i's stack is
    rows i to i + k - 1 of that array and its next stack rows i + 1 to i + k (``(batch, length, k, ...)``
    views for ``stack_num`` k > 1, ``(batch, length, ...)`` for 1): the stacks ``gather_transitions`` builds,
    since a step's predecessors in its episode are the window's earlier rows."""
    length = rows.shape[1]
    head = rows[:, :1] if stack_num == 1 else stack_rows(rows[:, 0], stack_num, columns.has, columns.capacity)
    frames = np.concatenate([head, rows[:, 1:], columns.next_rows.take(rows[:, -1:])], axis=1)
    obs, nxt = [], []
    for column in columns.obs:
        gathered = column.take(frames, axis=0)
        obs.append(strided_stacks(gathered, 0, length, stack_num))
        nxt.append(strided_stacks(gathered, 1, length, stack_num))
    return unflatten_batch(columns.observation_space, obs), unflatten_batch(columns.observation_space, nxt)


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
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``request.batch_size`` windows drawn in proportion to their weights (``window_weights``): (episode,
    start, weight) of each."""
    counts = window_counts(episodes.lengths, request.length, request.pad)
    check_windows(counts, episodes.lengths, request, episodes.describe)
    which, starts, weights = window_weights(episodes, leaves, request, priority)
    cum = np.cumsum(weights)
    if not cum[-1] > 0.0:
        raise ValueError("every window has priority 0: give some of their steps a priority > 0 (update_weight)")
    u = rng.random(request.batch_size) * cum[-1]
    picked = np.minimum(np.searchsorted(cum, u, side="right"), which.size - 1)
    return which.take(picked), starts.take(picked), weights.take(picked)
