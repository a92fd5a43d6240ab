"""SumTree: sums over non-negative leaf values, updated and searched vectorised, for prioritized replay.

Leaf i is drawn with probability value_i / total by finding, for v drawn uniformly in (0, total], the
smallest i whose prefix sum reaches v. The tree is *wide* and keeps its running sums: nodes are grouped
``fanout`` (default 16) to a group, and each group stores the running sums of its members (+inf in place
of the last, the group's sum being its parent's value), from the leaves up to the first level of at most
``top_max`` (8,192) nodes, the top, whose cumulative sums are kept too. An update recomputes the running
sums of the groups it touched (one matmul with a triangle of ones for all of them) and marks the top's
cumulative sums stale, taken again once by the next search. A search is then no arithmetic over the
tree: ``searchsorted`` in the top's cumulative sums, and per level below, one gather of the sought
groups' running sums and the first that reaches what is left of v (the +inf stops it at the last member
at the latest). 100,000 leaves: 6,250 groups of 16 under a top of 6,250 nodes, one such level.

Precision: the sums are float64 and a search compares v with exactly the numbers the tree holds, so with
integer-valued leaves (every sum exact) the answer is the exact one. Otherwise a leaf whose value is under
the float64 rounding of its group's running sum (about 1e-16 of it) may be passed over, and rounding may
land a search on a leaf of value 0 next to the true answer: callers that must not draw such a leaf check
the value and draw again (``draw_priority_rows`` does).
"""

from __future__ import annotations

import numpy as np

_FANOUT = 16  # an update's running sums cost ~fanout**2 per group, a search's compare ~fanout
_TOP_MAX = 8192  # the top's cumulative sums, taken afresh after every update, cost ~1 ns per node
_ROW = 16  # the top's cumulative sums are taken _ROW nodes to a row: running sums by matmul, then offsets


class SumTree:
    """``size`` non-negative float64 leaves; per level, groups of ``fanout`` nodes with their stored running
    sums, up to a top of at most ``top_max`` nodes (each level padded with zeros to whole groups)."""

    def __init__(self, size: int, fanout: int = _FANOUT, top_max: int = _TOP_MAX) -> None:
        if int(size) < 1:
            raise ValueError(f"a SumTree needs at least one leaf, got size={size}")
        if int(fanout) < 2:
            raise ValueError(f"fanout must be >= 2 (children per node), got {fanout}")
        if int(top_max) < 1:
            raise ValueError(f"top_max must be >= 1 (nodes in the top level), got {top_max}")
        self.size, self.fanout, f = int(size), int(fanout), int(fanout)
        # _values[0] the leaves, _values[k] the group sums of level k - 1; the last, the top
        self._values: list[np.ndarray] = []
        # _runs[k][j, c]: the sum of members 0..c of group j of level k; +inf for the last member
        self._runs: list[np.ndarray] = []
        n = self.size
        while n > int(top_max):
            groups = -(-n // f)
            self._values.append(np.zeros(groups * f))
            self._runs.append(np.zeros((groups, f)))
            n = groups
        for run in self._runs:
            run[:, -1] = np.inf
        rows = -(-n // _ROW)
        self._top_size = n
        self._values.append(np.zeros(rows * _ROW))  # the top, padded with zeros to whole rows
        self._top = self._values[-1]
        self._prefix = np.zeros(rows * _ROW + 1)  # 0, then the cumulative sums of the top level
        self._offsets = np.zeros(rows + 1)  # 0, then the cumulative sums of the top's rows
        self._stale = False  # the top changed since _prefix was taken
        self._upper = np.triu(np.ones((f, f)))  # x @ _upper: the running sums of the rows of x
        self._upper_row = np.triu(np.ones((_ROW, _ROW)))

    @property
    def levels(self) -> int:
        """Levels kept, leaves and top included (1: the leaves are the top)."""
        return len(self._values)

    @property
    def total(self) -> float:
        """The sum of all leaves (as the search sees it: the last of the top's cumulative sums)."""
        return float(self._top_prefix()[self._top_size])

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        """The leaf values at ``index``."""
        return self._values[0][np.asarray(index)]

    def leaves(self) -> np.ndarray:
        """A read-only view of all leaf values."""
        view = self._values[0][: self.size]
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Every leaf (and sum) back to zero."""
        for values in self._values:
            values.fill(0.0)
        for run in self._runs:
            run[:, :-1] = 0.0
        self._prefix.fill(0.0)
        self._stale = False

    def set(self, index: np.ndarray, values: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``values`` (non-negative; where an index repeats, the last value wins, as
        numpy assigns) and recompute the running sums of the groups above them, one level at a time (taken
        afresh from the members, so repeated groups are harmless and no rounding drift accumulates)."""
        nodes = np.asarray(index, dtype=np.intp)
        self._values[0][nodes] = values
        f = self.fanout
        every = False  # from the first level with as many updates as groups up, all groups afresh
        for k, run in enumerate(self._runs):
            every = every or nodes.size >= run.shape[0]
            if every:  # one contiguous product
                np.matmul(self._values[k].reshape(-1, f), self._upper, out=run)
                self._values[k + 1][: run.shape[0]] = run[:, -1]
                run[:, -1] = np.inf
            else:
                nodes = nodes // f
                sums = self._values[k].reshape(-1, f).take(nodes, axis=0) @ self._upper
                self._values[k + 1][nodes] = sums[:, -1]
                sums[:, -1] = np.inf
                run[nodes] = sums
        self._stale = True

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each v in ``values`` (in (0, total]): the smallest leaf i whose prefix sum (leaves 0..i) reaches
        v. A leaf of value 0 is never the answer in exact arithmetic; the caller checks for rounding."""
        prefix = self._top_prefix()
        v = np.minimum(values, prefix[self._top_size])  # a copy, reduced in place; above the total: the last leaf
        return self._walk(v, prefix)

    def sample(self, uniform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaves drawn in proportion to their values, one per ``uniform`` value in (0, 1], in the order of
        ``uniform``, and their values: :meth:`find` of ``uniform * total``, total from the same sums.

        The values are searched in increasing order (``searchsorted`` of sorted values is about twice as
        fast: fewer mispredicted branches, neighbouring memory) and the leaves put back in their order."""
        prefix = self._top_prefix()
        order = uniform.argsort()
        v = uniform.take(order)
        v *= prefix[self._top_size]  # at most the total: u <= 1 and rounding is monotone
        leaves = np.empty_like(order)
        leaves[order] = self._walk(v, prefix)
        return leaves, self._values[0].take(leaves)

    def _top_prefix(self) -> np.ndarray:
        """0, then the cumulative sums of the top, taken afresh if it changed: per row of _ROW nodes the
        running sums (one matmul for all rows), plus the sum of the rows before it (a cumulative sum over
        the rows only). ~2x faster than ``np.add.accumulate`` over the whole top, whose adds wait on each
        other. Non-decreasing: the last of a row plus its offset is the next row's offset, the same add."""
        if self._stale:
            runs = self._prefix[1:].reshape(-1, _ROW)
            np.matmul(self._top.reshape(-1, _ROW), self._upper_row, out=runs)
            np.add.accumulate(runs[:, -1], out=self._offsets[1:])
            runs += self._offsets[:-1, None]
            self._stale = False
        return self._prefix

    def _walk(self, v: np.ndarray, prefix: np.ndarray) -> np.ndarray:
        """Leaf indices found for v (in (0, total]; modified): the top node by ``searchsorted`` in its
        cumulative sums, then per level below, the first member whose running sum reaches what is left of v."""
        node = np.searchsorted(prefix[1 : self._top_size + 1], v, side="left")
        np.minimum(node, self._top_size - 1, out=node)  # v a rounding above the total
        if not self._runs:
            return node
        f = self.fanout
        v -= prefix.take(node)  # what is left inside the top node
        for level in range(len(self._runs) - 1, -1, -1):
            run = self._runs[level]
            # the first member whose running sum is not below v (argmin of "below": ~2x faster than argmax)
            child = (run.take(node, axis=0) < v[:, None]).argmin(axis=1)
            node *= f
            if level:  # what is left inside the child, for the level below: minus the members before it
                before = run.reshape(-1).take(node + child - 1)  # node + child - 1: wraps where child is 0
                v -= np.where(child > 0, before, 0.0)
            node += child
        return node
