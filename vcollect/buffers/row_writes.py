"""Row writes shared by the rings: column-wise block writes and scatters of whole rows as opaque items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vcollect.held_rows import HeldRows


def write_columns(store: np.ndarray, start: int, values: np.ndarray | HeldRows) -> None:
    """``store[:, start + j] = values[j]`` for each of the k rows of values, columns wrapping around the
    (num_envs, capacity, ...) store's capacity (k <= capacity)."""
    capacity = store.shape[1]
    if isinstance(values, HeldRows):  # one write per row, straight from the backend's arrays
        for j, row in enumerate(values.rows):
            store[:, (start + j) % capacity] = row
        return
    stop = start + len(values)
    by_env = values.swapaxes(0, 1)
    if stop <= capacity:
        store[:, start:stop] = by_env
    else:
        split = capacity - start
        store[:, start:] = by_env[:, :split]
        store[:, : stop - capacity] = by_env[:, split:]


def row_items(rows: np.ndarray) -> np.ndarray | None:
    """A 1-D view of C-contiguous ``rows`` (N, ...) holding each row as one opaque (void) item, or None where
    rows are single values or empty. numpy scatters such items several times faster than the rows of a
    2-D array, which it copies through a slower per-row loop."""
    if rows.ndim < 2 or rows[0].nbytes == 0:
        return None
    return rows.reshape(len(rows), -1).view(np.dtype((np.void, rows[0].nbytes)))[:, 0]


def scatter_rows(store: np.ndarray, items: np.ndarray | None, rows: np.ndarray, values: Any) -> None:
    """``store[rows] = values``, through ``items`` (``row_items(store)``) where values are C-contiguous rows
    of the same dtype and shape, the usual case, else numpy's general (casting, broadcasting) assignment."""
    if items is None:
        store[rows] = values
    elif (
        type(values) is np.ndarray
        and values.dtype == store.dtype
        and values.shape[1:] == store.shape[1:]
        and values.flags.c_contiguous
    ):
        if values.ndim > 2:
            values = values.reshape(len(values), -1)
        items[rows] = values.view(items.dtype).ravel()  # (k, 1) items, as a 1-D view
    else:
        store[rows] = values


def write_extras(extras: dict[str, np.ndarray], rows: int, step_idx: np.ndarray | slice, values: Mapping[str, np.ndarray],
                 last: int) -> None:
    """Put the ``last`` rows of each per-step array in ``values`` at the flat rows ``step_idx`` of its column in
    ``extras`` (``rows`` long, made on first use, or anew when the array's row shape changes)."""
    for name, value in values.items():
        column = extras.get(name)
        if column is None or column.shape[1:] != value.shape[1:]:
            column = extras[name] = np.zeros((rows, *value.shape[1:]), value.dtype)
        column[step_idx] = value[len(value) - last :]
