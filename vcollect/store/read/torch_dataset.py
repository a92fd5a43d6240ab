"""A stored dataset as a map-style ``torch.utils.data.Dataset``, safe in DataLoader worker processes.

Made by :meth:`vcollect.Dataset.as_torch_dataset`; imported only then, so reading datasets never needs
torch. Each item is read from the shard files when asked (nothing is loaded whole). Worker safety: the
wrapped Dataset view pickles without open files or caches (spawned workers open their own), and a forked
worker notices it is a new process and opens its own files instead of using the parent's HDF5 handles.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch.utils.data

Items = Literal["transitions", "episodes"]


class TorchDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Items are transitions (``len`` = steps of the view) or whole episodes (``len`` = episodes).

    A transition is the dict ``Dataset.sample_steps`` gives for one row (observations, actions, rewards,
    next_observations, terminations, truncations), numpy arrays that torch's default collate stacks into
    tensors. An episode is a dict of its arrays (observations with T+1 rows, actions, rewards,
    terminations, truncations) plus ``id``; episodes differ in length, so batch them with
    ``batch_size=None`` or a collate function of your own.
    """

    def __init__(self, dataset: Any, items: Items = "transitions") -> None:
        if items not in ("transitions", "episodes"):
            raise ValueError(f"items must be 'transitions' or 'episodes', got {items!r}")
        self.dataset = dataset
        self.items = items
        self._episode_indices = np.asarray(dataset.episode_indices, dtype=np.int64)
        self._length = int(dataset.total_steps) if items == "transitions" else len(self._episode_indices)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, item: int) -> dict[str, Any]:
        if not -self._length <= item < self._length:
            raise IndexError(f"item {item} out of range for {self._length} {self.items}")
        item %= self._length
        if self.items == "transitions":
            batch = self.dataset.steps_at([item], cache_bytes=0)
            return _first_row(batch)
        episode = next(self.dataset.iterate_episodes([int(self._episode_indices[item])]))
        return {
            "id": episode.id,
            "observations": episode.observations,
            "actions": episode.actions,
            "rewards": episode.rewards,
            "terminations": episode.terminations,
            "truncations": episode.truncations,
        }


def _first_row(tree: Any) -> Any:
    """Row 0 of every array of a (nested dict/tuple) batch."""
    if isinstance(tree, dict):
        return {key: _first_row(value) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_first_row(value) for value in tree)
    return tree[0]
