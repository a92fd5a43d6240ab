"""FixedLayout: the rows a backend keeps per env id for a space, one array per leaf of ``vcollect.spaces``.

The leaves (order, shapes, dtypes: Discrete in ``space.dtype``) are those of :func:`vcollect.spaces.leaves`,
so what a backend hands out has the dtypes the rings and the store keep; this adds what a backend does
with rows: write one env's value (or hand out row views to write through), read one back for the env,
gather rows by env id, convert actions.
Text leaves are fixed-width unicode rows; a value that numpy would cut or change on the way into a row
(longer than ``max_length``, not a str, holding NUL) is refused when written instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete, Text

from vcollect.errors import ActionError
from vcollect.spaces import allocate, leaf_values, leaves, unflatten_batch
from vcollect.text_leaves import TextRule

__all__ = ["FixedLayout"]


class FixedLayout:
    """Maps values of a fixed-shape (possibly Dict/Tuple-nested) space to a list of leaf arrays.

    Leaves come in :func:`vcollect.spaces.leaves` order; backends store one row per env id in such leaf
    arrays and gather rows by env id.
    """

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        specs = leaves(space)
        self.paths = [leaf.path for leaf in specs]
        self.shapes = [leaf.shape for leaf in specs]
        self.dtypes = [leaf.dtype for leaf in specs]
        # Text leaves whose values write_row checks (position in the layout, rule)
        self._text = [(i, TextRule(leaf.space)) for i, leaf in enumerate(specs) if isinstance(leaf.space, Text)]
        # flat: one leaf at the root, written straight into its rows; never for Text (write_row checks those)
        self.flat = len(specs) == 1 and specs[0].path == () and not self._text
        self.discrete = [isinstance(leaf.space, Discrete) for leaf in specs]
        # how read_row hands out a leaf: 0 = numpy scalar (Discrete and other scalars), 1 = copy of the row
        self._row_modes = [1 if leaf.shape else 0 for leaf in specs]

    def allocate(self, n: int) -> list[np.ndarray]:
        """Zero-filled leaf arrays with n rows."""
        return allocate(self.space, (n,))

    def nbytes(self, n: int) -> list[int]:
        """Bytes each leaf needs for n rows."""
        return [
            int(np.prod((n,) + shape, dtype=np.int64)) * dtype.itemsize
            for shape, dtype in zip(self.shapes, self.dtypes)
        ]

    def flatten(self, value: Any) -> list[Any]:
        """The leaves of one (or one batched) nested value, in layout order (a plain space's value as it is).

        TypeError, KeyError or ValueError when a nested value does not have the space's structure."""
        return leaf_values(self.space, value)

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """Rebuild the nested value (dict/tuple) from leaves in layout order."""
        if self.flat:
            return leaves[0]
        return unflatten_batch(self.space, leaves)

    def write_row(self, arrays: list[np.ndarray], row: int, value: Any) -> None:
        """Store one value in row `row` (cast to the leaf dtypes); ValueError/KeyError/TypeError if it does
        not fit (Text: not a str, longer than max_length, or holding NUL)."""
        if self.flat:
            arrays[0][row] = value
            return
        values = leaf_values(self.space, value)
        for i, rule in self._text:
            problem = rule.write_problem(values[i])
            if problem is not None:
                raise ValueError(f"leaf {_path_name(self.paths[i])!r}: {problem}")
        for array, leaf in zip(arrays, values):
            array[row] = leaf

    def row_views(self, arrays: list[np.ndarray], rows: Sequence[int]) -> list[np.ndarray] | None:
        """Views of the given rows of a flat layout whose values have one or more axes: ``view[...] = value``
        is the assignment :meth:`write_row` makes (cast and broadcast alike) at two thirds of its cost, for a
        backend's per-env write. None where the layout is nested or its values are scalars (no row view)."""
        if not self.flat or not self.shapes[0]:
            return None
        return [arrays[0][row, ...] for row in rows]

    def read_row(self, arrays: list[np.ndarray], row: int) -> Any:
        """One value from row `row`: array leaves as copies, scalar leaves (Discrete too) as numpy scalars of
        the space dtype, as gymnasium's own vector envs hand them out (Discrete.contains checks those
        about twice as fast as Python ints)."""
        if self.flat:
            return _read_leaf(arrays[0], row, self._row_modes[0])
        return self.unflatten([_read_leaf(a, row, m) for a, m in zip(arrays, self._row_modes)])

    def gather(self, arrays: list[np.ndarray], rows: np.ndarray | None) -> Any:
        """A batch (fresh arrays, never views) of the given rows; all rows when None."""
        if self.flat:
            return arrays[0].copy() if rows is None else arrays[0][rows]
        return self.unflatten([a.copy() for a in arrays] if rows is None else [a[rows] for a in arrays])

    def batch_leaves(self, batch: Any, k: int, what: str = "actions") -> list[np.ndarray]:
        """The leaves of a batch of k values as arrays of the layout dtypes; ActionError if malformed."""
        if self.flat and type(batch) is np.ndarray and batch.dtype == self.dtypes[0] and batch.shape == (k, *self.shapes[0]):
            return [batch]  # one plain leaf of the layout's dtype and shape: what the checks below would return
        try:
            leaves = self.flatten(batch)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ActionError(f"{what} do not match the structure of {self.space}: {exc!r}") from exc
        out = []
        for leaf, path, shape, dtype in zip(leaves, self.paths, self.shapes, self.dtypes):
            try:
                array = np.asarray(leaf, dtype=dtype)
            except (TypeError, ValueError) as exc:
                raise ActionError(
                    f"{what} leaf {_path_name(path)!r} cannot be converted to {dtype}: {exc}"
                ) from exc
            if array.shape != (k,) + shape:
                raise ActionError(
                    f"{what} leaf {_path_name(path)!r} has shape {array.shape}, expected {(k,) + shape} "
                    f"(one row per env id)"
                )
            out.append(array)
        for i, rule in self._text:  # numpy turns numbers into strings and cuts long ones: refuse both
            problem = None if np.asarray(leaves[i]).dtype.kind == "U" else "are not strings"
            if problem is None and out[i].size and int(np.strings.str_len(out[i]).max()) > rule.max_length:
                problem = f"hold a value longer than max_length {rule.max_length} of {rule.space}"
            if problem is not None:
                raise ActionError(f"{what} leaf {_path_name(self.paths[i])!r} {problem}")
        return out


def _read_leaf(array: np.ndarray, row: int, mode: int) -> Any:
    return array[row].copy() if mode == 1 else array[row]


def _path_name(path: tuple[str | int, ...]) -> str:
    return "/".join(str(p) for p in path) or "<root>"
