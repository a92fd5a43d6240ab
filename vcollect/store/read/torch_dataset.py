"""A stored dataset as a map-style ``torch.utils.data.Dataset``, safe in DataLoader worker processes.

Made by :meth:`vcollect.Dataset.as_torch_dataset`; imported only then, so reading datasets never needs
torch. Items are read from the shard files when asked (nothing is loaded whole). A DataLoader fetches a
batch through ``__getitems__``: all its transitions in one vectorised read (``Dataset.steps_at``), handed
out as :class:`TransitionRows`, a sequence of per-transition views of that one batch, which torch's default
collate turns back into the batch's own arrays (registered in ``default_collate_fn_map``) instead of
stacking rows one by one.

Worker safety: the wrapped Dataset view pickles without open files or caches (spawned workers open their
own), and a forked worker notices it is a new process and opens its own files instead of using the
parent's HDF5 handles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np
import torch
import torch.utils.data

from vcollect.slices import Pad, check_slice_request, lowest_start, window_counts

Items = Literal["transitions", "episodes", "slices"]

#: dtype kinds torch.as_tensor takes whole (bool, ints, floats, complex); others collate row by row.
_TENSOR_KINDS = frozenset("biufc")


class TorchDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Items are transitions (``len`` = steps of the view), whole episodes (``len`` = episodes) or slices
    (``len`` = the windows of ``length`` steps the view's episodes offer with ``pad``, episode by episode).

    A transition is the dict ``Dataset.sample_steps`` gives for one row (observations, actions, rewards,
    next_observations, terminations, truncations), numpy arrays that torch's default collate stacks into
    tensors. An episode is a dict of its arrays (observations with T+1 rows, actions, rewards,
    terminations, truncations) plus ``id``; episodes differ in length, so batch them with
    ``batch_size=None`` or a collate function of your own. A slice is one window of
    ``Dataset.slices_at`` (each key with a leading ``length`` axis, plus ``mask``, ``timesteps``,
    ``returns_to_go``, ...), which default collate stacks to (batch, length, ...).

    Args:
        dataset: The vcollect Dataset (or view) to read.
        items: What one item is: a transition, or a whole episode.
        cache_bytes: Passed to ``Dataset.steps_at`` for transitions and slices (None: its default); each
            DataLoader worker process builds its own in-memory copy when the columns fit.
        length: Steps per window (slices only).
        pad: Where windows may be padded (slices only): "none", "start", "end" or "both".
        gamma: The discount of the windows' ``returns_to_go`` (slices only).

    Raises:
        ValueError: ``items`` is not 'transitions', 'episodes' or 'slices', ``cache_bytes`` is negative, or
            slices without a good ``length`` / ``pad`` / ``gamma``.
    """

    def __init__(self, dataset: Any, items: Items = "transitions", cache_bytes: int | None = None, *,
                 length: int | None = None, pad: Pad = "none", gamma: float = 1.0) -> None:
        if items not in ("transitions", "episodes", "slices"):
            raise ValueError(f"items must be 'transitions', 'episodes' or 'slices', got {items!r}")
        if cache_bytes is not None and cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
        self.dataset = dataset
        self.items = items
        self.cache_bytes = cache_bytes
        self._episode_indices = np.asarray(dataset.episode_indices, dtype=np.int64)
        if items == "slices":
            if length is None:
                raise ValueError("items='slices' needs the window length: as_torch_dataset('slices', length=64)")
            self._request = check_slice_request(0, length, pad, "window", gamma)
            counts = window_counts(np.asarray(dataset.episode_lengths), self._request.length, pad)
            self._counts = counts
            self._windows = np.cumsum(counts)  # windows before and in each episode: item -> (episode, start)
            self._length = int(self._windows[-1]) if counts.size else 0
        else:
            self._length = int(dataset.total_steps) if items == "transitions" else len(self._episode_indices)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, item: int) -> dict[str, Any]:
        """One item, as a dict of numpy arrays.

        Args:
            item: Its position (negative counts from the end).

        Returns:
            The transition or the episode.

        Raises:
            IndexError: ``item`` is out of range.
        """
        position = self._positions([item])
        if self.items == "slices":
            return _row(self._slices(position), 0)  # type: ignore[no-any-return]
        if self.items == "transitions":
            batch = self.dataset.steps_at(position, cache_bytes=self.cache_bytes)
            return _row(batch, 0)  # type: ignore[no-any-return]
        return self._episodes(position)[0]

    def __getitems__(self, indices: Sequence[int]) -> Sequence[Any]:
        """Many items in one read: what a torch DataLoader's fetcher asks for a batch.

        Args:
            indices: The items' positions (negative counts from the end).

        Returns:
            The transitions as :class:`TransitionRows` (one batch read at once), or a list of one dict per
            episode, in the order of ``indices``.

        Raises:
            IndexError: A position is out of range.
        """
        positions = self._positions(indices)
        if self.items == "episodes":
            return self._episodes(positions)
        if self.items == "slices":
            return TransitionRows(self._slices(positions), len(positions))
        batch = self.dataset.steps_at(positions, cache_bytes=self.cache_bytes)
        return TransitionRows(batch, len(positions))

    def _positions(self, indices: Sequence[int]) -> np.ndarray:
        """``indices`` as positions in [0, len), negative ones counted from the end."""
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        if not positions.size:
            return positions
        low, high = int(positions.min()), int(positions.max())
        if low < -self._length or high >= self._length:
            bad = positions[(positions < -self._length) | (positions >= self._length)][0]
            raise IndexError(f"item {int(bad)} out of range for {self._length} {self.items}")
        return positions % self._length if low < 0 else positions

    def _slices(self, positions: np.ndarray) -> dict[str, Any]:
        """The windows at ``positions`` (counted episode by episode, each episode's by start), read at once."""
        which = np.searchsorted(self._windows, positions, side="right")
        before = self._windows.take(which) - self._counts.take(which)
        starts = lowest_start(self._request.length, self._request.pad) + positions - before
        return self.dataset.slices_at(self._episode_indices.take(which), starts, self._request.length,  # type: ignore[no-any-return]
                                      gamma=self._request.gamma, cache_bytes=self.cache_bytes)

    def _episodes(self, positions: np.ndarray) -> list[dict[str, Any]]:
        """The episodes at ``positions`` of this view, each a dict of its arrays plus ``id``."""
        wanted = self._episode_indices[positions]
        return [
            {
                "id": episode.id,
                "observations": episode.observations,
                "actions": episode.actions,
                "rewards": episode.rewards,
                "terminations": episode.terminations,
                "truncations": episode.truncations,
            }
            for episode in self.dataset.iterate_episodes([int(i) for i in wanted])
        ]


class TransitionRow(Mapping[str, Any]):
    """Row ``index`` of a batch of transitions read at once: a read-only mapping equal to the dict
    ``TorchDataset[i]`` gives for that transition (its values are views into the batch's arrays).

    Args:
        batch: The batch, as ``Dataset.steps_at`` returns it.
        index: The row.
    """

    __slots__ = ("batch", "index")

    def __init__(self, batch: Mapping[str, Any], index: int) -> None:
        self.batch = batch
        self.index = index

    def __getitem__(self, key: str) -> Any:
        return _row(self.batch[key], self.index)

    def __iter__(self) -> Iterator[str]:
        return iter(self.batch)

    def __len__(self) -> int:
        return len(self.batch)

    def __repr__(self) -> str:
        return f"TransitionRow(index={self.index}, keys={list(self.batch)})"


class TransitionRows(Sequence[TransitionRow]):
    """The transitions of one batch read at once: a read-only sequence whose items are the
    :class:`TransitionRow` views of its rows, made when asked.

    Args:
        batch: The batch, as ``Dataset.steps_at`` returns it.
        size: Its rows.
    """

    __slots__ = ("batch", "size")

    def __init__(self, batch: Mapping[str, Any], size: int) -> None:
        self.batch = batch
        self.size = size

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> TransitionRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[TransitionRow]: ...

    def __getitem__(self, index: int | slice) -> TransitionRow | list[TransitionRow]:
        if isinstance(index, slice):
            return [TransitionRow(self.batch, i) for i in range(*index.indices(self.size))]
        if not -self.size <= index < self.size:
            raise IndexError(f"row {index} out of range for {self.size} transitions")
        return TransitionRow(self.batch, index % self.size)

    def __repr__(self) -> str:
        return f"TransitionRows(size={self.size}, keys={list(self.batch)})"


def collate_rows(rows: Sequence[TransitionRow], *,
                 collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] | None = None) -> Any:
    """What torch's default collate makes of ``rows``, without stacking them one by one when they are a
    whole batch in order (:class:`TransitionRows`, what ``__getitems__`` hands out, or its rows listed):
    then each numeric leaf is the batch's own array as a tensor.

    Args:
        rows: The transitions of one DataLoader batch.
        collate_fn_map: torch's collate function map, for leaves collated row by row.

    Returns:
        A dict of tensors (nested like the spaces), as default collate gives for the per-item dicts.
    """
    first = rows[0]
    batch, n = first.batch, len(rows)
    whole = (isinstance(rows, TransitionRows) and rows.batch is batch) or all(
        row.batch is batch and row.index == i for i, row in enumerate(rows))
    if whole and all(_batch_size(value) == n for value in batch.values()):
        return {key: _collate_tree(value, n, collate_fn_map) for key, value in batch.items()}
    return {key: _collate_tree_of_rows([row[key] for row in rows], collate_fn_map) for key in first}


def _batch_size(tree: Any) -> int:
    """Rows of the first leaf of a (nested dict/tuple) batch."""
    while isinstance(tree, (dict, tuple)):
        tree = next(iter(tree.values())) if isinstance(tree, dict) else tree[0]
    return len(tree)


def _collate_tree(tree: Any, n: int, collate_fn_map: Any) -> Any:
    """Default collate of the ``n`` rows of ``tree``, taking numeric leaves whole."""
    if isinstance(tree, dict):
        return {key: _collate_tree(value, n, collate_fn_map) for key, value in tree.items()}
    if isinstance(tree, np.ndarray) and tree.dtype.kind in _TENSOR_KINDS:
        return torch.as_tensor(tree if tree.flags.writeable else tree.copy())
    return _collate_tree_of_rows([_row(tree, i) for i in range(n)], collate_fn_map)


def _collate_tree_of_rows(values: list[Any], collate_fn_map: Any) -> Any:
    """torch's own collate of per-row values (with ``collate_fn_map`` where one was given)."""
    if collate_fn_map is None or _torch_collate is None:
        return torch.utils.data.default_collate(values)
    return _torch_collate(values, collate_fn_map=collate_fn_map)


def _row(tree: Any, index: int) -> Any:
    """Row ``index`` of every array of a (nested dict/tuple) batch."""
    if isinstance(tree, dict):
        return {key: _row(value, index) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(value, index) for value in tree)
    return tree[index]


def _register_collate() -> Callable[..., Any] | None:
    """Hand TransitionRow batches to :func:`collate_rows` in torch's default collate (its documented
    extension point, ``default_collate_fn_map``); returns torch's ``collate``, or None where this torch has
    no collate function map (rows then collate as mappings, row by row, to the same result)."""
    try:
        from torch.utils.data._utils.collate import collate, default_collate_fn_map
    except ImportError:  # pragma: no cover - torch without a collate function map
        return None
    default_collate_fn_map[TransitionRow] = collate_rows
    return collate  # type: ignore[no-any-return]


_torch_collate = _register_collate()
