"""SumTree: sums over non-negative leaf values, updated and searched vectorised, for prioritized replay.

Leaf i is drawn with probability value_i / total by finding, for v drawn uniformly in (0, total], the
smallest i whose prefix sum reaches v. The tree is *wide*: each node sums ``fanout`` (default 32)
children, and levels are kept from the leaves up to the first with at most ``top_max`` (4,096) nodes.
A search takes the cumulative sums of that top level and ``searchsorted`` for the node, then per level
below gathers the (batch, fanout) child sums, takes their running sums along the row (one matmul with a
triangle of ones) and picks the first child whose running sum reaches v. 100,000 leaves need one such level (3,125 top nodes of 32 leaves), so a search
is a handful of numpy calls for the whole batch, not one small call per binary level as a heap walk.
"""

from __future__ import annotations

import numpy as np

_FANOUT = 32
_TOP_MAX = 4096  # a cumulative sum over this many floats costs about one gathered level


class SumTree:
    """``size`` non-negative float64 leaves with the sums of their ``fanout``-wide subtrees, level by level
    from the leaves (each level padded with zeros to a multiple of ``fanout``) up to the first level of at
    most ``top_max`` nodes (the top, searched by its cumulative sums)."""

    def __init__(self, size: int, fanout: int = _FANOUT, top_max: int = _TOP_MAX) -> None:
        if int(size) < 1:
            raise ValueError(f"a SumTree needs at least one leaf, got size={size}")
        if int(fanout) < 2:
            raise ValueError(f"fanout must be >= 2 (children per node), got {fanout}")
        if int(top_max) < 1:
            raise ValueError(f"top_max must be >= 1 (nodes in the top level), got {top_max}")
        self.size, self.fanout, f = int(size), int(fanout), int(fanout)
        # levels[0] the leaves; levels[k] the sums of levels[k - 1] in groups of f; the last, the top
        self._levels: list[np.ndarray] = []
        n = self.size
        while n > int(top_max):
            self._levels.append(np.zeros(-(-n // f) * f))
            n = -(-n // f)
        self._levels.append(np.zeros(n))
        self._groups = [level.reshape(-1, f) for level in self._levels[:-1]]  # _groups[k][j]: node j's children
        self._top = self._levels[-1]
        # x @ _upper: 0, then the running sums of the rows of x
        self._upper = np.triu(np.ones((f, f + 1)), k=1)
        self._prefix = np.zeros(self._top.size + 1)  # 0, then the cumulative sums of the top level

    @property
    def levels(self) -> int:
        """Levels kept, leaves and top included (1: the leaves are the top)."""
        return len(self._levels)

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._top.sum())

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        """The leaf values at ``index``."""
        return self._levels[0][np.asarray(index)]

    def leaves(self) -> np.ndarray:
        """A read-only view of all leaf values."""
        view = self._levels[0][: self.size]
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Every leaf (and sum) back to zero."""
        for level in self._levels:
            level.fill(0.0)

    def set(self, index: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``values`` (non-negative; where an index repeats, the last value wins, as
        numpy assigns) and recompute the sums above them, one level at a time (a parent's sum taken afresh
        from its children, so repeated parents are harmless and no rounding drift accumulates)."""
        nodes = np.asarray(index, dtype=np.intp)
        self._levels[0][nodes] = values
        f = self.fanout
        for k, groups in enumerate(self._groups):
            nodes = nodes // f
            self._levels[k + 1][nodes] = groups[nodes].sum(axis=1)

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each v in ``values`` (in (0, total]): the smallest leaf i whose prefix sum (leaves 0..i) reaches
        v. A leaf of value 0 is never the answer in exact arithmetic; the caller checks for rounding."""
        v = np.array(values, dtype=np.float64)  # a copy, reduced in place
        return self._walk(v, self._top_prefix())

    def sample(self, uniform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaves drawn in proportion to their values, one per ``uniform`` value in (0, 1] (consumed: scaled
        in place), and their values: :meth:`find` of ``uniform * total``, total taken from the same sums."""
        prefix = self._top_prefix()
        uniform *= prefix[-1]
        leaves = self._walk(uniform, prefix)
        return leaves, self._levels[0][leaves]

    def _top_prefix(self) -> np.ndarray:
        np.add.accumulate(self._top, out=self._prefix[1:])  # np.cumsum(out=) is ~2x slower here
        return self._prefix

    def _walk(self, v: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """Leaf indices found for v (modified): the top node by ``searchsorted`` in its cumulative sums, then
        per level below, the first child whose running sum within the node reaches what is left of v."""
        node = np.searchsorted(prefix[1:], v, side="left")
        np.minimum(node, self._top.size - 1, out=node)  # v a rounding above the total
        v -= prefix[node]  # what is left inside the top node
        f = self.fanout
        rows = np.arange(v.size)
        for groups in reversed(self._groups):
            # running sums of each sought node's children, one row each, as a product with a triangle
            # of ones (one BLAS call, ~3x faster than numpy's cumsum along short rows)
            run = groups[node] @ self._upper  # run[:, c]: the sum of children before c
            run[:, f] = np.inf  # v a rounding above the node's sum: its last child
            child = np.argmax(run[:, 1:] >= v[:, None], axis=1)  # the first child whose sum reaches v
            v -= run[rows, child]
            node = node * f + child
        return node
