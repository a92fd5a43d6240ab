"""SlotLayout: Tianshou's VectorReplayBuffer index laid over vcollect's per-env rings.

Tianshou's ``VectorReplayBuffer(total_size, buffer_num)`` concatenates ``buffer_num`` sub-buffers of
``size = ceil(total_size / buffer_num)`` slots; env ``e``'s ``m``-th transition since the buffer was last
emptied sits at index ``e * size + m % size``, and each sub-buffer keeps its newest ``size`` transitions.
The layout keeps exactly that index over a ring of ``2 * size + 1`` rows per env (a ring stores an episode
of T steps in T + 1 rows, so ``2 * size + 1`` rows always hold the newest ``size`` transitions): ``row_of``
maps each index to the flat ring row of its transition (-1 for a slot not filled yet), and the per-index
rewards and flags Tianshou's return computations (and its ``prev``/``next``) read as whole arrays are kept
beside it.

The layout follows the ring's writes (``sync``): each env's rows written since the last sync are walked in
order and their step rows take the next slots, as Tianshou's insertion does. Where more rows may have been
written than a ring holds, or the writer is unknown, the layout is rebuilt from the ring's contents: the
newest ``size`` transitions of each env keep their order, and their slots then count from the oldest
transition still in the ring.
"""

from __future__ import annotations

import numpy as np

from vcollect.buffers.columns import RingColumns

__all__ = ["SlotLayout"]


class SlotLayout:
    """Tianshou's indices ``env * size + slot`` over a ring of ``2 * size + 1`` rows per env.

    Args:
        num_envs: Sub-buffers (one ring per env).
        size: Slots per sub-buffer (Tianshou's ``ceil(total_size / buffer_num)``).
    """

    def __init__(self, num_envs: int, size: int) -> None:
        self.num_envs, self.size = int(num_envs), int(size)
        self.maxsize = self.num_envs * self.size
        self.row_of = np.full(self.maxsize, -1, dtype=np.intp)
        self.rew = np.zeros(self.maxsize, dtype=np.float64)
        self.terminated = np.zeros(self.maxsize, dtype=bool)
        self.truncated = np.zeros(self.maxsize, dtype=bool)
        self.done = np.zeros(self.maxsize, dtype=bool)
        self.count = np.zeros(self.num_envs, dtype=np.int64)  # transitions given a slot since the last clear
        self.cursor: np.ndarray | None = None  # each env's newest flat row at the last sync
        self.writes = -1  # the ring's write counter at the last sync
        self.has_null = False  # a NaN was seen in a transition given a slot since the last clear

    @property
    def lengths(self) -> np.ndarray:
        """Transitions held per env (at most ``size``)."""
        return np.minimum(self.count, self.size)

    def clear(self, last_rows: np.ndarray | None, writes: int = -1) -> None:
        """Forget every slot (the ring was emptied); the next rows written after ``last_rows`` fill slot 0.

        Args:
            last_rows: Each env's newest flat row now (None: the ring has no rows yet).
            writes: The ring's write counter now (-1: unknown; the next read syncs).
        """
        self.writes = writes
        self.row_of.fill(-1)
        for array in (self.rew, self.terminated, self.truncated, self.done):
            array.fill(0)
        self.count.fill(0)
        self.cursor = last_rows
        self.has_null = False

    def changed(self, rows: RingColumns) -> bool:
        """Whether the ring was written since the last sync (by its write counter)."""
        return self.cursor is None or rows.writes != self.writes

    def sync(self, rows: RingColumns, max_rows_written: int | None) -> None:
        """Give the step rows written since the last sync their slots.

        Args:
            rows: The ring's rows.
            max_rows_written: An upper bound on the rows any env wrote since the last sync; None when unknown
                (the layout is rebuilt from the ring's contents).
        """
        capacity = rows.capacity
        self.writes = rows.writes
        last = rows.last_rows.copy()
        if self.cursor is None or max_rows_written is None or max_rows_written >= capacity - 1:
            self.clear(last, rows.writes)
            self.cursor = rows.next_rows[last]  # every env's oldest row: the walk below covers the whole ring
        base = np.arange(self.num_envs, dtype=np.intp) * capacity
        written = (last - self.cursor) % capacity
        span = int(written.max()) if written.size else 0
        start = self.cursor - base  # each env's first row to walk (its newest row at the last sync), in its ring
        self.cursor = last
        if span == 0:
            return
        walk = np.arange(span)
        grid = (start[:, None] + walk) % capacity + base[:, None]
        steps = rows.has[grid] & (walk < written[:, None])
        env, col = np.nonzero(steps)
        # the k-th new step of env e takes slot (count + k) % size; only the newest `size` of them are kept
        order = np.cumsum(steps, axis=1)[env, col] - 1
        new = np.bincount(env, minlength=self.num_envs)
        if int(new.max()) > self.size:
            keep = order >= (new - self.size)[env]
            env, col, order = env[keep], col[keep], order[keep]
        virtual = env * self.size + (self.count[env] + order) % self.size
        row = grid[env, col]
        self.count += new
        self.row_of[virtual] = row
        self.rew[virtual] = rows.rewards[row]
        self.terminated[virtual] = term = rows.terminations[row]
        self.truncated[virtual] = trunc = rows.truncations[row]
        self.done[virtual] = term | trunc
        if not self.has_null:
            self.has_null = rows.any_nan(row)
