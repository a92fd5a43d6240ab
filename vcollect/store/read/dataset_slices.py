"""Slices from a dataset view: windows of consecutive steps of one episode, read column by column.

The view's episodes are the episode table of :mod:`vcollect.slices`; a window's steps are read at the
dataset's global step rows and its observations at global observation rows (frame stacks, Zstandard chunks
and the sampling cache work as for ``steps_at``). A window's observations and next observations are one run
of stored rows (of frames, for a ``frame_stack`` dataset: its steps' frames and the k - 1 before), read once
and stacked by index, so a window of L steps reads about L + k rows, not 2 * L * k. The rewards are read once,
for returns-to-go. A call costs the batch's rows and a pass over the view's episode lengths, never the
stored steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.errors import EpisodeIndexError
from vcollect.slices import (
    SliceRequest,
    Stacks,
    draw_windows,
    shape_rows,
    strided_stacks,
    window_returns,
    window_steps,
)
from vcollect.spaces import unflatten_batch
from vcollect.store.layout.shard_format import column_path

if TYPE_CHECKING:
    from vcollect.store.read.dataset_index import DatasetIndex, FramesInFlight

__all__ = [
    "draw_view_windows",
    "gather_view_windows",
    "observation_copies",
    "observation_views",
    "read_windows",
    "view_positions",
    "window_at",
]

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


def read_windows(index: DatasetIndex, ids: np.ndarray, steps: np.ndarray, padded: np.ndarray | None,
                 next_observations: bool, limit: int, stacks: Stacks = "copy",
                 pending: list[FramesInFlight] | None = None) -> dict[str, Any]:
    """``steps_at``'s keys (without ``next_observations`` where not asked) of steps ``steps`` (batch, length),
    clamped inside the episodes ``ids``, each (batch, length, ...), ``padded`` rows 0; the rewards taken from
    :meth:`DatasetIndex.step_rewards`. Each window's observations
    (and next observations) are one run of stored rows or frames, read once: stacked by index (``"copy"``), or,
    with ``stacks="view"`` and no window padded, handed out as read-only views over that run. Given a
    ``pending`` list, frames decode threads are still decoding are left in it (as
    :meth:`DatasetIndex.gather_obs_runs` leaves them), for the caller to ``finish()`` (or ``cancel()``)."""
    size, length = steps.shape
    obs_base = index.global_obs_offset.take(ids)
    own = pending is None
    if pending is None:
        pending = []  # frames threads still decode while the step columns are read
    try:
        if stacks == "view" and padded is None:
            obs, nxt = observation_views(index, obs_base, obs_base + steps[:, 0], length, next_observations, limit,
                                         pending)
        else:
            obs, nxt = observation_copies(index, obs_base, obs_base[:, None] + steps, padded, next_observations,
                                          limit)
            if stacks == "view":  # padded rows must read 0: materialised, read-only as views are
                for leaf in obs + (nxt or []):
                    leaf.flags.writeable = False
        rows = (index.global_step_offset.take(ids)[:, None] + steps).reshape(-1)
        groups = index.row_groups(rows, False, length)
        steps_read = {
            "actions": unflatten_batch(index.action_space, [
                index.gather(column_path("actions", leaf.name), leaf.dtype, groups, limit)
                for leaf in index.act_leaves]),
            "rewards": index.step_rewards()[0].take(rows),  # every reward is in memory (for returns-to-go)
            "terminations": index.gather("terminations", np.dtype(np.bool_), groups, limit),
            "truncations": index.gather("truncations", np.dtype(np.bool_), groups, limit),
        }
        if own:
            for frames in pending:
                frames.finish()
    except BaseException:  # the threads stop
        for frames in pending:
            frames.cancel()
        raise
    shaped = shape_rows(steps_read, size, length, padded)
    batch = {"observations": unflatten_batch(index.observation_space, obs), "actions": shaped["actions"],
             "rewards": shaped["rewards"]}
    if nxt is not None:
        batch["next_observations"] = unflatten_batch(index.observation_space, nxt)
    batch["terminations"] = shaped["terminations"]
    batch["truncations"] = shaped["truncations"]
    return batch


def observation_copies(index: DatasetIndex, obs_base: np.ndarray, obs_rows: np.ndarray, padded: np.ndarray | None,
                       next_observations: bool, limit: int) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Each observation leaf's (batch, length, ...) observations at global rows ``obs_rows`` and next
    observations (None where not asked), stacks materialised, ``padded`` rows 0."""
    parts = [obs_rows, obs_rows + 1] if next_observations else [obs_rows]
    out: list[list[np.ndarray]] = [[] for _ in parts]
    for leaf in index.obs_leaves:
        for got, values in zip(out, index.gather_obs_windows(column_path("observations", leaf.name), leaf.dtype, parts,
                                                             obs_base, limit)):
            if padded is not None:
                values[padded] = 0
            got.append(values)
    return out[0], (out[1] if next_observations else None)


def observation_views(index: DatasetIndex, obs_base: np.ndarray, first_rows: np.ndarray, length: int,
                      next_observations: bool, limit: int, pending: list[FramesInFlight] | None = None,
                      ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Each observation leaf's (batch, length, ...) observations of unpadded windows whose first step's
    observation lies at global row ``first_rows``, and next observations (None where not asked), as read-only
    views over one array of each window's stored rows: for a ``frame_stack`` dataset of k frames, its
    length + k - 1 frames (one more for next observations), a row's stack the k frames from its own on (the
    stack axis strided by one frame), the next observations the same shifted by one frame; else its
    length (+ 1) observations, the next observations shifted by one row. Given ``pending``, frames still being
    decoded by threads are left in flight (:meth:`DatasetIndex.gather_obs_runs`): none is to be read before
    each one's ``finish()``."""
    k = 1 if index.frame_stack is None else index.frame_stack.k
    count = length + k - 1 + int(next_observations)
    obs, nxt = [], []
    for leaf in index.obs_leaves:
        frames = index.gather_obs_runs(column_path("observations", leaf.name), leaf.dtype, first_rows - (k - 1),
                                       obs_base, count, limit, pending)
        obs.append(strided_stacks(frames, 0, length, k))
        if next_observations:
            nxt.append(strided_stacks(frames, 1, length, k))
    return obs, (nxt if next_observations else None)


def gather_view_windows(index: DatasetIndex, positions: np.ndarray, episode_ids: np.ndarray, starts: np.ndarray,
                        request: SliceRequest, limit: int, next_observations: bool = True,
                        stacks: Stacks = "copy") -> dict[str, Any]:
    """The batch of the windows (view ``positions`` of episodes, ``starts``): ``steps_at``'s keys (less
    ``next_observations`` where not asked), each (batch, length, ...), rows padded outside the episode 0; plus
    ``mask``, ``timesteps``, ``returns_to_go``, ``partial`` (False: a stored episode has ended),
    ``episode_ids`` (global) and ``start_indices``. ``limit``: the sampling cache's most bytes."""
    size, length = len(positions), request.length
    ids = episode_ids.take(positions)
    lengths = index.length.take(ids)
    steps, mask = window_steps(lengths, starts, length)
    padded = None if mask.all() else ~mask
    pending: list[FramesInFlight] = []  # frames threads still decode while the returns are summed
    try:
        batch = read_windows(index, ids, steps, padded, next_observations, limit, stacks, pending)
        rewards, cum = index.step_rewards()
        batch.update(
            mask=mask,
            timesteps=steps if padded is None else np.where(mask, steps, 0),
            returns_to_go=window_returns(rewards, cum, index.global_step_offset.take(ids), lengths, starts, steps,
                                         mask, batch["rewards"], request.gamma),
            partial=np.zeros(size, dtype=bool),
            episode_ids=ids,
            start_indices=np.asarray(starts, dtype=np.int64),
        )
        for frames in pending:
            frames.finish()
    finally:  # after an error, the threads stop (a no-op for frames finished)
        for frames in pending:
            frames.cancel()
    return batch

