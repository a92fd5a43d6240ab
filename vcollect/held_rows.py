"""HeldRows: rows of one observation leaf kept by reference, the form in which a block of steps hands a
backend's own arrays to the rings.

Neutral ground: the envs' step blocks make them and the rings write them, and neither room imports the
other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["HeldRows"]


class HeldRows:
    """k rows of one leaf, each an array of one value per env that a backend handed over and never writes to
    again, held by reference rather than copied into a staging block: the rings copy each row once, from
    the backend's own array. Shaped (k, num_envs, ...) like the block slice it stands for."""

    __slots__ = ("rows", "shape", "dtype")

    def __init__(self, rows: Sequence[np.ndarray]) -> None:
        if not rows:
            raise ValueError("HeldRows needs at least one row")
        self.rows = list(rows)
        self.shape: tuple[int, ...] = (len(self.rows), *self.rows[0].shape)
        self.dtype = self.rows[0].dtype

    def __len__(self) -> int:
        return len(self.rows)

    def reshape(self, *shape: int) -> np.ndarray:
        """The rows stacked into one array (a copy), reshaped: for writes that need them as one array."""
        return np.stack(self.rows).reshape(*shape)
