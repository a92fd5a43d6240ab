"""Slices from a dataset view: windows of consecutive steps of one episode, read as ``steps_at`` reads steps.

The view's episodes are the episode table of :mod:`vcollect.slices` in two coordinates: the view's step
positions (what ``Dataset.steps_at`` takes, so frame stacks, Zstandard chunks and the sampling cache work
as for single transitions) and the dataset's global step rows (the rewards read once, for returns-to-go).
A call costs the batch's rows and a pass over the view's episode lengths, never the stored steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.errors import EpisodeIndexError
from vcollect.slices import (
    SliceRequest,
    draw_windows,
    shape_rows,
    window_returns,
    window_steps,
)

if TYPE_CHECKING:
    from vcollect.store.read.dataset_index import DatasetIndex
    from vcollect.store.read.reader import Dataset

__all__ = ["draw_view_windows", "gather_view_windows", "view_positions", "window_at"]


def draw_view_windows(episode_ids: np.ndarray, lengths: np.ndarray, request: SliceRequest,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Windows drawn from a view: (the episode's position in the view, the window's start)."""
    return draw_windows(lengths, request, rng, lambda k: f"episode {int(episode_ids[k])}")


def view_positions(episode_ids: np.ndarray, total_episodes: int, wanted: Any) -> np.ndarray:
    """The positions in a view (its global ``episode_ids``) of the global ids ``wanted``, else
    EpisodeIndexError naming the first one the view lacks."""
    ids = np.asarray(wanted, dtype=np.int64).reshape(-1)
    where = np.full(total_episodes, -1, dtype=np.int64)
    where[episode_ids] = np.arange(episode_ids.size)
    inside = (ids >= 0) & (ids < total_episodes)
    positions = np.full(ids.size, -1, dtype=np.int64)
    positions[inside] = where[ids[inside]]
    if (positions < 0).any():
        bad = int(ids[positions < 0][0])
        raise EpisodeIndexError(f"episode {bad} is not in this dataset (view) of {episode_ids.size} episodes: "
                                "give ids a batch's episode_ids or EpisodeData.id hold")
    return positions


def window_at(lengths: np.ndarray, starts: Any, length: int) -> np.ndarray:
    """``starts`` as int64, else IndexError unless each window holds at least one step of its episode."""
    begin = np.asarray(starts, dtype=np.int64).reshape(-1)
    bad = (begin <= -length) | (begin >= lengths)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise IndexError(f"a window of {length} steps starting at step {int(begin[at])} holds no step of an episode "
                         f"of {int(lengths[at])} steps: starts must lie in [{1 - length}, {int(lengths[at]) - 1}]")
    return begin


def gather_view_windows(dataset: Dataset, index: DatasetIndex, positions: np.ndarray, episode_ids: np.ndarray,
                        cum_lengths: np.ndarray, starts: np.ndarray, request: SliceRequest,
                        cache_bytes: int | None) -> dict[str, Any]:
    """The batch of the windows (view ``positions`` of episodes, ``starts``): ``steps_at``'s keys, each
    (batch, length, ...), rows padded outside the episode 0; plus ``mask``, ``timesteps``, ``returns_to_go``,
    ``partial`` (False: a stored episode has ended), ``episode_ids`` (global) and ``start_indices``."""
    size, length = len(positions), request.length
    ids = episode_ids.take(positions)
    lengths = index.length.take(ids)
    steps, mask = window_steps(lengths, starts, length)
    first = cum_lengths.take(positions) - lengths  # each episode's first step in the view
    padded = None if mask.all() else ~mask
    batch = shape_rows(dataset.steps_at((first[:, None] + steps).reshape(-1), cache_bytes=cache_bytes),
                       size, length, padded)
    rewards, cum = index.step_rewards()
    batch.update(
        mask=mask,
        timesteps=steps if padded is None else np.where(mask, steps, 0),
        returns_to_go=window_returns(rewards, cum, index.global_step_offset.take(ids), lengths, starts, steps, mask,
                                     batch["rewards"], request.gamma),
        partial=np.zeros(size, dtype=bool),
        episode_ids=ids,
        start_indices=np.asarray(starts, dtype=np.int64),
    )
    return batch

