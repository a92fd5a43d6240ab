"""SumTree: a binary tree of sums over non-negative leaf values, updated and searched vectorised.

Prioritized replay samples leaf i with probability value_i / total: a value drawn uniformly in (0, total]
is walked down from the root, left where it fits within the left child's sum, else right, less that sum.
Both the update (leaves to root) and the search (root to leaves) are one numpy step per tree level for a
whole batch, never a Python loop per sample.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """``size`` non-negative float64 leaves and the sums of every subtree (a heap array: node i has
    children 2i and 2i + 1, leaves from ``bound``, the power of two at or above ``size``)."""

    def __init__(self, size: int) -> None:
        if int(size) < 1:
            raise ValueError(f"a SumTree needs at least one leaf, got size={size}")
        self.size = int(size)
        self.depth = max(0, (self.size - 1).bit_length())
        self.bound = 1 << self.depth
        self._tree = np.zeros(2 * self.bound, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._tree[1]) if self.depth else float(self._tree[self.bound])

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        """The leaf values at ``index``."""
        return self._tree[np.asarray(index) + self.bound]

    def leaves(self) -> np.ndarray:
        """A read-only view of all leaf values."""
        view = self._tree[self.bound : self.bound + self.size]
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Every leaf (and sum) back to zero."""
        self._tree.fill(0.0)

    def set(self, index: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``values`` (non-negative; where an index repeats, the last value wins, as
        numpy assigns) and recompute the sums above them, one level at a time."""
        nodes = np.asarray(index, dtype=np.intp) + self.bound
        tree = self._tree
        tree[nodes] = values
        for _ in range(self.depth):
            nodes >>= 1  # repeated parents recompute the same sum from their final children
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each v in ``values`` (in (0, total]): the smallest leaf i whose prefix sum (leaves 0..i) is at
        least v. A leaf of value 0 is never the answer in exact arithmetic; the caller checks for rounding."""
        v = np.array(values, dtype=np.float64)  # a copy, reduced in place
        nodes = np.ones(v.shape, dtype=np.intp)
        tree = self._tree
        for _ in range(self.depth):
            nodes <<= 1
            left = tree[nodes]
            right = left < v
            v -= left * right
            nodes += right
        return nodes - self.bound
