"""SumTree: sums over non-negative leaf values, updated and searched vectorised, for prioritized replay.

Leaf i is drawn with probability value_i / total by finding, for v drawn uniformly in (0, total], the
smallest i whose prefix sum reaches v. The leaves sit at the bottom of a binary heap of subtree sums kept
up to a *top level* of at most 4,096 nodes: a search takes the cumulative sums of that level and
``searchsorted`` for the node, then walks the few levels below it (left where v fits within the left
child's sum, else right, less that sum); an update recomputes the sums above its leaves up to the top
level. Each step is one numpy operation for a whole batch, never a Python loop per sample, and the
levels above the top one, which a binary walk would pay for one numpy step each, are not kept at all.
"""

from __future__ import annotations

import numpy as np

# log2 of the most nodes in the top level: a cumulative sum over 4,096 floats costs about what 1 or 2
# binary levels cost in numpy calls, and replaces 12 of them.
_TOP_LEVEL = 12


class SumTree:
    """``size`` non-negative float64 leaves with the sums of their subtrees (heap order: node i has children
    2i and 2i + 1, leaves from ``bound``, the power of two at or above ``size``) from the leaves up to level
    ``top_level`` (node 2**top_level onwards; default the lower of the leaves' level and 12)."""

    def __init__(self, size: int, top_level: int | None = None) -> None:
        if int(size) < 1:
            raise ValueError(f"a SumTree needs at least one leaf, got size={size}")
        self.size = int(size)
        self.depth = max(0, (self.size - 1).bit_length())
        self.bound = 1 << self.depth
        top = min(self.depth, _TOP_LEVEL) if top_level is None else int(top_level)
        if not 0 <= top <= self.depth:
            raise ValueError(f"top_level must be in [0, {self.depth}] for {self.size} leaves, got {top_level}")
        self.top_level = top
        self._tree = np.zeros(2 * self.bound, dtype=np.float64)
        self._pairs = self._tree.reshape(self.bound, 2)  # _pairs[i] = the children of node i
        self._top = self._tree[1 << top : 2 << top]  # the top level, a view
        self._prefix = np.zeros(self._top.size + 1)  # 0, then the cumulative sums of the top level

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._top.sum())

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
        numpy assigns) and recompute the sums above them up to the top level, one level at a time."""
        nodes = np.asarray(index, dtype=np.intp) + self.bound
        tree, pairs = self._tree, self._pairs
        tree[nodes] = values
        for _ in range(self.depth - self.top_level):
            nodes >>= 1  # repeated parents recompute the same sum from their final children
            children = pairs[nodes]
            tree[nodes] = children[:, 0] + children[:, 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each v in ``values`` (in (0, total]): the smallest leaf i whose prefix sum (leaves 0..i) reaches
        v. A leaf of value 0 is never the answer in exact arithmetic; the caller checks for rounding."""
        v = np.array(values, dtype=np.float64)  # a copy, reduced in place
        return self._walk(v, self._top_prefix()) - self.bound

    def sample(self, uniform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaves drawn in proportion to their values, one per ``uniform`` value in (0, 1] (consumed: scaled
        in place), and their values: :meth:`find` of ``uniform * total``, total taken from the same sums."""
        prefix = self._top_prefix()
        uniform *= prefix[-1]
        nodes = self._walk(uniform, prefix)
        return nodes - self.bound, self._tree[nodes]

    def _top_prefix(self) -> np.ndarray:
        np.cumsum(self._top, out=self._prefix[1:])
        return self._prefix

    def _walk(self, v: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """Heap indices of the leaves found for v (modified): the top level's node by ``searchsorted`` in its
        cumulative sums, then down the binary levels below it."""
        j = np.searchsorted(prefix[1:], v, side="left")
        np.minimum(j, self._top.size - 1, out=j)  # v a rounding above the total
        v -= prefix[j]  # what is left inside top node j
        node = j + (1 << self.top_level)
        tree = self._tree
        for _ in range(self.depth - self.top_level):
            node <<= 1  # its left child
            left = tree[node]
            right = left < v
            np.subtract(v, left, out=v, where=right)
            node += right
        return node
