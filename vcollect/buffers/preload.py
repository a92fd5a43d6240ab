"""Preloading rings from a dataset: whole episodes written into the rings at once, vectorised over all their rows.

The dataset is anything that offers its spaces and ``episode_rows`` (:class:`EpisodeSource`: a vcollect
``Dataset``); functions of a ring's columns (:class:`~vcollect.buffers.columns.RingColumns`), kept apart
from its per-step write path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from vcollect.errors import RingInUseError, SpaceMismatchError

if TYPE_CHECKING:
    from vcollect.buffers.columns import RingColumns

__all__ = ["EpisodeColumns", "EpisodeSource", "check_ring_takes", "check_same_spaces", "check_source", "preload"]


class EpisodeColumns(Protocol):
    """Whole episodes' rows concatenated in order, in flat leaf form (observations T+1 rows per episode,
    the step columns T rows)."""

    @property
    def obs(self) -> list[np.ndarray]: ...
    @property
    def acts(self) -> list[np.ndarray]: ...
    @property
    def rewards(self) -> np.ndarray: ...
    @property
    def terminations(self) -> np.ndarray: ...
    @property
    def truncations(self) -> np.ndarray: ...
    @property
    def lengths(self) -> Sequence[int]: ...


@runtime_checkable
class EpisodeSource(Protocol):
    """What a ring preloads from: spaces, and whole episodes' rows read at once (a vcollect ``Dataset``)."""

    @property
    def observation_space(self) -> gym.Space[Any]: ...
    @property
    def action_space(self) -> gym.Space[Any]: ...
    def episode_rows(self, episode_indices: Iterable[int] | None = None) -> EpisodeColumns: ...


def check_same_spaces(observation_space: gym.Space[Any], action_space: gym.Space[Any], dataset: Any,
                      advice: str) -> None:
    """Refuse a dataset whose observation or action space is not a ring's.

    Args:
        observation_space: The ring's observation space.
        action_space: The ring's action space.
        dataset: Anything with ``observation_space`` and ``action_space``.
        advice: What to do instead, appended to the message.

    Raises:
        SpaceMismatchError: A space differs (the message names both, then ``advice``).
    """
    for what, mine, theirs in (("observation", observation_space, dataset.observation_space),
                               ("action", action_space, dataset.action_space)):
        if mine != theirs:
            raise SpaceMismatchError(f"the dataset's {what} space {theirs} differs from the ring's {what} space "
                                     f"{mine}{advice}")


def check_source(source: Any) -> EpisodeSource:
    """``source`` if it is an EpisodeSource (what ``extend_from`` takes).

    Args:
        source: What was given to preload from.

    Returns:
        ``source``.

    Raises:
        TypeError: It is not a vcollect Dataset (no spaces and ``episode_rows``).
    """
    if not isinstance(source, EpisodeSource):
        raise TypeError(
            f"extend_from takes a vcollect Dataset (load_dataset(...)), got {type(source).__name__}"
        )
    return source


def check_ring_takes(columns: RingColumns, source: EpisodeSource) -> None:
    """Refuse to preload ``source`` into rings whose spaces are not its, or that hold running episodes or
    episode-hook columns.

    Args:
        columns: The ring's columns.
        source: The dataset to preload.

    Raises:
        SpaceMismatchError: The spaces differ.
        RingInUseError: Episodes are running in the ring, or it holds episode-hook columns.
    """
    check_same_spaces(columns.observation_space, columns.action_space, source,
                      "; preload a dataset collected from the ring's envs, or make the ring with the dataset's spaces")
    running = np.flatnonzero(columns.has_episode)
    if running.size:
        raise RingInUseError(
            f"envs {running[:8].tolist()} have episodes running in this ring: preload with extend_from before "
            "collecting (then reset the collector with reset_buffer=False), or preload a new ring"
        )
    if columns.extras:
        raise RingInUseError(
            f"this ring holds episode-hook columns {sorted(columns.extras)} that the dataset's steps have no values "
            "for; preload a ring that no episode-done hook has written to"
        )


def preload(columns: RingColumns, episodes: EpisodeColumns) -> np.ndarray:
    """Write whole episodes into the rings, episode i into env ring ``i % num_envs``, each after its ring's last
    row, as ``start_episodes`` and one ``add`` per step would, followed by giving the episode up (it is data,
    not a running episode: the ring's next ``start_episodes`` follows it). Where an env's episodes hold more
    rows than its ring, the oldest rows are overwritten, as those writes would. Returns the flat rows written.
    """
    n, c = columns.num_envs, columns.capacity
    lengths = np.asarray(episodes.lengths, dtype=np.int64)
    count = lengths.size
    if count == 0:
        return np.zeros(0, dtype=np.intp)
    rows = lengths + 1
    env = np.arange(count, dtype=np.int64) % n
    # each episode's first row among its env's rows written now: cumulative rows of the env's earlier episodes
    order = np.argsort(env, kind="stable")
    env_rows = rows[order]
    ends = np.cumsum(env_rows)
    firsts_sorted = ends - env_rows
    per_env = np.bincount(env, weights=rows, minlength=n).astype(np.int64)
    env_base = np.concatenate([[0], np.cumsum(per_env)[:-1]])
    first = np.empty(count, dtype=np.int64)
    first[order] = firsts_sorted - env_base[env[order]]
    # every row: its env, its place among the env's rows written now, whether it holds a step
    row_env = np.repeat(env, rows)
    within = np.arange(int(rows.sum()), dtype=np.int64) - np.repeat(np.cumsum(rows) - rows, rows)
    place = np.repeat(first, rows) + within
    is_step = within < np.repeat(lengths, rows)
    keep = place >= per_env[row_env] - c  # the last c rows of each env survive
    start = (columns.last_rows % c + 1) % c  # the row after each env's last row
    flat = (row_env * c + (start[row_env] + place) % c).astype(np.intp)
    kept = flat[keep]
    for store, values in zip(columns.obs, episodes.obs):
        store[kept] = values[keep]
    step_keep = keep[is_step]
    step_rows = flat[is_step][step_keep]
    for store, values in zip(columns.act, episodes.acts):
        store[step_rows] = values[step_keep]
    columns.rewards[step_rows] = episodes.rewards[step_keep]
    columns.terminations[step_rows] = episodes.terminations[step_keep]
    columns.truncations[step_rows] = episodes.truncations[step_keep]
    columns.has[kept] = is_step[keep]
    touched = np.unique(env)
    columns.last_rows[touched] = touched * c + (start[touched] + per_env[touched] - 1) % c  # their last rows written
    return kept
