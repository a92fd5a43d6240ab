"""RowInfos: each step's info dict kept beside the ring row of its transition, as Tianshou's buffers keep
``info``.

A column per info key path (nested dicts become paths, as the store names its info columns), one entry per
flat ring row (``env_id * capacity + row``), made when a key is first seen. A step's info is written at its
step row; a key it lacks reads 0 there (None in a column of objects), as Tianshou's buffer reads a key an
``add`` did not give. Numbers, booleans and arrays of them keep their dtype and shape; anything else (an
object, a string) goes into a column of objects. ``env_id`` (where asked for) is not stored: it is the ring
a row lies in, as Tianshou's vector envs add it to every step's info.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vcollect.errors import InfoStructureError
from vcollect.infos import InfoPath, flatten_info, info_name, nest_info

__all__ = ["RowInfos"]


class RowInfos:
    """Info columns over the flat rows of a ring of ``num_envs`` rings of ``capacity`` rows.

    Args:
        num_envs: Rings.
        capacity: Rows per ring.
    """

    def __init__(self, num_envs: int, capacity: int) -> None:
        self.rows = int(num_envs) * int(capacity)
        self.capacity = int(capacity)
        self.columns: dict[InfoPath, np.ndarray] = {}
        self.env_ids = False
        """Whether reads add ``env_id`` (the ring of each row), as Tianshou's vector envs' infos hold it."""

    def write(self, rows: np.ndarray, infos: Sequence[Mapping[str, Any]]) -> None:
        """Store one info dict per step row.

        Args:
            rows: Flat step rows, distinct.
            infos: Their info dicts, in ``rows`` order.

        Raises:
            InfoStructureError: A key that cannot name a column, or a value of another shape than its column's.
        """
        if not any(infos):
            self._zero(rows, ())
            return
        values: dict[InfoPath, list[Any]] = {}
        where: dict[InfoPath, list[int]] = {}
        for i, info in enumerate(infos):
            for path, value in flatten_info(info, "info").items():
                values.setdefault(path, []).append(value)
                where.setdefault(path, []).append(i)
        self._zero(rows, tuple(values))
        for path, items in values.items():
            at = rows[where[path]]
            column = self._column(path, items[0])
            if column.dtype == object:
                for row, item in zip(at.tolist(), items):
                    column[row] = item
            else:
                self._assign(column, at, items, path)

    def write_batched(self, rows: np.ndarray, info: Mapping[str, Any]) -> None:
        """Store batched infos (arrays with a leading axis along ``rows``, nested dicts of them).

        Args:
            rows: Flat step rows, distinct.
            info: The infos, batched.

        Raises:
            InfoStructureError: A key that cannot name a column, or a value of another shape than its column's.
        """
        flat = flatten_info(info, "info")
        self._zero(rows, tuple(flat))
        for path, value in flat.items():
            array = np.asarray(value)
            first = array[0] if array.ndim and len(array) else array
            self._assign(self._column(path, first), rows, array, path)

    def read(self, rows: np.ndarray) -> dict[str, Any]:
        """The infos at flat ``rows`` (any shape), nested as written, ``rows.shape`` leading.

        Args:
            rows: Flat rows.

        Returns:
            Fresh arrays, nested by key path (empty where no info was ever written).
        """
        out = {path: column[rows] for path, column in self.columns.items()}
        if self.env_ids:
            out[("env_id",)] = np.asarray(rows) // self.capacity
        return nest_info(out)

    def _column(self, path: InfoPath, sample: Any) -> np.ndarray:
        """``path``'s column, made (zeros, or None for objects) from a first value where new."""
        column = self.columns.get(path)
        if column is None:
            value = np.asarray(sample)
            if value.dtype.kind in "biufc":
                column = np.zeros((self.rows, *value.shape), dtype=value.dtype)
            else:
                column = np.full(self.rows, None, dtype=object)
            self.columns[path] = column
        return column

    def _zero(self, rows: np.ndarray, given: tuple[InfoPath, ...]) -> None:
        """Zero the columns of the keys not ``given`` at ``rows`` (a step's info without them)."""
        for path, column in self.columns.items():
            if path not in given:
                column[rows] = None if column.dtype == object else 0

    @staticmethod
    def _assign(column: np.ndarray, rows: np.ndarray, values: Any, path: InfoPath) -> None:
        try:
            column[rows] = values
        except (ValueError, TypeError) as exc:
            raise InfoStructureError(
                f"info[{info_name(path)!r}] does not fit the values stored before ({column.dtype}, shape "
                f"{column.shape[1:]}): {exc}; return the same shape for an info key at every step"
            ) from None
